"""The format readers, grouped by kind."""
