"""linearize stage."""
