"""Mistral tokenizers through ``mistral-common``, Mistral's reference encoder (what vLLM's ``--tokenizer-mode
mistral`` serves with): messages are encoded to ids by ``MistralTokenizer.encode_chat_completion``, no chat template.

Invariants:
- A ``--tokenizer`` value selects this mode when it starts with ``mistral:`` (a folder, or a ``tekken.json`` /
  ``tokenizer.model.v*`` file), or when it is a folder holding ``tekken.json`` or ``tokenizer.model.v*`` and does
  not start with ``hf:`` (``hf:FOLDER`` loads the same folder through transformers and its chat template).
  In a folder, ``tekken.json`` is preferred, else the highest ``tokenizer.model.vN`` (mistral-common's own order).
- ``P(t)`` = ``encode_chat_completion`` of t's context (serving validation: it ends with a user or tool message);
  ``C(t)`` = the ids of context + t's message (fine-tuning validation: the assistant message, then ``</s>``) past
  ``P(t)``: what the model generates after the prompt, its end token included. When ``P(t)`` is not a prefix of
  those ids the turn is not renderable (never the case for mistral-common's formats: the assistant message is
  appended after ``[/INST]`` / ``[/TOOL_RESULTS]``). System prompt placement per version (before the last user
  message in v2/v3, ``[SYSTEM_PROMPT]`` at the start from v7), re-rendered history and the like show up as a failed
  prefix test between turns, i.e. a ``template_rerender`` cut, detected by tokens.
- The messages are what :mod:`msgtrain.linearize.mistral_messages` makes of them first: call ids served as vLLM
  serves them, what the version cannot encode left out (flagged on a sampled turn that lost it), unanswered calls
  left out of the history, media it cannot encode (or given by URL: never fetched) left out, and serving checks
  relaxed (a system message after an assistant or tool message, tool schemas and function names as logged).
- Content is always text to mistral-common: a log's ``[INST]`` or ``</s>`` is encoded as plain text, never as a
  control token, so no content marking is needed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from msgtrain.errors import ConfigError, RenderError
from msgtrain.linearize.mistral_messages import (
    MEDIA_PARTS,
    answered_only,
    chat_tool,
    media_encodable,
    relaxed_validator,
    served_call_id,
    text_or_calls,
    without_media,
)
from msgtrain.linearize.tokenizer import EncodedCache, SegmentCache, TokenizerBundle
from msgtrain.linearize.tokenizer_source import MISTRAL_INSTALL, MISTRAL_PREFIX, TEKKEN


def _require_mistral_common(path: Path) -> None:
    missing = [pkg for pkg in ("mistral_common",) if importlib.util.find_spec(pkg) is None]
    if path.name != TEKKEN and importlib.util.find_spec("sentencepiece") is None:
        missing.append("sentencepiece")
    if missing:
        raise ConfigError(
            f"{path} is a Mistral tokenizer, encoded through mistral-common, and {' and '.join(missing)} "
            "is not installed",
            hint=f"{MISTRAL_INSTALL}; or load the folder's Hugging Face files and chat template with --tokenizer "
            f"hf:{path.parent}",
            code="mistral_common_missing",
        )


class _Vocabulary:
    """The little of a transformers tokenizer the linearizer reads off ``bundle.hf``: its length, EOS, origin."""

    def __init__(self, size: int, eos: int, path: Path):
        self.size = size
        self.eos_token_id = eos
        self.name_or_path = str(path)

    def __len__(self) -> int:
        return self.size


class MistralBundle(TokenizerBundle):
    """A Mistral tokenizer file loaded through mistral-common: encodes whole conversations
    (:meth:`encode_messages`), never a rendered text."""

    encodes_messages = True

    def __init__(self, path: Path, name: str):  # no super().__init__: there is no transformers tokenizer
        _require_mistral_common(path)
        from mistral_common.protocol.instruct.validator import ValidationMode, get_validator
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        try:
            loaded = MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
            # One encoder (the file is read once: a tekken file takes seconds) under serving validation for
            # prompts and fine-tuning validation for prompt + message, both relaxed as mistral_messages says.
            instruct, normalizer = loaded.instruct_tokenizer, loaded._instruct_request_normalizer
            version = instruct.tokenizer.version
            self.serving, self.training = (
                MistralTokenizer(instruct, relaxed_validator(get_validator(version, mode=mode)), normalizer)
                for mode in (ValidationMode.test, ValidationMode.finetuning)
            )
        except Exception as e:  # mistral-common raises ValueError, JSON and SentencePiece errors: "cannot read"
            raise ConfigError(
                f"mistral-common cannot read the Mistral tokenizer {path}: {type(e).__name__}: {e}",
                hint="pass an intact tekken.json or tokenizer.model.v* (as published with the model)",
                code="unsupported_vocabulary",
            ) from e
        self.path = path
        self.name = name
        inner = self.serving.instruct_tokenizer.tokenizer
        self.raw = inner
        self.version = str(getattr(inner.version, "value", inner.version))
        validator = self.serving._chat_completion_request_validator
        # What this version encodes, read off mistral-common's own objects where they say it: text next to tool
        # calls in one assistant message (v7+), [THINK] chunks (v13+ files that define the think tokens); call ids
        # other than 9 letters and digits from v13 (its validator takes any id but "null": ids are not encoded).
        self.text_with_calls = bool(getattr(validator, "_allow_tool_call_and_content", False))
        self.thinks = getattr(self.serving.instruct_tokenizer, "BEGIN_THINK", None) is not None
        self.free_ids = int(self.version.lstrip("v") or 0) >= 13
        instruct = self.serving.instruct_tokenizer
        self.media = [mod for mod, (_, encoder) in MEDIA_PARTS.items() if getattr(instruct, encoder, None) is not None]
        self.hf = _Vocabulary(int(inner.n_words), int(inner.eos_id), path)
        self.chat_template = ""
        self.named_templates: dict[str, str] = {}
        self.reads_clock = False
        self.stop_ids = {int(inner.eos_id)}
        self.declared_stop_ids = frozenset(self.stop_ids)
        self.special_ids = {int(i) for i in inner.special_ids}
        self.added_ids = np.asarray(sorted(self.special_ids), dtype=np.int32)  # its control tokens, as transformers'
        self.whitespace_ids = set()
        self.encode_calls = 0
        self.encoded_chars = 0
        self.encoded_tokens = 0
        self.renders = 0
        self.segment_cache = SegmentCache(0)  # it encodes messages, never segments of a rendering
        self.encodings = EncodedCache(0)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of the tokenizer file's bytes, its name and the mistral-common version (the encoder)."""
        from msgtrain.cache import version

        h = hashlib.blake2b(digest_size=12)
        h.update(b"mistral-common\0" + self.path.name.encode() + b"\0")
        h.update(self.path.read_bytes())
        h.update(b"\0" + json.dumps([version("mistral_common"), version("sentencepiece")], default=str).encode())
        return h.hexdigest()

    # ------------------------------------------------------------ messages
    def encode_messages(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any], *, final: bool) -> np.ndarray:
        """The ids of a conversation (OpenAI-shaped messages and tool schemas): with ``final`` its last message is
        an assistant message to train (its ids end with ``</s>``), else the ids end with the generation prompt
        after a user or tool message. mistral-common's refusals are :class:`RenderError`s."""
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        try:
            served = self.as_served(messages, final=final)
            request = ChatCompletionRequest.from_openai(served, tools=[chat_tool(t) for t in tools] or None)
            tokenized = (self.training if final else self.serving).encode_chat_completion(request)
        except RenderError:
            raise
        except ImportError as e:  # media that mistral-common decodes with an optional package (opencv)
            raise RenderError(
                f"mistral-common needs an optional package to encode this conversation's media: {e}",
                code="mistral_common_refused",
                hint="pip install 'mistral-common[opencv]' (or leave the media out of the logs)",
            ) from e
        except Exception as e:  # pydantic ValidationError, InvalidMessageStructureException, ...: all "refused"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RenderError(
                f"mistral-common cannot encode this conversation: {type(e).__name__}: {first}",
                code="mistral_common_refused",
                hint="mistral-common checks roles and order (a turn's context must end with a user or tool "
                "message) and tool-call ids (9 letters or digits from v3)",
            ) from e
        self.encode_calls += 1
        self.encoded_tokens += len(tokenized.tokens)
        return np.asarray(tokenized.tokens, dtype=np.int32)

    def as_served(self, messages: Sequence[dict[str, Any]], *, final: bool) -> list[dict[str, Any]]:
        """The messages as this version can take them (:mod:`msgtrain.linearize.mistral_messages`): call ids as
        :func:`served_call_id` serves them, reasoning left out without think tokens, an assistant message's text left
        out next to its tool calls before v7, calls without results left out of the history (``final``: the last
        message is the sampled one and keeps its calls). Messages that need none of it are passed as they are."""
        out = []
        for m in messages:
            calls = m.get("tool_calls") or ()
            if calls:
                ids = [served_call_id(str(c["id"]), free=self.free_ids) if "id" in c else None for c in calls]
                pairs = list(zip(ids, calls, strict=True))
                if any(i is not None and i != c["id"] for i, c in pairs):
                    m = {**m, "tool_calls": [c if i is None else {**c, "id": i} for i, c in pairs]}
            result_id = m.get("tool_call_id")
            if isinstance(result_id, str) and served_call_id(result_id, free=self.free_ids) != result_id:
                m = {**m, "tool_call_id": served_call_id(result_id, free=self.free_ids)}
            if not self.thinks and m.get("reasoning_content") is not None:
                m = {k: v for k, v in m.items() if k != "reasoning_content"}
            out.append(m)
        out = without_media(out, self.media)
        return answered_only(out if self.text_with_calls else text_or_calls(out), keep_last=final)

    def encodes_media(self, modality: str, url: str) -> bool:
        return media_encodable(modality, url, self.media)

    # ------------------------------------------------------------ text
    def encode(self, text: str) -> np.ndarray:
        """``text`` as plain text (no BOS/EOS; control-token text stays text)."""
        return np.asarray(self.raw.encode(text, bos=False, eos=False), dtype=np.int32)

    def decode(self, ids: Iterable[int]) -> str:
        """Text with control tokens as their names (``[INST]``, ``</s>``): each run of ordinary ids decoded as
        text (mistral-common's own keep-specials decoding leaves SentencePiece's ``▁`` in the text)."""
        out: list[str] = []
        run: list[int] = []
        for i in map(int, ids):
            if i in self.special_ids:
                if run:
                    out.append(self.raw.decode(run))
                    run = []
                out.append(self.raw.id_to_piece(i))
            else:
                run.append(i)
        if run:
            out.append(self.raw.decode(run))
        return "".join(out)

    def has_added_text(self, text: str) -> bool:
        return False

    def content_has_control_text(self, value: Any, *, assistant: bool = False) -> bool:
        return False  # mistral-common encodes every content string as text


def load_mistral(name: str, path: Path, chat_template: str | None) -> MistralBundle:
    """The Mistral tokenizer at ``path`` (a ``--chat-template`` does not apply: mistral-common has none)."""
    if chat_template is not None:
        raise ConfigError(
            f"--chat-template does not apply to the Mistral tokenizer {path}: mistral-common encodes messages "
            "itself, with no template",
            hint=f"drop --chat-template, or use the folder's Hugging Face files: --tokenizer hf:{path.parent}",
            code="chat_template_not_applicable",
        )
    return MistralBundle(path, name.removeprefix(MISTRAL_PREFIX))
