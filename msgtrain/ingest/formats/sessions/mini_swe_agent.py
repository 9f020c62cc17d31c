"""mini-SWE-agent trajectories (``*.traj.json``): one JSON document ``{"info", "messages", "trajectory_format",
"instance_id"?}`` with ``trajectory_format`` ``mini-swe-agent-1`` (v1) or ``mini-swe-agent-1.1`` (v2).

What is read:
- ``messages`` in order, one record each, as OpenAI chat messages: ``system`` and ``user`` (the task and, in v1,
  every observation) are context; every ``assistant`` message is one model response — the THOUGHT text with its
  bash block (v1, text actions) or ``tool_calls`` (v2 tool-call models), whose ``tool`` results pair by
  ``tool_call_id``. ``reasoning_content`` is kept as reasoning. ``extra.response`` (the raw completion) gives the
  response's model and finish reason; ``extra`` fields the agent wrote (actions, timestamps, cost) stay out.
- ``info`` (``model_stats``, ``exit_status``, ``submission``, ``mini_version``, the model config's name) goes to the
  graph's metadata; ``instance_id`` names the graph.

Skipped: the final ``exit`` message (``role: "exit"``, the submission the agent loop records when it stops; never
sent to the model), counted as ``exit_record``.

Safe readings:
- mini-SWE-agent keeps one linear history and sends all of it on every step, so each assistant message is
  ``sampled`` in the context of the messages before it — when ``info.model_stats`` shows the model was called
  (``api_calls`` or ``instance_cost`` > 0). Otherwise (a replay or a hand-made file) its turns are ``injected``.
- A message that cannot be read is rejected and the assistant turns after it are ``carried``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, graph_id_for, has_any
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
from msgtrain.model.message import Generation, OptionCallMessage
from msgtrain.model.openai import from_openai_message

POLICY = "mini-swe-agent"


class MiniSweAgentReader:
    name = "mini_swe_agent"
    description = "mini-SWE-agent trajectories (.traj.json: info + OpenAI-style messages, final 'exit' record)"
    example = "sample_logs/mini_swe_agent/run.traj.json"
    document_records = "messages"  # a JSON document's records (see msgtrain.ingest.core.base)

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["trajectory_format", "model_stats"]))

    def detect(self, path: Path, head: bytes) -> bool:
        shape = head_shape(head)
        if shape.layout != "object" or not shape.has(".messages"):
            return False
        if any(v.startswith("mini-swe-agent") for v in shape.values_at(".trajectory_format")):
            return True
        # ``trajectory_format`` is written last; the head usually holds ``info`` (with the agent's templates).
        return shape.has(".info.model_stats") and (
            has_any(shape, ".info.mini_version", ".info.config.agent.system_template", ".messages[].extra")
            or path.name.endswith(".traj.json")
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        doc = load_json_document(path)
        messages = doc.get("messages") if isinstance(doc, dict) else None
        if not isinstance(messages, list):
            raise ValidationError(
                "a mini-SWE-agent trajectory needs a 'messages' list",
                where=str(path),
                code="bad_document",
                hint="pass a .traj.json file written by mini-SWE-agent",
            )
        info = as_dict(doc.get("info"))
        stats = as_dict(info.get("model_stats"))
        model_cfg = as_dict(as_dict(info.get("config")).get("model"))
        model_name = model_cfg.get("model_name") if isinstance(model_cfg.get("model_name"), str) else None
        model_ran = any(isinstance(stats.get(k), int | float) and stats[k] > 0 for k in ("api_calls", "instance_cost"))
        key = doc.get("instance_id") if isinstance(doc.get("instance_id"), str) else None
        meta = {
            "format": "mini_swe_agent",
            "trajectory_format": doc.get("trajectory_format"),
            "instance_id": key,
            "mini_version": info.get("mini_version"),
            "model": model_name,
            "model_stats": stats or None,
            "model_ran": model_ran,
            "exit_status": info.get("exit_status"),
            "submission": info.get("submission"),
        }
        graph = MessageGraph(
            graph_id=graph_id_for("mini-swe-agent", key or path.name.removesuffix(".traj.json"), path),
            policy=POLICY,
            metadata={k: v for k, v in meta.items() if v is not None},
        )
        chain = Chain(graph)
        skips = SkipTally(path)
        names: dict[str, str] = {}
        records = 0
        for i, item in enumerate(messages):
            ref = f"messages[{i}]"
            if isinstance(item, dict) and item.get("role") == "exit":
                skips.add("exit_record", ref)
                continue
            try:
                message = from_openai_message(item, index=i, call_names=names, policy=POLICY)
            except MsgtrainError as e:
                chain.taint = chain.taint or f"rejected {ref}"
                yield ReadReject(SourceRef(str(path), ref), e.located(f"{path} {ref}"), excerpt(str(item)))
                continue
            records += 1
            if isinstance(message, OptionCallMessage):
                names.update({c.invocation_id: c.option_name for c in message.calls})
            if message.role != "assistant":
                chain.append(message, Origin.CONTEXT)
                continue
            origin = Origin.SAMPLED if model_ran else Origin.INJECTED
            chain.append(message, origin, _generation(item, model_name) if origin is Origin.SAMPLED else None)
        if graph.nodes:
            yield ReadGraph(graph, SourceRef(str(path), "messages[0]"), records=records)
        yield from skips.events()


def _generation(item: dict[str, Any], model_name: str | None) -> Generation | None:
    response = as_dict(as_dict(item.get("extra")).get("response"))
    choices = response.get("choices")
    choice = as_dict(choices[0]) if isinstance(choices, list) and choices else {}
    model = response.get("model") if isinstance(response.get("model"), str) else model_name
    finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
    created = response.get("created") if isinstance(response.get("created"), int) else None
    if model is None and finish is None:
        return None
    return Generation(model=model, finish_reason=finish, created=created)


READER = MiniSweAgentReader()
