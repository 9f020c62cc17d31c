"""SWE-agent trajectories (``*.traj``): one JSON document ``{"environment", "trajectory", "history", "info",
"replay_config"}``.

What is read:
- ``history``: the chat the agent kept, one record per message (``role`` system / user / assistant / tool,
  ``content`` as text or text blocks, ``tool_calls`` with JSON-string arguments, ``tool_call_ids`` on tool
  observations, ``thinking_blocks`` for reasoning models). Assistant ``content`` is the model's own text (thought
  and, in the older text-action format, the fenced command); ``thought``/``action`` are fields SWE-agent derived
  from it and are not read again.
- When ``trajectory[i].query`` is present (newer SWE-agent), it is the exact message list sent for step ``i``:
  each step's response is then added under exactly that context (contexts share nodes where they agree), which is
  exact even when history processors rewrote old observations.
- ``trajectory``, ``info`` (``exit_status``, ``model_stats``, ``submission``), ``environment`` and
  ``replay_config`` are part of the same document: the graph's metadata keeps the run facts.

Sampled or not (the format cannot say it per message, so the safe reading is chosen):
- Messages marked ``is_demo`` are demonstrations inlined into the prompt: context, and an assistant demo turn is
  ``injected`` (written by a human or another run, not sampled by this policy).
- A trajectory whose ``info.model_stats`` shows no tokens sent or received, or that has no ``model_stats`` at all,
  was not produced by a model call (a replay of a fixed action list or a hand-made demonstration file, like the
  files under SWE-agent's ``trajectories/demonstrations``): its assistant turns are ``injected``.
- Without per-step ``query``, a run whose config names a history processor that rewrites old messages (e.g.
  ``last_n_observations``) kept more in ``history`` than the model saw: its assistant turns are ``carried``.
- A tool message answers ``tool_call_ids[0]`` (what SWE-agent sends to the API); further ids stay unanswered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, as_list, graph_id_for, has_any
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_shape,
    load_json_document,
    quoted,
)
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)
from msgtrain.model.openai import parse_arguments

POLICY = "swe-agent"
# History processors that only add cache markers leave the content as the model saw it.
_HARMLESS_PROCESSORS = {"default", "cache_control", "DefaultHistoryProcessor"}


class SweAgentReader:
    name = "swe_agent"
    description = "SWE-agent trajectories (.traj JSON: history with role/content/tool_calls, is_demo, info)"
    example = "sample_logs/swe_agent/run.traj"
    document_records = "history"  # a JSON document's records (see msgtrain.ingest.core.base)

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["history"]))

    def detect(self, path: Path, head: bytes) -> bool:
        shape = head_shape(head)
        return (
            shape.layout == "object"
            and shape.has(".history", ".history[].role")
            and (
                path.suffix == ".traj"
                or has_any(shape, ".trajectory", ".replay_config", ".history[].message_type", ".history[].agent")
            )
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        doc = load_json_document(path)
        history = doc.get("history") if isinstance(doc, dict) else None
        if not isinstance(history, list):
            raise ValidationError(
                "a SWE-agent trajectory needs a 'history' list",
                where=str(path),
                code="bad_document",
                hint="pass a .traj file written by SWE-agent",
            )
        build = _TrajBuild(path, doc)
        yield from build.events(history)


class _TrajBuild:
    def __init__(self, path: Path, doc: dict[str, Any]):
        self.path = path
        self.doc = doc
        self.skips = SkipTally(path)
        info = as_dict(doc.get("info"))
        config = as_dict(doc.get("replay_config"))
        agent = as_dict(config.get("agent"))
        model_cfg = as_dict(agent.get("model"))
        stats = as_dict(info.get("model_stats"))
        self.model = model_cfg.get("name") if isinstance(model_cfg.get("name"), str) else None
        self.sampling = {k: model_cfg[k] for k in ("temperature", "top_p") if model_cfg.get(k) is not None}
        # Evidence that a model produced the assistant turns: tokens actually went to and came from a model.
        self.model_ran = any(
            isinstance(stats.get(k), int | float) and stats[k] > 0
            for k in ("tokens_sent", "tokens_received", "instance_cost")
        )
        self.rewriting = _rewriting_processors(agent)
        problem = as_dict(config.get("problem_statement"))
        key = problem.get("id") if isinstance(problem.get("id"), str) else path.name.removesuffix(".traj")
        meta = {
            "format": "swe_agent",
            "instance_id": key,
            "exit_status": info.get("exit_status"),
            "model_stats": stats,
            "model_ran": self.model_ran,
            "history_processors": self.rewriting or None,
        }
        self.graph = MessageGraph(
            graph_id=graph_id_for("swe-agent", key, path),
            policy=POLICY,
            metadata={k: v for k, v in meta.items() if v is not None},
        )
        self.call_names: dict[str, str] = {}

    def _assistant_origin(self, msg: dict[str, Any], by_query: bool) -> Origin:
        if msg.get("is_demo") or not self.model_ran:
            return Origin.INJECTED
        if by_query or self.rewriting:
            # The history is only a record here: the exact contexts are the queries, or history kept more than
            # the model saw.
            return Origin.CARRIED
        return Origin.SAMPLED

    def _generation(self, origin: Origin) -> Generation | None:
        if origin is not Origin.SAMPLED or not (self.model or self.sampling):
            return None
        return Generation(model=self.model, sampling=self.sampling)

    def events(self, history: list[Any]) -> Iterator[ReadEvent]:
        converted: list[tuple[dict[str, Any], AnyMessage]] = []
        rejects: list[ReadReject] = []
        tainted_from: int | None = None
        for i, item in enumerate(history):
            ref = f"history[{i}]"
            try:
                converted.append((item, self._message(item)))
            except MsgtrainError as e:
                tainted_from = len(converted) if tainted_from is None else tainted_from
                rejects.append(
                    ReadReject(SourceRef(str(self.path), ref), e.located(f"{self.path} {ref}"), excerpt(str(item)))
                )
        yield from rejects
        responses = [(item, m) for item, m in converted if m.role == "assistant" and not item.get("is_demo")]
        queries = self._step_queries(len(responses)) if not rejects else None
        chain = Chain(self.graph)
        for k, (item, message) in enumerate(converted):
            if k == tainted_from:
                chain.taint = "rejected history entry"
            if message.role == "assistant":
                origin = self._assistant_origin(item, by_query=queries is not None)
                chain.append(message, origin, self._generation(origin))
            else:
                chain.append(message, Origin.CONTEXT)
        if queries is not None:
            for query, (_, response) in zip(queries, responses, strict=True):
                self._add_under_query(query, response)
        if self.graph.nodes:
            yield ReadGraph(self.graph, SourceRef(str(self.path), "history[0]"), records=len(converted))
        yield from self.skips.events()

    def _step_queries(self, n_responses: int) -> list[list[Any]] | None:
        """The per-step ``query`` message lists, when every step has one and they pair with the responses."""
        steps = [s for s in as_list(self.doc.get("trajectory")) if isinstance(s, dict)]
        queries = [s["query"] for s in steps if isinstance(s.get("query"), list)]
        if not queries or len(queries) != len(steps) or len(queries) != n_responses:
            return None
        return queries

    def _add_under_query(self, query: list[Any], response: AnyMessage) -> None:
        parent: str | None = None
        for item in query:
            msg = self._message(item)
            origin = Origin.CONTEXT
            if msg.role == "assistant":
                origin = Origin.INJECTED if isinstance(item, dict) and item.get("is_demo") else Origin.CARRIED
            parent = self.graph.add_node(parent, msg, origin=origin)
        # The query is exactly what the model was sent, so history processors do not matter here.
        origin = Origin.SAMPLED if self.model_ran else Origin.INJECTED
        self.graph.add_node(parent, response, origin=origin, generation=self._generation(origin))

    def _message(self, item: Any) -> AnyMessage:
        if not isinstance(item, dict):
            raise ValidationError("history entry is not an object", code="bad_record")
        role = item.get("role")
        meta: dict[str, Any] = {k: item[k] for k in ("message_type", "agent") if isinstance(item.get(k), str)}
        if item.get("is_demo"):
            meta["is_demo"] = True
        if role == "tool":
            ids = item.get("tool_call_ids") or ([item["tool_call_id"]] if item.get("tool_call_id") else [])
            call_id = ids[0] if ids else None
            if not isinstance(call_id, str) or call_id not in self.call_names:
                raise ValidationError(
                    f"tool observation answers no earlier call ({call_id})",
                    code="unpaired_result",
                    hint="a tool message needs tool_call_ids naming an earlier tool call",
                )
            return OptionResultMessage(
                result=OptionResultPayload(
                    invocation_id=call_id, option_name=self.call_names[call_id], result=_text(item.get("content"))
                ),
                policy=RUNTIME_POLICY,
                role_hint_for_llm="tool",
                metadata=meta,
            )
        if role not in ("system", "user", "assistant"):
            raise ValidationError(
                f"unknown role {role!r}",
                code="unknown_role",
                hint="SWE-agent history roles are system, user, assistant and tool",
            )
        parts = _parts(item.get("content"))
        if role != "assistant":
            return PartsMessage(parts=tuple(parts), role_hint_for_llm=role, policy=role, metadata=meta)
        reasoning: list[Part] = [
            ReasoningPart(text=str(b.get("thinking", "")), signature=b.get("signature"))
            for b in item.get("thinking_blocks") or []
            if isinstance(b, dict)
        ]
        calls = []
        for k, call in enumerate(item.get("tool_calls") or []):
            call = as_dict(call)
            fn = as_dict(call.get("function"))
            if not call.get("id") or not fn.get("name"):
                raise ValidationError(f"tool_calls[{k}] needs an id and a function name", code="bad_tool_call")
            args, raw = parse_arguments(fn.get("arguments"))
            self.call_names[str(call["id"])] = str(fn["name"])
            calls.append(
                OptionCallPayload(
                    invocation_id=str(call["id"]), option_name=str(fn["name"]), arguments=args, raw_arguments=raw
                )
            )
        if calls:
            return OptionCallMessage(
                parts=(*reasoning, *parts),
                calls=tuple(calls),
                policy=POLICY,
                role_hint_for_llm="assistant",
                metadata=meta,
            )
        return PartsMessage(parts=(*reasoning, *parts), role_hint_for_llm="assistant", policy=POLICY, metadata=meta)


def _rewriting_processors(agent: dict[str, Any]) -> list[str]:
    found = agent.get("history_processors") or agent.get("history_processor") or []
    items = found if isinstance(found, list) else [found]
    names = [str(p.get("type")) if isinstance(p, dict) else str(p) for p in items]
    return [n for n in names if n not in _HARMLESS_PROCESSORS]


def _parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if not isinstance(content, list):
        raise ValidationError("content must be text or a list of blocks", code="bad_content")
    parts: list[Part] = []
    for k, block in enumerate(content):
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        elif btype == "image_url" and isinstance(block.get("image_url"), dict):
            parts.append(MediaPart(modality="image", url=str(block["image_url"].get("url"))))
        else:
            raise ValidationError(
                f"content[{k}] has unknown type {btype!r}", code="bad_content", hint="supported: text, image_url"
            )
    return parts


def _text(content: Any) -> Any:
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    return content if content is not None else ""


READER = SweAgentReader()
