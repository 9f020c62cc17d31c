"""msgtrain: logged LLM-agent conversations (message graphs) → token-exact SFT / RL training data.

Pipeline: ``ingest`` (logs → MessageGraph) → ``linearize`` (graphs → token-exact samples) → ``export``
(samples → Parquet / HF datasets for trainers). ``model`` is the typed core they share; ``cli`` sits on top.
"""

from msgtrain.errors import MsgtrainError
from msgtrain.model import (
    MessageBuilder,
    MessageGraph,
    OptionResultBuilder,
    load_graphs,
)

__version__ = "0.1.0"
__all__ = [
    "MessageBuilder",
    "MessageGraph",
    "MsgtrainError",
    "OptionResultBuilder",
    "__version__",
    "load_graphs",
]
