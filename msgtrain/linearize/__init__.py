"""linearize: message graphs → token-exact samples.

turns.py (graph → sampled turns with their contexts) · tokenizer.py (tokenizer bundle, exact / safe encoding,
embedded demo tokenizer) · render.py (chat template → text) · plan.py (prefix tree of turns, leaves, cut reasons).
"""

from msgtrain.linearize.loading import load_tokenizer
from msgtrain.linearize.plan import (
    CutReason,
    DropReason,
    LinearizeOptions,
    LinearizeResult,
    TurnOutcome,
    linearize_graph,
)
from msgtrain.linearize.tokenizer import DEMO_TOKENIZER, TokenizerBundle

__all__ = [
    "DEMO_TOKENIZER",
    "CutReason",
    "DropReason",
    "LinearizeOptions",
    "LinearizeResult",
    "TokenizerBundle",
    "TurnOutcome",
    "linearize_graph",
    "load_tokenizer",
]
