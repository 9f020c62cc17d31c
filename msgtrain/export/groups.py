"""RL groups over a whole dataset: which trajectories share a task, how much each row weighs, group advantages.

A *trajectory* is one conversation graph (``graph_id``): one logged rollout, with one reward. Linearization may cut
it into k rows (a chat template that re-renders history, a length policy); those k rows share the reward.

- ``--group-by KEY`` puts every trajectory whose ``KEY`` is equal in one group, across files and workers. ``KEY`` is
  a dotted path into a row's ``metadata`` JSON (``example_id``, ``task``, ``info.task``) or ``@prompt``: the
  tokens before the trajectory's first trained token (rollouts of one prompt). ``group_id`` is then a hash of the
  key's canonical JSON: the same task gets the same id whichever file, part or worker it came from.
- ``--group-size N`` keeps groups of exactly N trajectories: a group of m >= N trajectories (in assembly order) is
  cut into m // N groups of N (the j-th after the first gets the id of (key, j)); the m % N left over and every
  group smaller than N are dropped whole as ``group_incomplete``. A trajectory without the key is dropped as
  ``group_key_missing`` (without ``--group-size`` it stays, as a group of its own).
- ``weight`` = 1 / k on each of a trajectory's k rows, so a trajectory counts once in a weighted sum over rows
  however many rows it was cut into; ``trajectory_id`` (= ``graph_id``) names the rows to sum.
- ``advantage`` (with ``--group-by``) is the trajectory's GRPO group-normalized reward
  ``(r - mean(r_g)) / (std(r_g) + 1e-4)`` over its group g, ``std`` the sample standard deviation (n - 1), as
  TRL's GRPO computes it with its defaults (``scale_rewards="group"``); null when a member of g has no reward or g
  has one member.

Invariants (tested): group ids, weights and advantages are functions of the assembled rows and the spec only (not
of workers, parts or batch sizes); every row dropped here is counted by reason (``groups`` in the report) and
listed in ``drops.jsonl``; ``sum(weight)`` over a trajectory's kept rows is 1.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import ConfigError
from msgtrain.export import arrays

PROMPT_KEY = "@prompt"
GROUP_INCOMPLETE = "group_incomplete"
GROUP_KEY_MISSING = "group_key_missing"
GROUP_DROPS = frozenset({GROUP_INCOMPLETE, GROUP_KEY_MISSING})  # the user's choice (--group-size), not a failure
ADVANTAGE_EPS = 1e-4

# The columns the group plan adds to the canonical rows (the ``rl`` target writes them).
GROUP_FIELDS = [
    pa.field("trajectory_id", pa.string()),
    pa.field("weight", pa.float64()),
    pa.field("advantage", pa.float64()),
]


def check_group_key(key: str) -> str:
    """The key as given, or a ConfigError for one that cannot name a metadata value."""
    if key != PROMPT_KEY and (not key or any(not part for part in key.split("."))):
        raise ConfigError(
            f"bad --group-by key {key!r}",
            hint="name a metadata path such as example_id or info.task, or @prompt (the tokens before the first "
            "trained token)",
            code="bad_group_key",
        )
    return key


def _metadata_value(text: str | None, path: list[str]) -> Any:
    try:
        value: Any = json.loads(text) if text else None
    except ValueError:
        return None
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def key_values(table: pa.Table, key: str) -> list[str | None]:
    """Per row, the canonical JSON of its group key (None where the row has none)."""
    if key == PROMPT_KEY:
        offsets = arrays.offsets_of(table["input_ids"])
        ids = arrays.flat_values(table["input_ids"], np.int32)
        out: list[str | None] = []
        for i, spans in enumerate(table["turn_spans"].to_pylist()):
            start = spans[0]["start"] if spans else 0
            prompt = ids[offsets[i] : offsets[i] + start]
            out.append(hashlib.blake2b(prompt.tobytes(), digest_size=16).hexdigest() if start else None)
        return out
    path = key.split(".")
    values = (_metadata_value(text, path) for text in table["metadata"].to_pylist())
    return [None if v is None else json.dumps(v, sort_keys=True, ensure_ascii=False) for v in values]


def group_id_of(key: str, value: str, index: int = 0) -> str:
    """The id of group ``index`` of the trajectories whose ``key`` is ``value`` (canonical JSON)."""
    parts = [key, value] if index == 0 else [key, value, str(index)]
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=8).hexdigest()


@dataclass
class _Trajectory:
    order: int
    key: str | None
    reward: float | None
    rows: int = 0


@dataclass
class GroupPlanner:
    """First pass: ``observe`` the assembled rows (after the length policy), then ``plan()``."""

    key: str | None
    size: int | None
    _seen: dict[str, _Trajectory] = field(default_factory=dict)

    def observe(self, table: pa.Table) -> None:
        keys = key_values(table, self.key) if self.key else [None] * table.num_rows
        rewards = table["reward"].to_pylist()
        for graph, value, reward in zip(table["graph_id"].to_pylist(), keys, rewards, strict=True):
            t = self._seen.get(graph)
            if t is None:
                t = self._seen[graph] = _Trajectory(len(self._seen), value, reward)
            elif t.key is None:
                t.key = value
            t.rows += 1

    def plan(self) -> GroupPlan:
        plan = GroupPlan(self.key, self.size)
        members: dict[str, list[str]] = {}
        for graph, t in self._seen.items():  # insertion = assembly order
            if t.key is None:
                if self.key is not None and self.size is not None:
                    plan.dropped[graph] = GROUP_KEY_MISSING
                    continue
                plan.group_of[graph] = group_id_of("graph", graph) if self.key else ""
                plan.weight_of[graph] = 1.0 / t.rows
                continue
            members.setdefault(t.key, []).append(graph)
        for value, graphs in members.items():
            size = self.size or len(graphs)
            whole = len(graphs) // size * size
            for graph in graphs[whole:]:
                plan.dropped[graph] = GROUP_INCOMPLETE
            for index in range(whole // size):
                chunk = graphs[index * size : (index + 1) * size]
                gid = group_id_of(self.key or "", value, index)
                rewards = [self._seen[g].reward for g in chunk]
                advantages = _advantages(rewards)
                for graph, adv in zip(chunk, advantages, strict=True):
                    plan.group_of[graph] = gid
                    plan.weight_of[graph] = 1.0 / self._seen[graph].rows
                    plan.advantage_of[graph] = adv
        plan.trajectories = len(self._seen)
        plan.groups = Counter(plan.group_of[g] for g in plan.group_of if plan.group_of[g] and self.key)
        return plan


def _advantages(rewards: list[float | None]) -> list[float | None]:
    if len(rewards) < 2 or any(r is None for r in rewards):
        return [None] * len(rewards)
    values = np.asarray(rewards, dtype=np.float64)
    std = float(values.std(ddof=1))
    mean = float(values.mean())
    return [float((r - mean) / (std + ADVANTAGE_EPS)) for r in values]


@dataclass
class GroupPlan:
    """Per trajectory: its group id (``""`` = keep the row's own), weight and advantage, or why it is dropped."""

    key: str | None
    size: int | None
    group_of: dict[str, str] = field(default_factory=dict)
    weight_of: dict[str, float] = field(default_factory=dict)
    advantage_of: dict[str, float | None] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    trajectories: int = 0
    groups: Counter[str] = field(default_factory=Counter)

    def apply(self, table: pa.Table) -> tuple[pa.Table, pa.Table, list[str]]:
        """(kept rows with ``group_id`` set and the :data:`GROUP_FIELDS` added, dropped rows, their reasons)."""
        graphs = table["graph_id"].to_pylist()
        keep = np.fromiter((g not in self.dropped for g in graphs), dtype=bool, count=len(graphs))
        dropped = table.filter(pa.array(~keep))
        reasons = [self.dropped[g] for g in graphs if g in self.dropped]
        kept = table.filter(pa.array(keep))
        graphs = [g for g, k in zip(graphs, keep, strict=True) if k]
        own = kept["group_id"].to_pylist()
        group_ids = [self.group_of.get(g) or o for g, o in zip(graphs, own, strict=True)]
        kept = kept.set_column(kept.schema.get_field_index("group_id"), "group_id", pa.array(group_ids, pa.string()))
        columns = {
            "trajectory_id": kept["graph_id"],
            "weight": pa.array([self.weight_of[g] for g in graphs], pa.float64()),
            "advantage": pa.array([self.advantage_of.get(g) for g in graphs], pa.float64()),
        }
        for f in GROUP_FIELDS:
            kept = kept.append_column(f, columns[f.name])
        return kept, dropped, reasons

    def report(self, dropped_rows: Counter[str]) -> dict[str, Any]:
        by_reason = Counter(self.dropped.values())
        sizes = Counter(self.groups.values())
        return {
            "key": self.key,
            "size": self.size,
            "trajectories": self.trajectories,
            "trajectories_kept": self.trajectories - len(self.dropped),
            "groups": len(self.groups),
            "groups_by_size": {str(k): v for k, v in sorted(sizes.items())},
            "trajectories_dropped_by_reason": dict(sorted(by_reason.items())),
            "rows_dropped_by_reason": dict(sorted(dropped_rows.items())),
        }


def default_group_columns(table: pa.Table) -> dict[str, pa.Array]:
    """The :data:`GROUP_FIELDS` of rows converted without a plan (a batch on its own): ``weight`` = 1 / the rows
    of the trajectory within the batch, no advantage."""
    graphs = arrays.as_array(table["graph_id"])
    counts = pc.value_counts(graphs)
    per_graph = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
    return {
        "trajectory_id": graphs,
        "weight": pa.array([1.0 / per_graph[g] for g in graphs.to_pylist()], pa.float64()),
        "advantage": pa.nulls(table.num_rows, pa.float64()),
    }
