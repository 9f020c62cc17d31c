"""Deterministic train/validation/... splits by a stable hash of the graph id.

``--split validation=0.05`` (or ``validation=0.05,test=0.01``) names the held-out splits and their fractions;
everything else is ``train``. A graph's split depends only on its id and the spec, never on the machine,
worker, batch or input order, so reruns (and resumed runs) put every conversation where it was before.

Invariants (tested):
- All samples of one graph (one conversation) land in the same split: splits are disjoint by ``graph_id``.
- The unit interval is cut in the order the splits are given (the first named split owns ``[0, f1)``, the next
  ``[f1, f1 + f2)``, ...; ``train`` owns the rest), so appending a new split to a spec leaves earlier
  assignments unchanged.
- The hash is the first 8 bytes of BLAKE2b of the UTF-8 graph id, read as a big-endian fraction of 2**64:
  a fixed function, not Python's salted ``hash``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import ConfigError
from msgtrain.export import arrays

TRAIN = "train"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def parse_split_spec(spec: str | Mapping[str, float] | None) -> dict[str, float]:
    """``"validation=0.05,test=0.01"`` (or a mapping from a config file) → ``{"validation": 0.05, ...}``.

    Names are identifiers other than ``train`` (which always receives the rest), each fraction is in (0, 1),
    and together they leave a positive share for ``train``.
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return {}
    if isinstance(spec, str):
        pairs: list[tuple[Any, Any]] = []
        for item in spec.split(","):
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(
                    f"bad split {item.strip()!r} in {spec!r}",
                    hint="write NAME=FRACTION pairs separated by commas, e.g. validation=0.05,test=0.01",
                    code="bad_split",
                )
            pairs.append((name.strip(), value.strip()))
    else:
        pairs = list(spec.items())

    fractions: dict[str, float] = {}
    for name, value in pairs:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"bad split name {name!r}", hint="use a name like validation or test", code="bad_split")
        if name == TRAIN:
            raise ConfigError(
                "train cannot be given a fraction",
                hint="name only the held-out splits; train gets the rest",
                code="bad_split",
            )
        if name in fractions:
            raise ConfigError(f"split {name!r} is given twice", code="bad_split")
        try:
            fraction = float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"split {name!r} has fraction {value!r}, not a number",
                hint="e.g. validation=0.05",
                code="bad_split",
            ) from None
        if not (0.0 < fraction < 1.0) or math.isnan(fraction):
            raise ConfigError(
                f"split {name!r} has fraction {fraction}, outside (0, 1)",
                hint="e.g. validation=0.05",
                code="bad_split",
            )
        fractions[name] = fraction
    if sum(fractions.values()) >= 1.0:
        raise ConfigError(
            f"held-out splits take {sum(fractions.values()):.4g} of the data, leaving nothing for train",
            hint="make the fractions sum to less than 1",
            code="bad_split",
        )
    return fractions


def graph_fraction(graph_id: str) -> float:
    """The graph's fixed position in [0, 1)."""
    digest = hashlib.blake2b(graph_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def assign_splits(graph_ids: pa.Array | pa.ChunkedArray, fractions: Mapping[str, float]) -> pa.Array:
    """The split name of every row (a dictionary-encoded string array aligned with ``graph_ids``).

    Each distinct graph id is hashed once (a batch of samples usually shares few graphs).
    """
    encoded = arrays.as_array(pc.dictionary_encode(arrays.as_array(graph_ids)))
    names = [TRAIN, *fractions]
    bounds = np.cumsum(np.asarray(list(fractions.values()), dtype=np.float64))
    positions = np.fromiter((graph_fraction(g) for g in encoded.dictionary.to_pylist()), dtype=np.float64)
    # searchsorted(right) puts position p in the first split whose upper bound exceeds p; beyond all bounds is
    # train. Held-out split i is code i + 1 because train is code 0.
    held_out = np.searchsorted(bounds, positions, side="right")
    codes_per_graph = np.where(held_out < len(bounds), held_out + 1, 0).astype(np.int32)
    row_codes = codes_per_graph[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
    return pa.DictionaryArray.from_arrays(pa.array(row_codes, type=pa.int32()), pa.array(names, type=pa.string()))


class SplitAssigner:
    """Holds a validated split spec; ``split_of(graph_id)`` names the split of one conversation."""

    def __init__(self, spec: str | Mapping[str, float] | None) -> None:
        self.fractions = parse_split_spec(spec)
        self._bounds = np.cumsum(np.asarray(list(self.fractions.values()), dtype=np.float64))
        self._names = list(self.fractions)

    @property
    def names(self) -> list[str]:
        """Every split this spec can produce, train first."""
        return [TRAIN, *self._names]

    def split_of(self, graph_id: str) -> str:
        held_out = int(np.searchsorted(self._bounds, graph_fraction(graph_id), side="right"))
        return self._names[held_out] if held_out < len(self._names) else TRAIN

    def split_table(self, table: pa.Table, by: str = "graph_id") -> dict[str, pa.Table]:
        return split_table(table, self.fractions, by)


def split_table(table: pa.Table, fractions: Mapping[str, float], by: str = "graph_id") -> dict[str, pa.Table]:
    """Partition a canonical table by split, keeping row order within each part; empty parts are omitted. ``by``
    is the column hashed (``group_id`` keeps an RL group of several graphs in one split)."""
    if not fractions:
        return {TRAIN: table} if table.num_rows else {}
    assigned = assign_splits(table[by], fractions)
    codes = np.asarray(assigned.indices.to_numpy(zero_copy_only=False))
    parts = {}
    for code, name in enumerate([TRAIN, *fractions]):
        selected = codes == code
        if selected.any():
            parts[name] = table.filter(pa.array(selected))
    return parts
