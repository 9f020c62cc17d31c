"""tau2-bench results files: one JSON document ``{"timestamp", "info", "tasks", "simulations": [...]}``.

What is read:
- Each ``simulations[i]`` is one record and becomes one graph (the agent's side of the conversation): its
  ``messages`` in order, ``role`` assistant (the agent, ``content`` and/or ``tool_calls`` ``{id, name, arguments}``),
  user (the user simulator) and tool (``{id, content, error}``, paired with the call by ``id``).
- ``reward_info.reward`` is the sample's ``reward``; ``task_id``, ``trial``, ``termination_reason``, ``seed`` and
  the simulation ``id`` are extras; the reward breakdown, the domain and the agent/user models go to metadata.
- Call ids are only unique among *open* calls: tau2 agents may name calls ``<tool>_0`` again once the earlier call
  of that name was answered. A result answers the latest open call with its id (the model's validation accepts a
  reused id once the earlier call is closed).

Skipped (not part of what the agent saw):
- Tool calls made by the user simulator (``requestor: "user"``, telecom domain) and their results: the agent only
  sees the user's text. A user message that holds nothing but such calls is dropped; the count is metadata
  ``user_tool_messages``.

The agent's context: tau2's ``llm_agent`` (the default agent) sends ``SYSTEM_PROMPT`` (its fixed
``AGENT_INSTRUCTION`` and the domain policy, ``info.environment_info.policy``; src/tau2/agent/llm_agent.py) as the
system message and the environment's tools as the tool schemas (``info.environment_info.tool_defs`` when the file
holds them). So for that agent the graph starts with that system prompt and carries those tools. For any other agent
implementation the prompt is the implementation's own, not in the file, and for any agent a file without
``tool_defs`` lacks the schemas: the graph is marked context-incomplete (``system_prompt`` / ``tools``).

Safe readings:
- The first message, when it is the agent's, is the orchestrator's fixed greeting (tau2 starts every simulation
  with it, no model call): ``injected``, not trained.
- ``raw_data`` / ``usage`` / ``cost`` are kept in the message metadata when present.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.session_common import as_dict, as_list, graph_id_for
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    RecordTask,
    SourceRef,
    head_shape,
    load_json_document,
    quoted,
)
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import Generation, OptionCallMessage
from msgtrain.model.openai import from_openai_message

POLICY = "tau2-agent"


class Tau2BenchReader:
    name = "tau2_bench"
    description = "tau2-bench results (JSON {info, tasks, simulations[{messages, reward_info}]}), one graph each"
    example = "sample_logs/tau2_bench/results.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["agent_info", "user_scenario", "reward_info"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        # The head of a results file is usually all ``info`` and ``tasks``: ``simulations`` come last.
        return shape.layout == "object" and (
            shape.has(".info.agent_info", ".info.environment_info")
            or shape.has(".tasks[].user_scenario")
            or shape.has(".simulations[].reward_info", ".simulations[].messages")
        )

    def read(self, path: Path) -> Iterator[ReadItem]:
        doc = load_json_document(path)
        sims = doc.get("simulations") if isinstance(doc, dict) else None
        if not isinstance(sims, list):
            raise ValidationError(
                "a tau2-bench results file needs a 'simulations' list",
                where=str(path),
                code="bad_document",
                hint="pass a results JSON written by tau2 run",
            )
        info = as_dict(doc.get("info"))
        for i, sim in enumerate(sims):
            # Each simulation is parsed inside the fault boundary: a bad one is one reject, the others go on.
            ref = SourceRef(str(path), f"simulations[{i}]")
            yield RecordTask(ref, partial(_simulation_events, path, ref, sim, info), raw=sim)


def _simulation_events(path: Path, ref: SourceRef, sim: Any, info: dict[str, Any]) -> list[ReadEvent]:
    graph, extras = _simulation(path, sim, info)
    return [ReadGraph(graph, ref, records=1, extras=extras)]


def _simulation(path: Path, sim: Any, info: dict[str, Any]) -> tuple[MessageGraph, dict[str, Any]]:
    if not isinstance(sim, dict) or not isinstance(sim.get("messages"), list):
        raise ValidationError("simulation needs a 'messages' list", code="bad_record")
    agent = as_dict(info.get("agent_info"))
    user = as_dict(info.get("user_info"))
    env = as_dict(info.get("environment_info"))
    reward_info = as_dict(sim.get("reward_info"))
    model = agent.get("llm") if isinstance(agent.get("llm"), str) else None
    sampling = {
        k: v for k, v in as_dict(agent.get("llm_args")).items() if k in ("temperature", "top_p") and v is not None
    }
    meta = {
        "format": "tau2_bench",
        "domain": env.get("domain_name"),
        "policy": sim.get("policy") or env.get("policy"),
        "agent": {k: agent.get(k) for k in ("implementation", "llm", "llm_args") if agent.get(k) is not None} or None,
        "user_simulator": {k: user.get(k) for k in ("implementation", "llm") if user.get(k) is not None} or None,
        "reward_info": {k: reward_info[k] for k in ("reward_basis", "reward_breakdown") if k in reward_info} or None,
    }
    tools = openai_tools(_tool_defs(env.get("tool_defs")), where="info.environment_info.tool_defs")
    graph = MessageGraph(
        graph_id=graph_id_for("tau2", f"{sim.get('task_id')}:{sim.get('trial')}:{sim.get('id')}", path),
        tools=tools,
        policy=POLICY,
        metadata={k: v for k, v in meta.items() if v is not None},
    )
    generation = Generation(model=model, sampling=sampling) if model or sampling else None
    system = _system_prompt(agent.get("implementation"), sim.get("policy") or env.get("policy"))
    if system is not None:
        graph.append({"role": "system", "content": system}, origin=Origin.CONTEXT)
    missing = ([] if system is not None else ["system_prompt"]) + ([] if tools else ["tools"])
    if missing:
        why = f"tau2 agent {agent.get('implementation')!r}: its prompt or tool schemas are not in the results file"
        mark_context_incomplete(graph, missing, why)
    names: dict[str, str] = {}
    user_tool_messages = 0
    for k, raw in enumerate(sim["messages"]):
        if not isinstance(raw, dict):
            raise ValidationError(f"messages[{k}] is not an object", code="bad_message")
        role = raw.get("role")
        if raw.get("requestor") == "user" and role == "tool":
            user_tool_messages += 1
            continue
        data = _openai_shape(raw, k)
        if data is None:
            user_tool_messages += 1
            continue
        msg = from_openai_message(data, index=k, call_names=names, policy=POLICY)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        extra = {key: raw[key] for key in ("turn_idx", "timestamp", "usage", "cost") if raw.get(key) is not None}
        if extra:
            msg = msg.model_copy(update={"metadata": {**msg.metadata, **extra}})
        if msg.role == "assistant":
            # tau2's orchestrator opens every conversation with a fixed agent greeting, not a model call.
            origin = Origin.INJECTED if k == 0 else Origin.SAMPLED
            graph.append(msg, origin=origin, generation=generation if origin is Origin.SAMPLED else None)
        else:
            graph.append(msg, origin=Origin.CONTEXT)
    if user_tool_messages:
        graph.metadata["user_tool_messages"] = user_tool_messages
    extras: dict[str, Any] = {
        "reward": reward_info.get("reward"),
        "task_id": sim.get("task_id"),
        "trial": sim.get("trial"),
        "simulation_id": sim.get("id"),
        "termination_reason": sim.get("termination_reason"),
        "seed": sim.get("seed"),
    }
    return graph, {k: v for k, v in extras.items() if v is not None}


# src/tau2/agent/llm_agent.py (sierra-research/tau2-bench at 1e7b159c): the default agent's system prompt.
_AGENT_INSTRUCTION = """You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."""
_SYSTEM_PROMPT = "<instructions>\n{agent_instruction}\n</instructions>\n<policy>\n{domain_policy}\n</policy>"
_PROMPTED_AGENTS = frozenset({"llm_agent"})


def _system_prompt(implementation: Any, policy: Any) -> str | None:
    """The system prompt tau2's agent ``implementation`` sent, when the file holds what it is built from."""
    if implementation not in _PROMPTED_AGENTS or not isinstance(policy, str):
        return None
    return _SYSTEM_PROMPT.format(agent_instruction=_AGENT_INSTRUCTION, domain_policy=policy)


def _tool_defs(raw: Any) -> list[Any]:
    """``environment_info.tool_defs``: a name -> schema mapping (or a list of schemas)."""
    if isinstance(raw, dict):
        return [v for v in raw.values() if isinstance(v, dict)]
    return raw if isinstance(raw, list) else []


def _openai_shape(raw: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The message as an OpenAI chat dict; None for a user message holding only the user's own tool calls."""
    role = raw.get("role")
    content = raw.get("content")
    if role == "tool":
        return {"role": "tool", "tool_call_id": raw.get("id"), "content": content if content is not None else ""}
    if role == "user":
        if content in (None, "") and raw.get("tool_calls"):
            return None
        return {"role": "user", "content": content}
    if role != "assistant":
        raise ValidationError(
            f"unknown role {role!r}",
            where=f"messages[{index}]",
            code="unknown_role",
            hint="tau2 messages are assistant, user or tool",
        )
    calls = []
    for k, call in enumerate(as_list(raw.get("tool_calls"))):
        call = as_dict(call)
        if not call.get("id") or not call.get("name"):
            raise ValidationError(f"tool_calls[{k}] needs an id and a name", code="bad_tool_call")
        args = call.get("arguments")
        calls.append(
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": args if args is not None else {}},
            }
        )
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return out


READER = Tau2BenchReader()
