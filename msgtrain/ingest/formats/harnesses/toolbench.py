"""ToolBench answers (``data/answer/G*_answer/<query id>_<method>.json``): one JSON document ``{"win", "tree",
"forward_args", "compare_candidates", "answer_generation": {"train_messages", "function", "query", "final_answer",
"finish_type", "valid_data", ...}}``, written by ToolBench's tree search (DFSDT) or chain (CoT) runs.

What is read (the whole file is one record and one graph):
- ``answer_generation.train_messages``: a list of OpenAI chat conversations (system, user, then assistant messages
  with the legacy ``function_call`` and ``function`` results), each ending in one assistant step of the final
  chain. Every list is a path of the graph; content addressing merges their shared prefixes, so the final chain is
  one branch whose assistant steps are ``sampled``. Legacy calls get the synthetic id ``function_call_<index>``
  (as the OpenAI chat reader does), so the same step gets the same id on every path.
- ``tree.tree`` (DFSDT only): the explored search tree, nodes ``Thought`` (the assistant's text), ``Action`` (the
  function name) and ``Action Input`` (the arguments, and the ``observation`` the function returned). Every
  explored path is rebuilt as messages under the same system and user messages, so the branches the search
  abandoned (give-up-and-restart, errors, pruned) are branches of the graph: they were sampled too. The
  observation of a ``Finish`` call is not a message (the search ends there).
- ``answer_generation.function`` (the OpenAI function schemas) is the environment; ``win``, ``finish_type``,
  ``valid_data``, ``query_count``, ``total_tokens`` and ``forward_args`` go to metadata; ``win`` is the sample's
  ``reward`` (1.0 / 0.0).

Safe readings:
- When DFSDT expands a node that already has children, it appends a *diversity prompt* (the earlier candidates,
  "generate actions that are different") to the context. ``train_messages`` keep that user message on the final
  chain (so its steps are ``sampled`` in exactly their context), but the tree does not: a tree step that is not
  the first child of its node was sampled in a context the file does not hold, so it is ``carried``, and so is
  every step below it. First children on such a path from the root are ``sampled``; where they are also
  train-message steps they are the same nodes.
- A ``Thought`` without an ``Action`` is an answer in text only; the steps after it hang below it.
- Without ``train_messages`` there is no system/user context to hang the tree on: a run ToolBench itself marks
  ``valid_data: false`` is skipped (``no_valid_data``); otherwise the file is rejected (``no_train_messages``). A
  tree node that does not fit the Thought/Action/Action Input grammar rejects the file (``bad_tree``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.chat_messages import chat_steps
from msgtrain.ingest.common.session_common import as_dict, as_list, graph_id_for
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_shape,
    load_json_document,
    quoted,
)
from msgtrain.model.graph import MessageGraph, Origin

POLICY = "toolbench"
_FINISH = "Finish"


@dataclass
class _Step:
    """One message of a tree path (an OpenAI dict) and whether it was sampled after a diversity prompt."""

    data: dict[str, Any]
    diverse: bool = False


class ToolBenchReader:
    name = "toolbench"
    description = "ToolBench answers (answer_generation.train_messages + the DFSDT search tree; branches kept)"
    example = "sample_logs/toolbench/answer_DFS.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["train_messages", "node_type"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        return shape.layout == "object" and (
            shape.has(".answer_generation.train_messages") or (shape.has(".tree.tree.node_type") and shape.has(".win"))
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        doc = load_json_document(path)
        ref = SourceRef(str(path), "file")
        answer = as_dict(doc.get("answer_generation")) if isinstance(doc, dict) else {}
        if answer.get("valid_data") is False and not as_list(answer.get("train_messages")):
            # ToolBench marks the run unusable and keeps no messages: only the tree, without its system and user
            # messages, so nothing in it can be placed in an exact context.
            yield ReadSkip(ref, "no_valid_data")
            return
        try:
            graph = _graph(path, doc)
        except MsgtrainError as e:
            yield ReadReject(ref, e.located(str(path)), excerpt(json.dumps(doc, default=str)[:8192]))
            return
        extras = {"reward": 1.0 if doc.get("win") else 0.0} if isinstance(doc.get("win"), bool) else {}
        yield ReadGraph(graph, ref, records=1, extras=extras)


def _graph(path: Path, doc: Any) -> MessageGraph:
    if not isinstance(doc, dict):
        raise ValidationError("a ToolBench answer is a JSON object", code="bad_document")
    answer = as_dict(doc.get("answer_generation"))
    lists = [t for t in as_list(answer.get("train_messages")) if isinstance(t, list) and t]
    if not lists:
        raise ValidationError(
            "answer has no train_messages: nothing holds the system and user messages",
            code="no_train_messages",
            hint="pass a ToolBench answer file written with answer_generation.train_messages",
        )
    meta = {
        "format": "toolbench",
        "win": doc.get("win"),
        "finish_type": answer.get("finish_type"),
        "valid_data": answer.get("valid_data"),
        "query_count": answer.get("query_count"),
        "total_tokens": answer.get("total_tokens"),
        "forward_args": doc.get("forward_args"),
    }
    graph = MessageGraph(
        graph_id=graph_id_for("toolbench", path.stem, path),
        policy=POLICY,
        tools=openai_tools(answer.get("function")),
        metadata={k: v for k, v in meta.items() if v is not None},
    )
    prompt = [_Step(m) for m in lists[0] if isinstance(m, dict) and m.get("role") in ("system", "user")]
    paths: list[list[_Step]] = []
    tree = as_dict(as_dict(doc.get("tree")).get("tree"))
    if tree:
        _tree_paths(_kids(tree), list(prompt), paths)
    # The train messages hold the final chain with the diversity prompts it was sampled after: exact contexts.
    paths.extend([_Step(m) for m in messages if isinstance(m, dict)] for messages in lists)
    for steps in paths:
        _add_path(graph, steps)
    return graph


def _add_path(graph: MessageGraph, steps: list[_Step]) -> None:
    converted = chat_steps([s.data for s in steps], policy=POLICY)
    parent: str | None = None
    for step, conv in zip(steps, converted, strict=True):
        origin = Origin.CONTEXT
        if conv.message.role == "assistant":
            origin = Origin.CARRIED if step.diverse else Origin.SAMPLED
        parent = graph.add_node(parent, conv.message, origin=origin)


def _tree_paths(
    children: list[dict[str, Any]], prefix: list[_Step], out: list[list[_Step]], lost: bool = False
) -> None:
    """Walk the nodes that follow the end of one assistant step (the root, an ``Action Input``, or a ``Thought``
    the model answered with text only): each child starts a new step.

    ``lost``: a step above was sampled after a diversity prompt the tree does not hold, so every step below lacks
    part of its context too.
    """
    if not children:
        if prefix and prefix[-1].data.get("role") != "user":
            out.append(prefix)
        return
    for k, child in enumerate(children):
        for steps, end, diverse in _steps_from(child, lost or k > 0):
            _tree_paths(_kids(end), [*prefix, *steps], out, diverse)


def _kids(node: dict[str, Any], types: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    kids = [c for c in as_list(node.get("children")) if isinstance(c, dict)]
    return kids if types is None else [c for c in kids if c.get("node_type") in types]


def _steps_from(node: dict[str, Any], diverse: bool) -> Iterator[tuple[list[_Step], dict[str, Any], bool]]:
    """(messages, the node they end at, diverse) for each assistant step starting at ``node``.

    A step is ``Thought``? + ``Action`` + ``Action Input`` (text and a call, then the call's observation), or a
    ``Thought`` alone (the model answered with text only; the steps after it hang below that Thought).
    """
    kind = node.get("node_type")
    if kind == "Thought":
        thought: str | None = str(node.get("description", ""))
        actions = _kids(node, ("Action",))
        others = [c for c in _kids(node) if c.get("node_type") != "Action"]
        if others or not actions:
            text_only = {"role": "assistant", "content": thought}
            end = {"children": others}
            yield [_Step(text_only, diverse)], end, diverse
    elif kind == "Action":
        thought, actions = None, [node]
    else:
        raise ValidationError(
            f"tree node of type {kind!r} where a Thought or an Action was expected",
            code="bad_tree",
            hint="ToolBench trees alternate Thought?, Action, Action Input",
        )
    for j, action in enumerate(actions):
        for i, action_input in enumerate(_kids(action)):
            if action_input.get("node_type") != "Action Input":
                raise ValidationError(
                    f"tree node of type {action_input.get('node_type')!r} where an Action Input was expected",
                    code="bad_tree",
                )
            step_diverse = diverse or j > 0 or i > 0
            call = {"name": action.get("description"), "arguments": str(action_input.get("description", ""))}
            steps = [_Step({"role": "assistant", "content": thought, "function_call": call}, step_diverse)]
            if call["name"] != _FINISH and isinstance(action_input.get("observation"), str):
                result = {"role": "function", "name": call["name"], "content": action_input["observation"]}
                steps.append(_Step(result))
            yield steps, action_input, step_diverse


READER = ToolBenchReader()
