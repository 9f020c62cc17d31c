"""Inspect AI eval logs: ``.json`` (one ``EvalLog`` document) and ``.eval`` (a zip of ``header.json`` and one
``samples/<id>_epoch_<n>.json`` per sample), log format versions 2 and 3.

What is read:
- Each sample (``samples[i]`` of a ``.json`` log, one ``samples/*.json`` entry of a ``.eval`` archive) is one
  record and becomes one graph; its ``epoch`` and ``id`` name it, so the epochs of one sample are distinct graphs.
- The exact contexts come from the sample's ``model`` events: each event's ``input`` (or, in condensed logs, the
  ``input_refs`` ranges into the sample's ``message_pool``), its ``tools`` and the choices of its ``output`` are one
  call (:mod:`msgtrain.ingest.common.call_log`): every reply is ``sampled`` in precisely the messages and tools the
  model was sent, and calls that share a history share nodes. ``attachment://`` references are resolved from the
  sample's ``attachments``; one that cannot be resolved rejects the sample (its context is unknown).
- Model events under a ``scorer`` / ``scorers`` span are the grader's calls, not the policy's: they are left out
  (counted in metadata ``grader_calls``). A model event that failed (``error``, no choices) is counted in
  ``failed_calls``.
- A sample without model events (an older log, or events not logged) falls back to ``messages``: each assistant
  message generated during the eval is sampled in the messages before it. Those contexts lack the tool schemas the
  model was sent whenever tools were used: the graph is marked context-incomplete (``tools``).
- ``scores`` become the reward: the scorer named first in the eval spec (else the first logged), its value mapped
  the way Inspect's own metrics map it (``C``/``I``/``P``/``N`` = 1 / 0 / 0.5 / 0, booleans 1 / 0, numbers as
  they are, a one-key dict by its value). Every scorer's value is kept in metadata ``scores``.

Message mapping (Inspect ``ChatMessage`` to what its OpenAI-compatible providers send): ``content`` strings and
``text`` / ``image`` parts as they are; ``reasoning`` parts (not redacted ones) as the reply's reasoning; tool calls
``{id, function, arguments}``; a tool result with an ``error`` reads ``Error: <message>``, as Inspect sends it.

A log without samples (``log_samples`` off, or a run that produced none) is one skipped record with that reason.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import ParseError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGraph
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.base import check_whole_file
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadSkip,
    RecordTask,
    SourceRef,
    head_shape,
    load_json_document,
)
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Env
from msgtrain.model.message import AnyMessage, Generation, OptionCallMessage
from msgtrain.model.openai import from_openai_message

POLICY = "inspect-model"
_ZIP_MAGIC = b"PK\x03\x04"
_SAMPLE_ENTRY = re.compile(r"^samples/(.+)_epoch_(\d+)\.json$")
_ATTACHMENT = "attachment://"
_GRADER_SPANS = frozenset({"scorer", "scorers"})
# Inspect media parts -> the OpenAI part types msgtrain's message model reads.
_MEDIA_PARTS = {"audio": "input_audio", "video": "video_url", "document": "file"}
_SCORE_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


class InspectAIReader:
    name = "inspect_ai"
    description = "Inspect AI eval logs (.json log format v2, .eval zip): one graph per sample and epoch"
    example = "sample_logs/inspect_ai/popularity.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=('"eval"', "_journal/start.json", "header.json"))

    def detect(self, path: Path, head: bytes) -> bool:
        if head.startswith(_ZIP_MAGIC):
            # The first entries of an .eval archive: its journal, then samples; header.json is written last.
            return b"_journal/start.json" in head[:4096] or b"header.json" in head[:4096]
        shape = head_shape(head)
        return shape.layout == "object" and shape.has(".eval.task", ".eval.model") and shape.has(".version")

    def explain(self, path: Path, head: bytes) -> str | None:
        del path
        if head.startswith(_ZIP_MAGIC):
            return "a zip archive, but not an Inspect .eval log (no _journal/start.json or header.json entry)"
        return None

    def read(self, path: Path) -> Iterator[ReadItem]:
        if _is_zip(path):
            yield from self._read_archive(path)
            return
        doc = load_json_document(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("eval"), dict):
            raise ValidationError(
                "an Inspect log is one JSON object with an 'eval' spec",
                where=str(path),
                code="bad_document",
                hint="pass a log written by `inspect eval` (log format v2), or its .eval archive",
            )
        spec = _LogSpec.of(doc)
        samples = doc.get("samples")
        if not isinstance(samples, list) or not samples:
            yield ReadSkip(SourceRef(str(path), "file"), "inspect log without samples (log_samples off or none run)")
            return
        for i, sample in enumerate(samples):
            ref = SourceRef(str(path), f"samples[{i}]")
            yield RecordTask(ref, partial(_sample_events, path, ref, sample, spec), raw=sample)

    def _read_archive(self, path: Path) -> Iterator[ReadItem]:
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as e:
            raise ParseError(
                f"not a readable zip archive: {e}",
                where=str(path),
                code="bad_archive",
                hint="an .eval log is a zip file; a truncated copy cannot be read",
            ) from e
        with archive:
            names = archive.namelist()
            header_name = "header.json" if "header.json" in names else "_journal/start.json"
            header = _archive_json(archive, header_name, path) if header_name in names else {}
            spec = _LogSpec.of(header if isinstance(header, dict) else {})
            entries = sorted(
                (m.group(1), int(m.group(2)), name) for name in names if (m := _SAMPLE_ENTRY.match(name)) is not None
            )
            if not entries:
                yield ReadSkip(
                    SourceRef(str(path), "file"), "inspect log without samples (log_samples off or none run)"
                )
                return
            for _, _, name in sorted(entries, key=lambda e: (_natural(e[0]), e[1])):
                ref = SourceRef(str(path), name)
                yield RecordTask(ref, partial(_archived_sample_events, archive, name, path, ref, spec), raw=name)


def _first_model(sample: dict[str, Any]) -> str | None:
    events = sample.get("events")
    for e in events if isinstance(events, list) else []:
        if isinstance(e, dict) and e.get("event") == "model" and isinstance(e.get("model"), str):
            return str(e["model"])
    return None


def _natural(key: str) -> tuple[Any, ...]:
    """Sample ids in the order Inspect lists them: numbers numerically, others as text."""
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def _is_zip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == _ZIP_MAGIC


def _archive_json(archive: zipfile.ZipFile, name: str, path: Path) -> Any:
    info = archive.getinfo(name)
    check_whole_file(info.file_size, f"{path} ({name})", f"{name}", "split the log into smaller ones")
    try:
        return json.loads(archive.read(name).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ParseError(f"{name} is not JSON: {e}", where=f"{path} ({name})", code="bad_json") from e
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ParseError(
            f"{name} cannot be read from the archive: {e}", where=f"{path} ({name})", code="bad_archive"
        ) from e


class _LogSpec:
    """What a sample needs from its log: the task, the evaluated model and the primary scorer."""

    def __init__(self, task: str | None, model: str | None, scorer: str | None):
        self.task, self.model, self.scorer = task, model, scorer

    @classmethod
    def of(cls, doc: dict[str, Any]) -> _LogSpec:
        spec: dict[str, Any] = doc["eval"] if isinstance(doc.get("eval"), dict) else doc
        scorers = spec.get("scorers")
        head = scorers[0] if isinstance(scorers, list) and scorers else None
        first = head.get("name") if isinstance(head, dict) else None
        task = spec.get("task")
        model = spec.get("model")
        return cls(
            task if isinstance(task, str) else None,
            model if isinstance(model, str) else None,
            first if isinstance(first, str) else None,
        )


def _archived_sample_events(
    archive: zipfile.ZipFile, name: str, path: Path, ref: SourceRef, spec: _LogSpec
) -> list[ReadEvent]:
    return _sample_events(path, ref, _archive_json(archive, name, path), spec)


def _sample_events(path: Path, ref: SourceRef, sample: Any, spec: _LogSpec) -> list[ReadEvent]:
    if not isinstance(sample, dict):
        raise ValidationError("a sample is not a JSON object", where=str(ref), code="bad_record")
    resolve = _Attachments(sample.get("attachments"), str(ref))
    sample_id, epoch = sample.get("id"), sample.get("epoch", 1)
    log = CallLogGraph(
        f"{path.name}#{sample_id}:epoch{epoch}",
        metadata={"task": spec.task, "sample_id": sample_id, "epoch": epoch},
        policy=spec.model or _first_model(sample) or POLICY,
    )
    counts = _add_model_calls(log, sample, resolve, str(ref))
    if log.calls == 0:
        _add_message_history(log, sample, resolve, str(ref))
    extras: dict[str, Any] = {"sample_id": sample_id, "epoch": epoch}
    if spec.task:
        extras["task"] = spec.task
    extras.update({k: v for k, v in counts.items() if v})
    extras.update(_score_extras(sample.get("scores"), spec.scorer))
    if log.calls == 0:
        return [ReadSkip(ref, "inspect sample with no model call and no generated message")]
    return [ReadGraph(log.finish(), ref, records=1, extras=extras)]


class _Attachments:
    """Resolves ``attachment://<hash>`` strings against a sample's ``attachments`` (Inspect moves long strings
    there); an unknown reference is an error, since the text the model saw is then unknown."""

    def __init__(self, table: Any, where: str):
        self.table = table if isinstance(table, dict) else {}
        self.where = where

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            if not value.startswith(_ATTACHMENT):
                return value
            key = value[len(_ATTACHMENT) :]
            if key not in self.table:
                raise ValidationError(
                    f"{value} is not among the sample's attachments",
                    where=self.where,
                    code="missing_attachment",
                    hint="read the log as Inspect wrote it (attachments are stored with each sample)",
                )
            return self.table[key]
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value


def _span_kinds(events: list[Any]) -> dict[str, tuple[str | None, str | None]]:
    """Span id -> (its type, its parent span id)."""
    spans: dict[str, tuple[str | None, str | None]] = {}
    for e in events:
        if isinstance(e, dict) and e.get("event") == "span_begin" and isinstance(e.get("id"), str):
            spans[e["id"]] = (e.get("type"), e.get("parent_id"))
    return spans


def _in_grader_span(span: Any, spans: dict[str, tuple[str | None, str | None]]) -> bool:
    seen: set[str] = set()
    while isinstance(span, str) and span in spans and span not in seen:
        seen.add(span)
        kind, parent = spans[span]
        if kind in _GRADER_SPANS:
            return True
        span = parent
    return False


def _add_model_calls(log: CallLogGraph, sample: dict[str, Any], resolve: _Attachments, where: str) -> dict[str, int]:
    events = sample.get("events")
    counts = {"grader_calls": 0, "failed_calls": 0}
    if not isinstance(events, list):
        return counts
    spans = _span_kinds(events)
    pool: list[Any] = sample["message_pool"] if isinstance(sample.get("message_pool"), list) else []
    for k, event in enumerate(events):
        if not isinstance(event, dict) or event.get("event") != "model":
            continue
        if _in_grader_span(event.get("span_id"), spans):
            counts["grader_calls"] += 1
            continue
        output: dict[str, Any] = event["output"] if isinstance(event.get("output"), dict) else {}
        choices = [c for c in output.get("choices") or [] if isinstance(c, dict) and isinstance(c.get("message"), dict)]
        if not choices:
            counts["failed_calls"] += 1
            continue
        at = f"{where} events[{k}]"
        raw_input = event.get("input") or []
        refs = event.get("input_refs")
        if not raw_input and isinstance(refs, list):
            raw_input = [m for start, end in refs for m in pool[start:end]]
        model = event.get("model") if isinstance(event.get("model"), str) else None
        policy = log.graph.policy
        context, names = _messages(resolve(raw_input), at, policy)
        tools = [_tool_schema(t) for t in resolve(event.get("tools") or []) if isinstance(t, dict)]
        samples = []
        for i, choice in enumerate(choices):
            msg = _message({**resolve(choice["message"]), "role": "assistant"}, f"{at} choices[{i}]", names, policy)
            gen = Generation(
                model=output.get("model") if isinstance(output.get("model"), str) else model,
                finish_reason=choice.get("stop_reason") if isinstance(choice.get("stop_reason"), str) else None,
            )
            if isinstance(output.get("usage"), dict):  # the prompt size the provider reported for this call
                msg = msg.model_copy(update={"metadata": {**msg.metadata, "usage": output["usage"]}})
            samples.append(Step(msg, generation=gen))
        env = Env.make(openai_tools(tools, where=f"{at}.tools"))
        log.add(Call(context=[Step(m, index=i) for i, m in enumerate(context)], samples=samples, env=env))
    return counts


def _add_message_history(log: CallLogGraph, sample: dict[str, Any], resolve: _Attachments, where: str) -> None:
    """Contexts from ``messages`` alone: each generated assistant message is sampled in the messages before it."""
    raw = sample.get("messages")
    if not isinstance(raw, list):
        return
    messages, _ = _messages(resolve(raw), f"{where} messages", log.graph.policy)
    steps = [Step(m, index=i) for i, m in enumerate(messages)]
    used_tools = False
    for i, (item, step) in enumerate(zip(raw, steps, strict=True)):
        used_tools = used_tools or isinstance(step.message, OptionCallMessage)
        if step.message.role != "assistant" or (isinstance(item, dict) and item.get("source") == "input"):
            continue
        log.add(Call(context=steps[:i], samples=[step]))
    if used_tools and log.calls:
        mark_context_incomplete(log.graph, ["tools"], "the sample logs no model events, so no tool schemas")


def _messages(raw: Any, where: str, policy: str) -> tuple[list[AnyMessage], dict[str, str]]:
    if not isinstance(raw, list):
        raise ValidationError("a model input is not a list of messages", where=where, code="bad_record")
    names: dict[str, str] = {}
    out = [_message(m, f"{where}[{i}]", names, policy) for i, m in enumerate(raw)]
    return out, names


def _message(data: Any, where: str, names: dict[str, str], policy: str) -> AnyMessage:
    """One Inspect ``ChatMessage`` as its OpenAI-compatible providers send it (see the module docstring).

    Every assistant message of a sample takes the sample's one ``policy`` (the evaluated model): a reply and the
    same reply in a later call's input must be the same node, whatever model id each logged."""
    if not isinstance(data, dict):
        raise ValidationError("a message is not a JSON object", where=where, code="bad_message")
    role = data.get("role")
    content, reasoning = _content(data.get("content"), where)
    out: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        if reasoning:
            out["reasoning_content"] = reasoning
        calls = data.get("tool_calls") or []
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("function"), "arguments": c.get("arguments")},
            }
            for c in calls
            if isinstance(c, dict)
        ]
    elif role == "tool":
        out["tool_call_id"] = data.get("tool_call_id")
        error = data.get("error")
        if isinstance(error, dict) and error.get("message") is not None:
            out["content"] = f"Error: {error['message']}"
        elif isinstance(content, list):
            out["content"] = "".join(p["text"] for p in content if p.get("type") == "text")
        if isinstance(data.get("function"), str) and out["tool_call_id"] not in names:
            names[str(out["tool_call_id"])] = data["function"]
    msg = from_openai_message(out, call_names=names, policy=policy)
    if isinstance(msg, OptionCallMessage):
        names.update({c.invocation_id: c.option_name for c in msg.calls})
    return msg


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    """An Inspect ``ToolCall`` ``{id, function, arguments}`` as an OpenAI tool call."""
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": call.get("function"), "arguments": call.get("arguments")},
    }


def _content(content: Any, where: str) -> tuple[Any, str]:
    """Inspect content (a string or a list of typed parts) as OpenAI content, and the reasoning it holds."""
    if not isinstance(content, list):
        return content, ""
    parts: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "reasoning":
            if not part.get("redacted") and isinstance(part.get("reasoning"), str):
                reasoning.append(part["reasoning"])
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image")}})
        elif kind in ("audio", "video", "document"):
            url = part.get(kind) or part.get("file") or ""
            parts.append(
                {"type": "file", "file": {"file_id": url}}
                if kind == "document"
                else {"type": "image_url", "image_url": {"url": url}}
            )
        else:
            raise ValidationError(
                f"content[{j}] has an Inspect part type msgtrain does not map ({kind!r})",
                where=where,
                code="bad_content",
                hint="supported: text, reasoning, image, audio, video, document",
            )
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"], "\n".join(reasoning)
    return parts, "\n".join(reasoning)


def _tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """An Inspect ``ToolInfo`` ``{name, description, parameters}`` as the bare function schema it is."""
    return {k: tool[k] for k in ("name", "description", "parameters") if k in tool}


def score_value(value: Any) -> float | None:
    """A score's value as a number, the way Inspect's metrics read it; None when it has no single number."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        if value in _SCORE_LETTERS:
            return _SCORE_LETTERS[value]
        try:
            return float(value)
        except ValueError:
            return None
    if isinstance(value, dict) and len(value) == 1:
        return score_value(next(iter(value.values())))
    return None


def _score_extras(scores: Any, primary: str | None) -> dict[str, Any]:
    if not isinstance(scores, dict) or not scores:
        return {}
    values = {name: s.get("value") for name, s in scores.items() if isinstance(s, dict)}
    out: dict[str, Any] = {"scores": values}
    name = primary if primary in values else next(iter(values), None)
    reward = score_value(values.get(name)) if name is not None else None
    if reward is not None:
        out["reward"] = reward
        out["reward_scorer"] = name
    return out


READER = InspectAIReader()
