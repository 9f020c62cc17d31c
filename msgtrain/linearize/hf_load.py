"""Loading a transformers tokenizer, the one way msgtrain does it (:mod:`msgtrain.linearize.tokenizer` and its
snapshot helper :mod:`msgtrain.linearize.snapshot` both load through here, so neither imports the other upwards)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def auto_tokenizer(source: str, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(source)``, without importing torch when it can be avoided.

    ``AutoTokenizer`` imports transformers' model configuration code, which imports torch when torch is installed
    (2–3 s per process, and each worker is a process). A local folder whose ``tokenizer_config.json`` names its
    ``tokenizer_class`` is loaded with that class directly — the class ``AutoTokenizer`` resolves the same name to;
    ``tests/test_tokenizer_load.py`` checks both give the same vocabulary, special tokens and template. Anything
    else (a hub id, no or unknown class) goes through ``AutoTokenizer``.
    """
    folder = Path(source)
    cls: Any = None
    config = folder / "tokenizer_config.json"
    if folder.is_dir() and config.is_file():
        try:
            name = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
        except (ValueError, OSError):
            name = None
        if isinstance(name, str) and name.isidentifier():
            import transformers

            cls = getattr(transformers, name, None)
            if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedTokenizerBase)):
                cls = None
    if cls is None:
        from transformers import AutoTokenizer

        cls = AutoTokenizer
    return cls.from_pretrained(source, **kwargs)
