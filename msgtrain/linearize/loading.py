"""Loading a tokenizer by name: a Hugging Face folder or hub id (:mod:`msgtrain.linearize.tokenizer`), a Mistral
tokenizer file encoded through mistral-common (:mod:`msgtrain.linearize.mistral`), or the embedded demo tokenizer.

This module sits above both encoders so that neither imports the other's loader (no import circle): each bundle is
built by its own module, and only the choice between them lives here. One bundle per (name, template) is kept for
the process and loaded again when its files change; only the few used last are kept (a vocabulary of 150k tokens
holds about 120 MB, and a process that loads many, a test session or a loop over models, would keep them all).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from msgtrain.linearize.mistral import load_mistral
from msgtrain.linearize.tokenizer import DEMO_TOKENIZER, TokenizerBundle, _load_hf
from msgtrain.linearize.tokenizer_source import mistral_selection

_CACHE: OrderedDict[tuple[str | None, str | None], tuple[tuple[Any, ...], TokenizerBundle]] = OrderedDict()
KEPT = 4  # bundles kept loaded, the ones used last; a run uses one


def _files_state(*locations: str | None) -> tuple[Any, ...]:
    """What a process-wide tokenizer is reloaded on: the name, size, inode and modification time of each file of a
    tokenizer folder and of a template file (a few stat calls: a folder edited between two runs of one process
    is loaded again, as a new process would)."""
    state: list[Any] = []
    for location in locations:
        if location is None:
            continue
        path = Path(location)
        try:
            entries = [path] if path.is_file() else sorted(path.iterdir()) if path.is_dir() else []
            for entry in entries:
                st = entry.stat()
                state.append((entry.name, st.st_size, st.st_ino, st.st_mtime_ns))
        except OSError:
            state.append((location, None))
    return tuple(state)


def load_tokenizer(name: str | None = None, chat_template: str | None = None) -> TokenizerBundle:
    """Load (once per process, again when its files change) a tokenizer folder / hub id, or the embedded demo
    tokenizer when ``name`` is None."""
    key = (name, chat_template)
    hf_name, mistral_file = mistral_selection(name)
    state = _files_state(hf_name or (str(mistral_file) if mistral_file else None), chat_template)
    hit = _CACHE.get(key)
    if hit is None or hit[0] != state:
        if mistral_file is not None:
            bundle: TokenizerBundle = load_mistral(name or "", mistral_file, chat_template)
        else:
            bundle = TokenizerBundle(_load_hf(hf_name, chat_template), hf_name or DEMO_TOKENIZER)
        _CACHE[key] = (state, bundle)
    _CACHE.move_to_end(key)
    while len(_CACHE) > KEPT:
        _CACHE.popitem(last=False)
    return _CACHE[key][1]
