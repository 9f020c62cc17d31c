"""PrimeIntellect verifiers rollouts: the ``results.jsonl`` that ``vf-eval`` (and ``GenerateOutputs`` saved to disk)
writes, one rollout per line: ``{example_id, prompt, completion, reward, answer, info, task, metrics..., tool_defs,
token_usage, error}``.

What is read:
- Each line is one record and one graph: the ``prompt`` message list, then the ``completion`` one. Assistant
  messages of ``completion`` are ``sampled``, each in everything before it; assistant messages of ``prompt``
  (few-shot examples) are context. Rollouts of one example stay separate graphs (their rewards differ);
  ``example_id`` is an extra, so GRPO groups can be rebuilt from the rows.
- Tool calls are OpenAI tool calls, as objects or as the JSON strings verifiers serialises them to. Tool messages
  that carry no ``tool_call_id`` (older outputs) answer the calls of the assistant message before them, in order.
- Tool schemas: ``tool_defs`` (``{name, description, parameters}``), else ``info.oai_tools`` (older outputs).
- ``reward`` is the sample's reward; ``example_id``, ``task``, ``answer`` and every numeric metric logged beside
  them are extras; ``info`` goes to graph metadata, and its scalar fields are an extra too (``info``).

Safe readings:
- A completion that starts by repeating the prompt's trailing messages is the harness's rendering of a trajectory
  whose real prompt was longer (the RLM harness prepends its own system prompt; verifiers slices the full
  conversation at the original prompt's length): the repeat is read once, and the graph is marked
  context-incomplete (``system_prompt``), since the prompt the model saw is not in the file.
- Tool calls with no tool schemas in the record mark the graph context-incomplete (``tools``).
- A completion-style rollout (``prompt`` and ``completion`` raw strings) is rejected (``not_a_chat``): no chat
  template renders what that model saw.
- A rollout with an empty completion (a failed generation; ``error`` says why) is skipped with that reason; one with
  a completion but no assistant message is skipped as holding no turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.content_parts import parse_json_field
from msgtrain.ingest.common.conversation_files import Step, base_graph_id, build_linear_graph, iter_raw_records
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    head_objects,
    quoted,
)
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Origin
from msgtrain.model.message import OptionCallMessage
from msgtrain.model.openai import from_openai_message

POLICY = "verifiers-policy"
_EXTRA_KEYS = ("example_id", "id", "task", "answer", "is_completed", "is_truncated", "stop_condition")
# Bookkeeping numbers that are not metrics of the rollout.
_NOT_METRICS = frozenset({"generation_ms", "scoring_ms", "total_ms", "reward"})


class VerifiersReader:
    name = "verifiers"
    description = "PrimeIntellect verifiers rollouts (vf-eval results.jsonl: prompt, completion, reward, info)"
    example = "sample_logs/verifiers/results.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["reward"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        return any(_is_rollout(o) for o in head_objects(head))

    def read(self, path: Path) -> Iterator[ReadItem]:
        for rec in iter_raw_records(path):
            values = rec.value if rec.ref.record == "file" and isinstance(rec.value, list) else None
            if values is None:
                if isinstance(rec.value, Exception):
                    yield ReadReject(rec.ref, rec.value, excerpt(rec.raw or b""))  # type: ignore[arg-type]
                    continue
                yield RecordTask(rec.ref, partial(_rollout_events, path, rec.ref, rec.value), raw=rec.raw or rec.value)
                continue
            for i, value in enumerate(values):  # a JSON array of rollouts (a results file saved as one document)
                ref = SourceRef(str(path), f"item {i}")
                yield RecordTask(ref, partial(_rollout_events, path, ref, value), raw=value)


def _is_rollout(o: dict[str, Any]) -> bool:
    return (
        isinstance(o.get("prompt"), list | str)
        and isinstance(o.get("completion"), list | str)
        and "reward" in o
        and any(k in o for k in ("example_id", "id", "task", "answer", "info"))
    )


def _rollout_events(path: Path, ref: SourceRef, rec: Any) -> list[ReadEvent]:
    if not isinstance(rec, dict) or not _is_rollout(rec):
        raise ValidationError(
            "not a verifiers rollout: it needs 'prompt', 'completion' and 'reward'",
            where=str(ref),
            code="bad_record",
            hint="each line of results.jsonl is one rollout as vf-eval saves it",
        )
    completion = rec["completion"]
    if completion in ([], ""):
        error = rec.get("error")
        why = f": {str(error)[:120]}" if error else ""
        return [ReadSkip(ref, f"rollout with an empty completion (failed generation{why})")]
    if isinstance(rec["prompt"], str) or isinstance(completion, str):
        raise ValidationError(
            "a completion-style rollout (raw text prompt and completion) is not a chat",
            where=str(ref),
            code="not_a_chat",
            hint="msgtrain renders chats with a chat template; a raw-text rollout has no template to render",
        )
    prompt_msgs, completion_msgs = list(rec["prompt"]), list(completion)
    repeated = _restated_prompt(prompt_msgs, completion_msgs)
    steps = _steps(prompt_msgs, completion_msgs, repeated, str(ref))
    if not any(s.origin is Origin.SAMPLED for s in steps):
        return [ReadSkip(ref, "rollout whose completion holds no assistant message")]
    tools = _tools(rec, str(ref))
    info = rec.get("info") if isinstance(rec.get("info"), dict) else {}
    graph = build_linear_graph(
        steps, base_id=base_graph_id(path, ref), tools=tools, metadata={"info": info} if info else None, policy=POLICY
    )
    if repeated:
        mark_context_incomplete(
            graph, ["system_prompt"], "the completion restates the prompt: the harness sent a prompt not in the file"
        )
    if not tools and any(isinstance(s.message, OptionCallMessage) for s in steps):
        mark_context_incomplete(graph, ["tools"], "tool calls, but the rollout logs no tool_defs")
    return [ReadGraph(graph, ref, records=1, extras=_extras(rec))]


def _restated_prompt(prompt: list[Any], completion: list[Any]) -> int:
    """How many leading completion messages repeat the prompt's trailing ones (role and content), 0 if none."""
    for k in range(min(len(prompt), len(completion)), 0, -1):
        if all(_same(a, b) for a, b in zip(prompt[-k:], completion[:k], strict=True)):
            return k
    return 0


def _same(a: Any, b: Any) -> bool:
    return (
        isinstance(a, dict)
        and isinstance(b, dict)
        and (a.get("role"), a.get("content"))
        == (
            b.get("role"),
            b.get("content"),
        )
        and a.get("role") != "assistant"
    )


def _steps(prompt: list[Any], completion: list[Any], repeated: int, where: str) -> list[Step]:
    names: dict[str, str] = {}
    open_calls: list[str] = []
    steps: list[Step] = []
    for part, items, start in (("prompt", prompt, 0), ("completion", completion, repeated)):
        for i in range(start, len(items)):
            data = _openai_message(items[i], open_calls, f"{where} {part}[{i}]")
            msg = from_openai_message(data, index=i, call_names=names, policy=POLICY)
            if isinstance(msg, OptionCallMessage):
                names.update({c.invocation_id: c.option_name for c in msg.calls})
                open_calls = [c.invocation_id for c in msg.calls]
            sampled = part == "completion" and msg.role == "assistant"
            steps.append(Step(msg, origin=Origin.SAMPLED if sampled else Origin.CONTEXT, index=i))
    return steps


def _openai_message(item: Any, open_calls: list[str], where: str) -> dict[str, Any]:
    """A logged message as an OpenAI message dict: tool calls decoded from their JSON strings, and a tool message
    without ``tool_call_id`` given the next unanswered call of the assistant message before it."""
    if not isinstance(item, dict):
        raise ValidationError("a message is not a JSON object", where=where, code="bad_message")
    data = dict(item)
    calls = data.get("tool_calls")
    if calls is None:
        data.pop("tool_calls", None)
    elif isinstance(calls, list):
        data["tool_calls"] = [
            parse_json_field(c, what="a tool call", where=f"{where}.tool_calls[{k}]", code="bad_tool_call")
            for k, c in enumerate(calls)
        ]
    if data.get("role") == "tool" and not data.get("tool_call_id"):
        if not open_calls:
            raise ValidationError(
                "a tool message without tool_call_id follows no unanswered tool call",
                where=where,
                code="unpaired_result",
                hint="log tool_call_id on tool messages",
            )
        data["tool_call_id"] = open_calls.pop(0)
    elif data.get("role") == "tool" and data["tool_call_id"] in open_calls:
        open_calls.remove(data["tool_call_id"])
    return data


def _tools(rec: dict[str, Any], where: str) -> list[Any]:
    raw = rec.get("tool_defs")
    if not raw and isinstance(rec.get("info"), dict):
        raw = rec["info"].get("oai_tools") or rec["info"].get("tool_defs")
    return openai_tools(raw or [], where=f"{where}.tool_defs")


def _extras(rec: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {k: rec[k] for k in _EXTRA_KEYS if k in rec and rec[k] is not None}
    reward = rec.get("reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        extras["reward"] = float(reward)
    metrics: dict[str, Any] = rec["metrics"] if isinstance(rec.get("metrics"), dict) else {}
    flat = {k: v for k, v in rec.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    found = {**flat, **metrics}
    extras["metrics"] = {k: v for k, v in found.items() if k not in _NOT_METRICS and k not in _EXTRA_KEYS}
    # info's scalar fields (a task name, an id) ride on every row, so rows can be grouped by them (--group-by
    # info.task); its lists and objects (tool schemas) stay in the graph's metadata only.
    raw_info = rec.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    scalars = {k: v for k, v in info.items() if isinstance(v, str | int | float | bool)}
    if scalars:
        extras["info"] = scalars
    return extras


READER = VerifiersReader()
