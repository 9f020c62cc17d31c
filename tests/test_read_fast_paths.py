"""The read path's shortcuts agree with the readings they shortcut.

Reading a log asks the same questions of every message many times (is it a wrapper, what is its role); the shortcuts
that answer the common case at once must give what the full reading gives, for any object: checked over seeded random
objects built from the keys the readings look at, and over every object of every sample, fixture and real log.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.common import message_like
from msgtrain.ingest.common.message_like import _unwrap, _unwrap_wrapper
from tests.conftest import SHARED

ROOT = Path(__file__).resolve().parents[1]

# Keys and values the readings of a message look at (wrappers' keys, role and content keys, typed values), so random
# objects hit every branch, not only the plain message.
_KEYS = sorted(
    {
        *message_like._WRAPPER_KEYS,
        *message_like.ROLE_KEYS,
        *message_like.CONTENT_KEYS,
        *message_like.CALL_KEYS,
        *message_like.ROLE_FLAGS,
        "type",
        "lc",
        "id",
        "source",
        "finish_reason",
        "format",
        "tool_results",
        "tool_uses",
        "context",
        "blocks",
        "observation",
        "tool_calls",
        "reasoning_content",
        "metrics",
        "model_name",
        "sender",
        "kind",
    }
)
# One object of each shape a wrapper reading looks for (from the wrappers' docstrings), mutated at random below.
_SEEDS: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {"from": "gpt", "value": "ok"},
    {"type": "ai", "data": {"content": "x", "type": "ai"}},
    {"lc": 1, "type": "constructor", "id": ["langchain", "AIMessageChunk"], "kwargs": {"content": "x"}},
    {"lc": 1, "type": "constructor", "id": ["x", "ChatMessage"], "kwargs": {"content": "x", "role": "user"}},
    {"info": {"role": "assistant", "modelID": "m", "tokens": {"input": 1, "cache": {"read": 1}}}, "parts": []},
    {"step_id": 1, "source": "agent", "message": "m", "tool_calls": [{"tool_call_id": "c", "function_name": "f"}]},
    {"step_id": 2, "source": "system", "message": "m"},
    {"role_at_backend": "assistant", "message": {"content": "x", "func_name": "f", "args": {}}},
    {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": "x"}},
    {"type": "ChatGeneration", "text": "x", "message": {"type": "ai", "data": {"content": "x"}}},
    {"User": {"content": [{"Text": "x"}, {"ToolUse": {"id": "1", "name": "f"}}], "tool_results": []}},
    {"role": "assistant", "segments": [{"type": "text", "text": "x"}], "tool_uses": [{"id": "1"}]},
    {"role": "assistant", "additional_kwargs": {"tool_calls": []}, "blocks": [{"block_type": "text", "text": "x"}]},
    {"role": "user", "content": {"format": 2, "parts": [{"type": "text", "text": "x"}]}},
    {"author": "agent", "content": {"role": "model", "parts": [{"text": "x"}]}},
    {"role": "system", "system_prompt": "p", "text": None},
    {"fragments": [{"type": "REQUEST", "content": "x"}, {"type": "THINK", "content": "y"}]},
    {"role": "assistant", "steps": [{"content": [{"type": "text", "text": "x"}]}, {"status": 1}]},
]
_VALUES: list[Any] = ["user", "assistant", "ai", "agent", "constructor", "", 0, 1, 2, True, None, [], {}, ["a"]]


def _mutated(rng: random.Random, obj: Any, depth: int = 0) -> Any:
    """``obj`` with a few random edits: keys dropped or added (from the keys the readings look at), values replaced
    by other types, nested objects edited in turn."""
    if isinstance(obj, list):
        return [_mutated(rng, v, depth + 1) if rng.random() < 0.5 else v for v in obj]
    if not isinstance(obj, dict):
        return rng.choice(_VALUES) if rng.random() < 0.2 else obj
    out = dict(obj)
    for _ in range(rng.randint(0, 3)):
        edit = rng.random()
        if edit < 0.3 and out:
            del out[rng.choice(sorted(out))]
        elif edit < 0.6:
            out[rng.choice(_KEYS)] = rng.choice([*_VALUES, rng.choice(_SEEDS)])
        elif out:
            key = rng.choice(sorted(out))
            out[key] = _mutated(rng, out[key], depth + 1) if depth < 3 else rng.choice(_VALUES)
    return out


def _full(obj: dict[str, Any]) -> tuple[str, Any]:
    """What the full reading gives: the message (the object itself or another), or the error it raises."""
    try:
        out = _unwrap_wrapper(obj)
    except Exception as e:
        return "raises", type(e)
    return ("same", None) if out is obj else ("other", out)


def _fast(obj: dict[str, Any]) -> tuple[str, Any]:
    try:
        out = _unwrap(obj)
    except Exception as e:
        return "raises", type(e)
    return ("same", None) if out is obj else ("other", out)


def test_unwrap_shortcut_agrees_with_the_full_reading_on_random_objects() -> None:
    rng = random.Random(38)
    for _ in range(4000):
        obj = _mutated(rng, rng.choice(_SEEDS))
        if isinstance(obj, dict):
            assert _fast(obj) == _full(obj), obj


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _json_values(path: Path) -> Iterator[Any]:
    """The JSON a log file holds: the document, or each line of a JSONL file (other files: nothing)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    try:
        yield json.loads(text)
        return
    except ValueError:
        pass
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def _log_files() -> list[Path]:
    roots = [ROOT / "sample_logs", ROOT / "tests" / "fixtures", SHARED / "real_logs"]
    return sorted(p for root in roots if root.is_dir() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("root", ["sample_logs", "tests/fixtures", "../shared/real_logs"])
def test_unwrap_shortcut_agrees_with_the_full_reading_on_every_logged_object(root: str) -> None:
    base = (SHARED / "real_logs") if root.startswith("../shared") else ROOT / root
    if not base.is_dir():
        pytest.skip(f"{root} not present")
    seen = 0
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        for value in _json_values(path):
            for obj in _dicts(value):
                seen += 1
                assert _fast(obj) == _full(obj), f"{path}: {json.dumps(obj, default=str)[:300]}"
    assert seen > 1000


# ---------------------------------------------------------------- a message's identity text, written field by field

_TEXTS = [
    "",
    "a",
    'quote " and \\ slash',
    "line\nbreak\ttab\x01",
    "é ü 中文",
    "emoji \U0001f600",
    "lone \ud800",
    "\udc00",
]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_TEXTS) for _ in range(rng.randint(0, 3)))


def _maybe(rng: random.Random, value: Any) -> Any:
    return value if rng.random() < 0.5 else None


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(9 if depth < 3 else 6)
    scalars: list[Any] = [_text(rng), rng.randint(-5, 5), rng.choice([0.5, float("nan"), float("inf"), -0.0])]
    scalars += [rng.random() < 0.5, None, (1, "t")]
    if pick < 6:
        return scalars[pick]
    if pick < 8:
        keys: list[Any] = [_text(rng) or "k", 1, 9, 10, None, 2.5, True]  # pydantic writes some keys otherwise
        return {rng.choice(keys): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def _argument(rng: random.Random) -> Any:
    """A call argument: flat (a scalar, a list of scalars) as most are, or any value."""
    scalars = [_text(rng), rng.randint(-5, 5), rng.choice([0.5, float("nan"), 1e300]), True, None]
    pick = rng.randrange(3)
    return (
        rng.choice(scalars) if pick == 0 else rng.sample(scalars, rng.randint(0, 3)) if pick == 1 else _json_value(rng)
    )


def _random_message(rng: random.Random) -> Any:
    from msgtrain.model.message import (
        Generation,
        MediaPart,
        OptionCallMessage,
        OptionCallPayload,
        OptionResultMessage,
        OptionResultPayload,
        PartsMessage,
        ReasoningPart,
        TextPart,
    )

    def part() -> Any:
        kind = rng.randrange(3)
        if kind == 0:
            return TextPart(text=_text(rng))
        if kind == 1:
            return ReasoningPart(text=_text(rng), signature=_maybe(rng, _text(rng)), redacted=rng.random() < 0.3)
        modality = rng.choice(["image", "audio", "video", "document"])
        fields = {k: _maybe(rng, _text(rng)) for k in ("mime", "prompt_hint", "id")}
        return MediaPart(modality=modality, url=_text(rng) or "u", **fields)

    common: dict[str, Any] = {
        "policy": rng.choice(["policy", "runtime", "user", _text(rng)]),
        "role_hint_for_llm": rng.choice([None, "system", "user", "assistant", "tool"]),
        "name": _maybe(rng, _text(rng)),
        "step_num": _maybe(rng, rng.randint(0, 9)),
        "metadata": {"usage": {"prompt_tokens": 3}} if rng.random() < 0.3 else {},
        "generation": Generation(model="m", token_ids=(1, 2)) if rng.random() < 0.2 else None,
    }
    parts = tuple(part() for _ in range(rng.randint(0, 3)))
    kind = rng.randrange(3)
    if kind == 0:
        return PartsMessage(parts=parts, **common)
    if kind == 1:
        calls = tuple(
            OptionCallPayload(
                invocation_id=f"c{k}{_text(rng)}",
                option_name=_text(rng) or "f",
                arguments={_text(rng) or "a": _argument(rng) for _ in range(rng.randint(0, 3))},
                raw_arguments=_maybe(rng, _text(rng)),
            )
            for k in range(rng.randint(1, 3))
        )
        return OptionCallMessage(parts=parts, calls=calls, **common)
    result = _text(rng) if rng.random() < 0.6 else _json_value(rng)
    payload = OptionResultPayload(
        invocation_id=_text(rng),
        option_name=_text(rng),
        result=result,
        is_error=rng.random() < 0.3,
        error_type=_maybe(rng, _text(rng)),
        error_message=_maybe(rng, _text(rng)),
        retryable=rng.choice([None, True, False]),
    )
    return OptionResultMessage(result=payload, subgraph={"x": 1} if rng.random() < 0.2 else None, **common)


def _outcome(make: Any) -> tuple[str, Any]:
    """The text ``make`` gives, or the error it raises (pydantic refuses some keys inside a value of any type)."""
    try:
        return "text", make()
    except Exception as e:
        return "raises", type(e)


def _agree(message: Any) -> bool:
    from msgtrain.model.message import canonical_text, identity_text

    return _outcome(lambda: identity_text(message)) == _outcome(lambda: canonical_text(message.identity()))


def test_identity_text_agrees_with_the_serialized_identity_on_random_messages() -> None:
    rng = random.Random(38)
    for _ in range(3000):
        message = _random_message(rng)
        assert _agree(message), repr(message)


@pytest.mark.parametrize("root", ["sample_logs", "tests/fixtures/unseen", "../shared/real_logs"])
def test_identity_text_agrees_with_the_serialized_identity_on_every_message_read(root: str) -> None:
    from msgtrain.ingest.boundary import open_reader, read_events
    from msgtrain.ingest.core.base import ReadGraph, ReadReject
    from msgtrain.run.plan import discover_inputs

    base = (SHARED / "real_logs") if root.startswith("../shared") else ROOT / root
    if not base.is_dir():
        pytest.skip(f"{root} not present")
    files, _ = discover_inputs([str(base)])
    seen = 0
    for path in files:
        reader = open_reader(path)
        if isinstance(reader, ReadReject):
            continue
        for event in read_events(reader, path):
            if isinstance(event, ReadGraph):
                for node in event.graph.nodes.values():
                    seen += 1
                    assert _agree(node.message), f"{path} {node.id}"
    assert seen > 100


# ---------------------------------------------------------------- messages assembled from pieces already checked


def _random_openai_dict(rng: random.Random) -> dict[str, Any]:
    role = rng.choice(["system", "developer", "user", "assistant", "assistant", "tool", "function", "bot"])
    out: dict[str, Any] = {"role": role}
    content_kind = rng.randrange(5)
    if content_kind == 0:
        out["content"] = _text(rng)
    elif content_kind == 1:
        kinds = ["text", "input_text", "image_url", "reasoning", "thinking", "audio"]
        parts: list[Any] = []
        for _ in range(rng.randint(0, 3)):
            kind = rng.choice(kinds)
            if kind == "image_url":
                parts.append({"type": kind, "image_url": {"url": _text(rng) or "u"}})
            elif kind in ("reasoning", "thinking"):
                parts.append({"type": kind, "text": rng.choice([_text(rng), ["a", "b"], 3])})
            else:
                parts.append({"type": kind, "text": _text(rng)})
        out["content"] = parts + ([_text(rng)] if rng.random() < 0.3 else [])
    elif content_kind == 2:
        out["content"] = None
    if rng.random() < 0.5:
        out["name"] = rng.choice([_text(rng) or "n", 7, None])
    if rng.random() < 0.3:
        out["reasoning_content"] = _text(rng)
    if role == "assistant" and rng.random() < 0.5:
        ids = [rng.choice(["a", "b", "c"]) for _ in range(rng.randint(1, 3))]
        out["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": rng.choice(['{"x": 1}', "{bad", {}])}}
            for i in ids
        ]
    if role in ("tool", "function"):
        out["tool_call_id"] = rng.choice(["a", "", None])
        if rng.random() < 0.3:
            out["result"] = _json_value(rng)
        if rng.random() < 0.2:
            out["answers_text_call"] = True
        if rng.random() < 0.2:
            out["is_error"] = True
    return out


def _built_both_ways(data: dict[str, Any], policy: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``from_openai_message`` as it assembles its messages, and with every model validated instead."""
    from msgtrain.model import openai

    def outcome() -> Any:
        try:
            m = openai.from_openai_message(dict(data), call_names={"a": "f"}, policy=policy)
        except Exception as e:
            return ("raises", type(e), str(e))
        parts = [(type(p), p.__pydantic_fields_set__, repr(p)) for p in getattr(m, "parts", ())]
        return (type(m), m, repr(m), m.model_dump(), _outcome(m.canonical_json), m.__pydantic_fields_set__, parts)

    fast = outcome()
    with monkeypatch.context() as patched:
        patched.setattr(openai, "assembled", lambda cls, fields: cls(**fields))
        slow = outcome()
    return [fast, slow]


def test_messages_assembled_from_checked_pieces_equal_validated_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(38)
    for _ in range(2000):
        data = _random_openai_dict(rng)
        policy = rng.choice(["policy", "policy", 5])
        fast, slow = _built_both_ways(data, policy, monkeypatch)
        assert fast == slow, data


# ---------------------------------------------------------------- an environment's JSON, from the C encoder directly


def test_compact_json_is_json_dumps_text_and_errors() -> None:
    from msgtrain.model.graph import _compact

    def dumps(value: Any, sort_keys: bool) -> Any:
        return _outcome(lambda: json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False))

    circular: list[Any] = []
    circular.append(circular)
    odd = [circular, {"x": object()}, {1: 2, "a": 1}, {(1, 2): 3}, "top \ud800 text", 2.5, None]
    rng = random.Random(38)
    for value in [*odd, *(_json_value(rng) for _ in range(2000))]:
        for sort_keys in (True, False):
            assert _outcome(lambda v=value, s=sort_keys: _compact(v, sort_keys=s)) == dumps(value, sort_keys), value


# ---------------------------------------------------------------- a prompt's template markers, looked for in place


def test_rendered_template_text_is_found_in_place_as_in_a_stripped_copy() -> None:
    from msgtrain.ingest.common import content_parts
    from msgtrain.ingest.common.content_parts import rendered_template_text

    openings, endings = content_parts._RENDERED_OPENINGS, content_parts._RENDERED_ASSISTANT_OPENINGS

    def stripped(text: str) -> str | None:
        head, tail = text.lstrip(), text.rstrip(" ")
        hit = next((m for m in openings if head.startswith(m)), None)
        return hit or next((m for m in endings if tail.endswith(m) or tail.endswith(m.strip())), None)

    pieces = [*openings, *endings, *(m.strip() for m in endings), " ", "\n", "\t", "\u3000", "text", "<|", ""]
    rng = random.Random(38)
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
        assert rendered_template_text(text) == stripped(text), repr(text)


# ---------------------------------------------------------------- a head's marks, looked up among its quoted texts


def test_a_quoted_mark_is_among_the_quoted_texts_exactly_when_it_is_in_the_text() -> None:
    from msgtrain.ingest.core.marks import quoted_texts

    pieces = ['"', "role", "content", '"role"', "\\", "x", '""', " ", "é"]
    marks = ['"role"', '"content"', '"x"', '""', '"rolex"', '" "']
    rng = random.Random(38)
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        quoted = quoted_texts(text)
        for mark in marks:
            assert (mark in text) == (mark[1:-1] in quoted), (text, mark)


@pytest.mark.parametrize("root", ["sample_logs", "tests/fixtures", "../shared/real_logs"])
def test_candidates_found_among_quoted_texts_are_those_found_by_scanning(root: str) -> None:
    from msgtrain.ingest.core.base import read_head
    from msgtrain.ingest.core.marks import head_text, quoted_texts
    from msgtrain.ingest.registry import entries

    base = (SHARED / "real_logs") if root.startswith("../shared") else ROOT / root
    if not base.is_dir():
        pytest.skip(f"{root} not present")
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        text = head_text(read_head(path))
        quoted = quoted_texts(text) if text is not None else None
        for entry in entries():
            assert entry.admits(path, text, quoted) == entry.admits(path, text), (path, entry.name)


# ---------------------------------------------------------------- a format vote, stopped once decided


def test_a_vote_stopped_once_decided_elects_the_reader_a_full_count_elects() -> None:
    from msgtrain.ingest.detect import _vote_decided

    def full(accepts: list[list[bool]]) -> int | None:
        votes = [sum(row[i] for row in accepts) for i in range(len(accepts[0]))] if accepts else []
        best = max(votes, default=0)
        return None if best == 0 or best * 2 < len(accepts) else votes.index(best)

    def stopped(accepts: list[list[bool]]) -> int | None:
        votes = [0] * (len(accepts[0]) if accepts else 0)
        for k, row in enumerate(accepts):
            votes = [v + a for v, a in zip(votes, row, strict=True)]
            decided, winner = _vote_decided(votes, len(accepts) - k - 1, len(accepts))
            if decided:
                return winner
        best = max(votes, default=0)
        return None if best == 0 or best * 2 < len(accepts) else votes.index(best)

    rng = random.Random(38)
    for _ in range(20000):
        readers, records = rng.randint(0, 4), rng.randint(2, 9)
        bias = [rng.random() for _ in range(readers)]
        accepts = [[rng.random() < b for b in bias] for _ in range(records)]
        assert stopped(accepts) == full(accepts), accepts
