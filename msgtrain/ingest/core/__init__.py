"""The reading core: the reader protocol (events), the shared reading machinery (base), input files and siblings, text
checks, tolerant JSON, HTTP bodies, chunk keys."""
