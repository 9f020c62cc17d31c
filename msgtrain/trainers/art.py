"""Logged trajectories as OpenPipe ART's own data: ``art.TrajectoryGroup`` of ``art.Trajectory``.

ART trains from messages, not from token rows: ``Trajectory.messages_and_choices`` is the conversation, each
message an OpenAI message dict, except the policy's sampled replies, which are OpenAI ``Choice`` objects; its
tokenizer (``art/preprocessing/tokenize.py``, ``tokenize_trajectory``) renders the messages with the chat template,
puts a sentinel token where each trainable reply goes, and replaces it with the reply's *own* token ids: for a
``Choice`` with logprobs, the ids of ``choice.logprobs.content`` read from ``token = "token_id:<id>"`` (what vLLM's
``return_tokens_as_token_ids`` writes), their ``logprob`` the behaviour logprobs (NaN: ART's loss takes the current
policy's, ``art/loss.py``), and the template's end-of-turn token dropped when the reply's ids end with it. A
``Choice`` is trainable only with logprobs; a plain assistant dict only with ``allow_training_without_logprobs``.

So the view keeps msgtrain's tokens exact: each trained turn of an ``--target rl`` row becomes a ``Choice`` whose
logprobs hold the row's ids of that turn (``input_ids[span]``) and logprobs; every other message of the row's context
(the graph's path to its last trained turn) is a plain dict, untrained in ART unless the user opts into
``allow_training_without_logprobs`` (leave it off: msgtrain's ``loss_mask`` already says what is trained). The
messages come from the logs (rows hold tokens, not messages): pass the graphs convert read (:func:`read_graphs`).

- one ``Trajectory`` per ``trajectory_id`` with the trajectory's ``reward``; a trajectory cut into k rows (a template
  that re-renders history) is one main history and k - 1 ``additional_histories``: ART weighs a trajectory once over
  all its histories (``weight = 1 / its trained tokens``), as msgtrain's ``weight`` column does over its rows;
- one ``TrajectoryGroup`` per ``group_id`` (``--group-by KEY``): ART computes the group advantage itself
  (``reward - mean``, divided by the population std with ``scale_rewards``);
- ``metadata`` holds the row's ids and the log's scalar metadata (ART allows ``str | int | float | bool | None``);
  ``tools`` the tool schemas the policy was given.

:func:`art_trajectory_groups` builds ART's exact layout as dicts (no ART needed); :func:`to_art` makes ART's objects
from them (needs ``openpipe-art``). Layout read from ``openpipe-art`` 0.5.18 (PyPI): ``art/trajectories.py``
(``Trajectory``, ``History``, ``TrajectoryGroup``), ``art/types.py``, ``art/preprocessing/tokenize.py``; the same
``token_id:`` parsing is in github.com/OpenPipe/ART at 779559fd0c68ce073cbd041447f88aacf1d9f585,
``src/art/local/tokenize.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import OptionCallMessage
from msgtrain.model.openai import to_openai_message

REQUIRED = ("graph_id", "group_id", "trajectory_id", "input_ids", "logprobs", "reward", "turn_ids", "turn_spans")
# The fields of ART's pydantic models (art/trajectories.py); ``start_time`` is excluded from dumps and set by ART.
TRAJECTORY_FIELDS = (
    "messages_and_choices",
    "tools",
    "additional_histories",
    "reward",
    "initial_policy_version",
    "final_policy_version",
    "metrics",
    "metadata",
    "logs",
)
HISTORY_FIELDS = ("messages_and_choices", "tools")
GROUP_FIELDS = ("trajectories", "exceptions", "metadata", "metrics", "logs")
TOKEN_ID_PREFIX = "token_id:"

Decode = Callable[[list[int]], str]


def _rows(rows: Any) -> list[dict[str, Any]]:
    if hasattr(rows, "to_list"):  # datasets.Dataset
        return list(rows.to_list())
    if hasattr(rows, "to_pylist"):  # pyarrow.Table
        return list(rows.to_pylist())
    return [dict(r) for r in rows]


def read_graphs(paths: Sequence[str | Path], input_format: str | None = None) -> dict[str, MessageGraph]:
    """The message graphs of the logs at ``paths`` (files or folders, read in ``convert``'s order), by graph id.

    Records no reader reads are left out, as convert leaves them out (its ``drops.jsonl`` and report list them): no
    row comes from them, and a row whose graph is missing here is an error in :func:`art_trajectory_groups`."""
    from msgtrain.ingest.boundary import open_reader, read_events
    from msgtrain.ingest.core.events import ReadGraph, ReadReject
    from msgtrain.ingest.registry import get_reader
    from msgtrain.run.plan import discover_inputs

    files, _ = discover_inputs([str(p) for p in paths])
    forced = get_reader(input_format) if input_format else None
    graphs: dict[str, MessageGraph] = {}
    for f in files:
        opened = open_reader(f, forced)
        if isinstance(opened, ReadReject):
            continue
        for event in read_events(opened, f):
            if isinstance(event, ReadGraph):
                graphs[event.graph.graph_id] = event.graph
    return graphs


def _choice(
    message: Any, ids: Sequence[int], logprobs: Sequence[float | None], decode: Decode | None
) -> dict[str, Any]:
    """An OpenAI ``Choice`` dict whose logprobs carry the trained ids as ART reads them (``token_id:<id>``)."""
    reply = to_openai_message(message)
    calls = isinstance(message, OptionCallMessage) and bool(message.calls)
    # No ``tool_calls``: the ids hold them already, and ART's template pass would print them again after the ids.
    out_message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("reasoning_content") is not None:
        out_message["reasoning_content"] = reply["reasoning_content"]
    content = [
        {
            "token": f"{TOKEN_ID_PREFIX}{int(t)}",
            "logprob": math.nan if lp is None else float(lp),
            "bytes": list(decode([int(t)]).encode("utf-8")) if decode is not None else None,
            "top_logprobs": [],
        }
        for t, lp in zip(ids, logprobs, strict=True)
    ]
    return {
        "finish_reason": "tool_calls" if calls else "stop",
        "index": 0,
        "message": out_message,
        "logprobs": {"content": content, "refusal": None},
    }


def _history(row: Mapping[str, Any], graph: MessageGraph, decode: Decode | None) -> dict[str, Any]:
    spans = {tid: (int(s["start"]), int(s["end"])) for tid, s in zip(row["turn_ids"], row["turn_spans"], strict=True)}
    if not spans:
        raise ConfigError(f"row {row.get('sample_id')} has no trained turn", code="not_rl_rows")
    last = row["turn_ids"][-1]
    try:
        path = graph.path(last)
    except KeyError:
        raise ConfigError(
            f"turn {last} of row {row.get('sample_id')} is not in graph {graph.graph_id}",
            hint="read the same logs, with the same options, as convert did",
            code="graph_mismatch",
        ) from None
    items: list[dict[str, Any]] = []
    for node in path:
        if node.id in spans:
            a, b = spans[node.id]
            items.append(_choice(node.message, row["input_ids"][a:b], row["logprobs"][a:b], decode))
        else:
            items.append(to_openai_message(node.message))
    missing = set(spans) - {node.id for node in path}
    if missing:
        raise ConfigError(
            f"row {row.get('sample_id')}: trained turns {sorted(missing)} are not on the path to its last turn",
            code="graph_mismatch",
        )
    tools = list(graph.env_of(last).tools)
    return {"messages_and_choices": items, "tools": tools or None}


def _scalars(row: Mapping[str, Any]) -> dict[str, Any]:
    """ART's metadata: the log's top-level scalar metadata, then the row's ids (never overwritten by the log)."""
    raw = row.get("metadata")
    logged = json.loads(raw) if isinstance(raw, str) and raw else dict(raw or {})
    out = {k: v for k, v in logged.items() if v is None or isinstance(v, str | int | float | bool)}
    for key in ("graph_id", "trajectory_id", "group_id", "source", "policy", "behaviour_model", "temperature"):
        if row.get(key) is not None:
            out[key] = row[key]
    return out


def art_trajectory_groups(
    rows: Iterable[Mapping[str, Any]] | Any,
    graphs: Mapping[str, MessageGraph] | Iterable[MessageGraph],
    decode: Decode | None = None,
) -> list[dict[str, Any]]:
    """``--target rl`` rows as ART ``TrajectoryGroup`` dicts (ART's field names and layout), in row order.

    ``graphs``: the message graphs of the logs the rows were converted from (:func:`read_graphs`), for the messages;
    ``decode`` (a tokenizer's decode, optional) fills each token's ``bytes``, which ART reads to place a reply that
    begins with ``<think>``. A row without a reward is an error: ART's advantage needs one per trajectory."""
    by_id = dict(graphs) if isinstance(graphs, Mapping) else {g.graph_id: g for g in graphs}
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for row in _rows(rows):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ConfigError(f"not an rl row: missing {missing}", hint="convert with --target rl", code="not_rl_rows")
        if row["reward"] is None:
            raise ConfigError(
                f"row {row.get('sample_id')} (graph {row['graph_id']}) has no reward: ART trains a trajectory on its "
                "reward",
                hint="convert logs that record a reward per trajectory, or leave these rows out",
                code="reward_missing",
            )
        groups.setdefault(row["group_id"], {}).setdefault(row["trajectory_id"], []).append(row)
    out = []
    for group_id, trajectories in groups.items():
        built = []
        for members in trajectories.values():
            graph = by_id.get(members[0]["graph_id"])
            if graph is None:
                raise ConfigError(
                    f"graph {members[0]['graph_id']} of row {members[0].get('sample_id')} is not among the graphs "
                    "given",
                    hint="pass the graphs of the logs the rows were converted from: read_graphs(<the same inputs>)",
                    code="graph_missing",
                )
            histories = [_history(row, graph, decode) for row in members]
            built.append(
                {
                    **histories[0],
                    "additional_histories": histories[1:],
                    "reward": float(members[0]["reward"]),
                    "initial_policy_version": None,
                    "final_policy_version": None,
                    "metrics": {},
                    "metadata": _scalars(members[0]),
                    "logs": [],
                }
            )
        out.append(
            {"trajectories": built, "exceptions": [], "metadata": {"group_id": group_id}, "metrics": {}, "logs": []}
        )
    return out


def _art_item(item: dict[str, Any]) -> Any:
    if "message" in item and "role" not in item:
        from openai.types.chat.chat_completion import Choice

        return Choice.model_validate(item)
    return item


def to_art(groups: Sequence[Mapping[str, Any]]) -> list[Any]:
    """ART's own ``TrajectoryGroup`` objects from :func:`art_trajectory_groups` (needs ``openpipe-art``), what
    ``model.train(groups)`` takes."""
    import art

    def history_items(history: Mapping[str, Any]) -> list[Any]:
        return [_art_item(dict(item)) for item in history["messages_and_choices"]]

    result = []
    for group in groups:
        trajectories = []
        for t in group["trajectories"]:
            fields = {k: t[k] for k in TRAJECTORY_FIELDS if k not in ("messages_and_choices", "additional_histories")}
            trajectories.append(
                art.Trajectory(
                    messages_and_choices=history_items(t),
                    additional_histories=[
                        art.trajectories.History(messages_and_choices=history_items(h), tools=h["tools"])
                        for h in t["additional_histories"]
                    ],
                    **fields,
                )
            )
        result.append(
            art.TrajectoryGroup(
                trajectories, metadata=dict(group["metadata"]), metrics=dict(group["metrics"]), logs=list(group["logs"])
            )
        )
    return result
