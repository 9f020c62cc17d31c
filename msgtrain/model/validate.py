"""Validation rules for message lists and graphs (seed 004's rules plus the seeds' roles).

Every problem names where it is (graph, node, ``message[i]``), what was wrong (a stable ``code``), and how to fix
it. ``validate_*`` functions return all problems; ``raise_for_problems`` turns them into one ValidationError.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import AnyMessage, OptionCallMessage, OptionResultMessage, PartsMessage

VALID_ROLES = ("system", "user", "assistant", "tool")
USER_INPUT_ROLES = ("user", "system")


@dataclass(frozen=True)
class Problem:
    where: str
    code: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" + (f" (fix: {self.hint})" if self.hint else "")

    def to_json(self) -> dict[str, str]:
        return {"where": self.where, "code": self.code, "message": self.message, "hint": self.hint}


def validate_dicts(messages: Sequence[Any], *, where: str = "") -> list[Problem]:
    """Seed 004's Validate() over raw OpenAI-style dicts."""
    out: list[Problem] = []
    pre = f"{where} " if where else ""
    # Call ids must be unique among *open* calls only: once a result answered a call, its id may be used again
    # (tau2-bench agents name calls ``<tool>_0`` afresh after each answer). ``issued`` is every id ever called.
    open_ids: set[str] = set()
    issued: set[str] = set()
    for i, m in enumerate(messages):
        loc = f"{pre}message[{i}]"
        if not isinstance(m, dict):
            out.append(Problem(loc, "bad_message", "message is not an object"))
            continue
        role = m.get("role")
        content = m.get("content")
        if role not in (*VALID_ROLES, "developer"):
            hint = f"use one of {', '.join(VALID_ROLES)}"
            out.append(Problem(loc, "unknown_role", f"unknown role {_quote(role)}", hint))
            continue
        if role == "tool":
            if not m.get("tool_call_id"):
                out.append(
                    Problem(
                        loc,
                        "missing_tool_call_id",
                        "tool message missing tool_call_id",
                        "set tool_call_id to the id of the call it answers",
                    )
                )
            elif m["tool_call_id"] not in issued:
                out.append(
                    Problem(
                        loc,
                        "unpaired_result",
                        f"tool result answers no call ({m['tool_call_id']})",
                        "an earlier assistant message must carry a tool call with this id",
                    )
                )
            if not m.get("name") and m.get("tool_call_id") not in issued:
                out.append(Problem(loc, "missing_name", "tool message missing name", "set name to the tool's name"))
            open_ids.discard(m.get("tool_call_id"))
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if content in (None, "", []) and not calls and not m.get("reasoning_content"):
                out.append(Problem(loc, "empty_assistant", "assistant message has no content and no tool calls"))
            for k, c in enumerate(calls):
                fn = c.get("function", c) if isinstance(c, dict) else {}
                cid = c.get("id") if isinstance(c, dict) else None
                if not cid or not fn.get("name"):
                    out.append(Problem(loc, "bad_tool_call", f"tool_calls[{k}] missing id or name"))
                    continue
                if cid in open_ids:
                    out.append(
                        Problem(
                            loc,
                            "duplicate_id",
                            f"tool call id {cid} is used twice while the first call is unanswered",
                            "ids must be unique among calls that have no result yet",
                        )
                    )
                open_ids.add(cid)
                issued.add(cid)
        elif content is None or content == "" or content == []:
            out.append(Problem(loc, "empty_content", f"{role} message has empty content"))
    return out


def validate_messages(messages: Sequence[AnyMessage], *, where: str = "") -> list[Problem]:
    """The same rules over typed messages (pairing of calls and results by invocation id)."""
    out: list[Problem] = []
    pre = f"{where} " if where else ""
    # Invocation ids are unique among *open* calls: a result closes its call and the id may then be reused by a
    # new call (a new call, not a duplicate). ``issued`` is every id ever called, for pairing results.
    open_calls: dict[str, int] = {}
    issued: set[str] = set()
    for i, m in enumerate(messages):
        loc = f"{pre}message[{i}]"
        if isinstance(m, OptionCallMessage):
            for c in m.calls:
                if c.invocation_id in open_calls:
                    first = open_calls[c.invocation_id]
                    out.append(
                        Problem(
                            loc,
                            "duplicate_id",
                            f"invocation id {c.invocation_id} is still open from message[{first}]",
                            "invocation ids must be unique among calls that have no result yet",
                        )
                    )
                open_calls[c.invocation_id] = i
                issued.add(c.invocation_id)
        elif isinstance(m, OptionResultMessage):
            open_calls.pop(m.result.invocation_id, None)
            if m.result.invocation_id not in issued:
                out.append(
                    Problem(
                        loc,
                        "unpaired_result",
                        f"result answers no call ({m.result.invocation_id})",
                        "emit the option_call before its result",
                    )
                )
        elif isinstance(m, PartsMessage) and not m.parts:
            what = (
                "assistant message has no content and no tool calls"
                if m.role == "assistant"
                else f"{m.role} message has empty content"
            )
            out.append(Problem(loc, "empty_assistant" if m.role == "assistant" else "empty_content", what))
    return out


def _quote(value: Any) -> str:
    """Quote a found value the way seed 004 (Go's %q) does: ``unknown role "hacker"``."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _structure_problems(g: MessageGraph, where: str) -> list[Problem]:
    out: list[Problem] = []
    for nid, node in g.nodes.items():
        if node.parent is not None and node.parent not in g.nodes:
            out.append(Problem(f"{where} node {nid}", "dangling_parent", f"parent {node.parent} is missing"))
    done: set[str] = set()
    for start in g.nodes:
        chain: set[str] = set()
        cur: str | None = start
        while cur is not None and cur in g.nodes and cur not in done:
            if cur in chain:
                cycle = f"node {cur} is its own ancestor (cycle)"
                out.append(Problem(f"{where} node {cur}", "cycle", cycle, "parent links must form a tree"))
                break
            chain.add(cur)
            cur = g.nodes[cur].parent
        done |= chain
    return out


def validate_graph(g: MessageGraph) -> list[Problem]:
    """Structure (parents, cycles) and every branch's messages."""
    where = f"graph {g.graph_id}"
    out = _structure_problems(g, where)
    if out:
        return out  # branches cannot be walked through a broken structure
    seen: set[tuple[str, str]] = set()
    for b, branch in enumerate(g.branches()):
        for p in validate_messages(branch.messages, where=f"{where} branch {b}"):
            key = (p.code, p.message)
            if key not in seen:  # shared prefixes would repeat the same problem on every branch
                seen.add(key)
                out.append(p)
    return out


def validate_user_input(messages: Sequence[Any]) -> None:
    """Seed 004's ValidateUserInput: external callers may only send non-empty user/system messages."""
    if not messages:
        raise ValidationError("message list is empty", code="empty_input", hint="send at least one user message")
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else getattr(m, "role", None)
        content = m.get("content") if isinstance(m, dict) else getattr(m, "text", None)
        if role not in USER_INPUT_ROLES:
            raise ValidationError(
                f"role {_quote(role)} is not allowed in user input",
                where=f"message[{i}]",
                code="spoofed_role",
                hint="external input may only carry user or system messages;"
                " assistant and tool turns come from the agent",
            )
        if not content:
            raise ValidationError(f"{role} message has empty content", where=f"message[{i}]", code="empty_content")
    problems = validate_dicts(list(messages)) if all(isinstance(m, dict) for m in messages) else []
    raise_for_problems(problems)


def raise_for_problems(problems: Sequence[Problem]) -> None:
    if problems:
        first = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValidationError(first.message + more, where=first.where, hint=first.hint or None, code=first.code)
