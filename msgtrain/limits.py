"""Default per-graph caps (see :mod:`msgtrain.linearize.budget`), here so that the config can name them without
importing the linearizer."""

DEFAULT_MAX_GRAPH_TOKENS = 16_000_000
DEFAULT_MAX_GRAPH_SAMPLES = 100_000
DEFAULT_MAX_GRAPH_STATE_BYTES = 512 * 1024 * 1024
