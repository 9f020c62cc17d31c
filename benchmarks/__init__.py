"""Benchmarks of msgtrain convert (see README.md); not part of the installed package."""
