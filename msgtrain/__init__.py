"""msgtrain: logged LLM-agent conversations (message graphs) → token-exact SFT / RL training data.

Pipeline: ``ingest`` (logs → MessageGraph) → ``linearize`` (graphs → token-exact samples) → ``export``
(samples → Parquet / HF datasets for trainers). ``model`` is the typed core they share; ``cli`` sits on top.

The public names below are imported on first use (PEP 562), so ``msgtrain --help`` does not pay for building
the pydantic models.

Dependencies print no banner: transformers announces on import that PyTorch is missing ("Models won't be
available"), noise for a tool that never loads a model. Its advisory messages are off in every process that imports
msgtrain before transformers (the command line, its workers, Ray tasks), unless the environment says otherwise
(``TRANSFORMERS_NO_ADVISORY_WARNINGS`` set, even empty, is kept as it is).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from msgtrain.errors import MsgtrainError

if TYPE_CHECKING:
    from msgtrain.model import MessageBuilder, MessageGraph, OptionResultBuilder, load_graphs

__version__ = "0.1.0"
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
__all__ = [
    "MessageBuilder",
    "MessageGraph",
    "MsgtrainError",
    "OptionResultBuilder",
    "__version__",
    "load_graphs",
]

_FROM_MODEL = frozenset({"MessageBuilder", "MessageGraph", "OptionResultBuilder", "load_graphs"})


def __getattr__(name: str) -> Any:
    if name in _FROM_MODEL:
        from msgtrain import model

        return getattr(model, name)
    raise AttributeError(f"module 'msgtrain' has no attribute {name!r}")
