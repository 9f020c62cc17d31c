"""Loading Hugging Face tokenizers for the tools (audit-template, inspect), from local folders only.

Invariants:
- Nothing is downloaded: a ``--tokenizer`` that is a hub id is looked up in the local Hugging Face cache only
  (``local_files_only``), so a typo fails fast with a clear message instead of hanging on the network. What is a
  folder and what a hub id is decided by :func:`msgtrain.linearize.tokenizer_source.resolve_tokenizer`.
- A folder that holds a chat template but no vocabulary (only ``tokenizer_config.json``) is refused: transformers
  would load it as a tokenizer with a handful of tokens and every later check would be silently wrong.
- ``--chat-template FILE`` replaces the tokenizer's template; FILE is a Jinja file, or a JSON file with a
  ``chat_template`` key (a ``tokenizer_config.json``), so a template-only folder can be paired with the
  tokenizer whose vocabulary it shares.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgtrain.errors import TokenizerError
from msgtrain.linearize.tokenizer_source import resolve_tokenizer, unreadable_vocabulary

if TYPE_CHECKING:
    from msgtrain.linearize.tokenizer import TokenizerBundle


def read_chat_template(path: str | Path) -> str:
    """The template text of a ``.jinja`` file or of a JSON file with a ``chat_template`` key."""
    p = Path(path)
    if p.is_dir():
        for name in ("chat_template.jinja", "tokenizer_config.json"):
            if (p / name).is_file():
                return read_chat_template(p / name)
        raise TokenizerError(
            "folder has no chat_template.jinja or tokenizer_config.json",
            where=str(p),
            hint="pass the template file itself with --chat-template FILE",
        )
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise TokenizerError(
            f"cannot read chat template: {e.strerror}",
            where=str(p),
            hint="pass a .jinja file or a tokenizer_config.json",
        ) from e
    if p.suffix != ".json":
        return text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TokenizerError(f"invalid JSON: {e.msg}", where=f"{p}:{e.lineno}") from e
    template = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(template, list):
        # Several named templates (HF's list form): the "default" one is what apply_chat_template uses.
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if not isinstance(template, str) or not template:
        raise TokenizerError(
            "JSON file has no chat_template string",
            where=str(p),
            hint="pass a tokenizer_config.json that holds a chat template, or a .jinja file",
        )
    return template


def load_hf_tokenizer(tokenizer: str | Path, chat_template: str | Path | None = None) -> Any:
    """A transformers tokenizer from a local folder (or the local HF cache), with an optional template override.

    A missing folder or one without a vocabulary is a :class:`~msgtrain.errors.ConfigError`; a vocabulary
    transformers cannot read or a hub id not in the cache is a :class:`TokenizerError`; each names what to fix.
    """
    from transformers.utils import logging as hf_logging

    from msgtrain.linearize.tokenizer import auto_tokenizer

    hf_logging.set_verbosity_error()  # "PyTorch was not found" and similar banners are noise for a CLI tool
    source = resolve_tokenizer(str(tokenizer), download=False)  # a hub id: its cached snapshot's folder
    assert source.folder is not None
    try:
        tok = auto_tokenizer(str(source.folder))
    except Exception as e:  # transformers raises OSError, ValueError, KeyError... depending on what is missing
        raise unreadable_vocabulary(source.folder, str(tokenizer), e) from e
    where = str(tokenizer)
    if chat_template is not None:
        tok.chat_template = read_chat_template(chat_template)
    if not tok.chat_template:
        raise TokenizerError(
            "tokenizer has no chat template",
            where=where,
            hint="pass one with --chat-template FILE (.jinja or tokenizer_config.json)",
        )
    return tok


def control_token_ids(tok: Any) -> set[int]:
    """Ids of the added tokens marked special: the ones a plain encode turns content text into."""
    return {i for i, t in tok.added_tokens_decoder.items() if t.special}


def added_token_ids(tok: Any) -> set[int]:
    """Ids of every added token, special or not (``<think>``, ``<tool_call>`` are added but not special)."""
    return set(tok.added_tokens_decoder)


def stop_token_ids(tok: Any, folder: str | Path | None) -> set[int]:
    """Tokens generation stops on: the tokenizer's eos plus ``generation_config.json``'s eos ids, if present."""
    out: set[int] = set()
    if tok.eos_token_id is not None:
        out.add(int(tok.eos_token_id))
    if folder is not None:
        cfg = Path(folder) / "generation_config.json"
        if cfg.is_file():
            try:
                eos = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token_id")
            except (OSError, json.JSONDecodeError, AttributeError):
                eos = None
            if isinstance(eos, int):
                out.add(eos)
            elif isinstance(eos, list):
                out.update(int(x) for x in eos if isinstance(x, int))
    return out


_BUNDLES: OrderedDict[tuple[str, str | None], TokenizerBundle] = OrderedDict()


def load_bundle(tokenizer: str | Path | None, chat_template: str | Path | None = None) -> TokenizerBundle:
    """The linearizer's tokenizer bundle: the embedded demo tokenizer for None, a Mistral tokenizer (folder or
    ``mistral:`` value) through mistral-common, else a checked local folder.

    Loaded once per process and (folder, template), of which the few used last are kept: a bundle is immutable
    once built and loading a large vocabulary takes seconds.
    """
    from msgtrain.linearize import TokenizerBundle, load_tokenizer
    from msgtrain.linearize.loading import KEPT
    from msgtrain.linearize.tokenizer_source import mistral_selection

    template = str(chat_template) if chat_template is not None else None
    if tokenizer is None or mistral_selection(str(tokenizer))[1] is not None:
        return load_tokenizer(None if tokenizer is None else str(tokenizer), template)  # demo, or mistral-common
    key = (str(tokenizer), template)
    if key not in _BUNDLES:
        _BUNDLES[key] = TokenizerBundle(load_hf_tokenizer(tokenizer, chat_template), str(tokenizer))
    _BUNDLES.move_to_end(key)
    while len(_BUNDLES) > KEPT:  # the few used last, as msgtrain.linearize.loading keeps them
        _BUNDLES.popitem(last=False)
    return _BUNDLES[key]
