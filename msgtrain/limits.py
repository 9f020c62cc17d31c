"""Default per-graph caps (see :mod:`msgtrain.linearize.budget`), here so that the config can name them without
importing the linearizer."""

# The largest record (a JSON line, a list item, an event file) and the largest decoded HTTP body, in MiB: what one
# record may make a worker hold is a small multiple of it (docs/performance.md, Memory).
DEFAULT_MAX_RECORD_MB = 64
DEFAULT_MAX_GRAPH_TOKENS = 16_000_000
DEFAULT_MAX_GRAPH_SAMPLES = 100_000
DEFAULT_MAX_GRAPH_STATE_BYTES = 512 * 1024 * 1024
