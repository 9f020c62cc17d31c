"""The linearizer's small array helpers on the hot path: membership by table lookup and unknown logprobs as a view,
checked against plain Python over seeded random inputs (ids inside, outside and negative; strided arrays)."""

from __future__ import annotations

import random

import numpy as np

from msgtrain.export.schema import _all_unknown, unknown_logprobs
from msgtrain.linearize.tokenizer import in_table, membership_table


def test_in_table_is_membership_with_ids_outside_the_table_not_members() -> None:
    rng = random.Random(38)
    table = membership_table([0, 5, 999], 1000)
    edges = [-(2**31), -5, -1, 0, 5, 998, 999, 1000, 2**20, 2**31 - 1]
    for _ in range(2000):
        dtype = rng.choice([np.int32, np.int64, np.uint32])
        pool = [v for v in edges if np.iinfo(dtype).min <= v <= np.iinfo(dtype).max]
        ids = np.array([rng.choice([*pool, rng.randrange(0, 1200)]) for _ in range(rng.randrange(0, 12))], dtype=dtype)
        if ids.shape[0] > 1 and rng.random() < 0.3:
            ids = ids[::2]  # a strided view
        want = [i in (0, 5, 999) for i in ids.tolist()]
        got = in_table(table, ids)
        assert got.dtype == np.bool_ and got.tolist() == want, ids
    # A long array (looked up otherwise than a short one), with ids inside only and with some outside.
    ids = np.array([rng.choice([0, 5, 6, 999]) for _ in range(70_000)], dtype=np.int32)
    for long in (ids, np.concatenate([ids, np.array([-1, 1000, 2**31 - 1], dtype=np.int32)])):
        assert in_table(table, long).tolist() == [i in (0, 5, 999) for i in long.tolist()]


def test_unknown_logprobs_are_a_read_only_view_of_nan_of_the_asked_length() -> None:
    for n in (0, 1, 7, 100_000):
        values = unknown_logprobs(n)
        assert values.shape == (n,) and values.dtype == np.float32
        assert not values.flags.writeable
        assert values.nbytes == 4 * n and np.isnan(values).all()
        assert _all_unknown(values) == (n > 0)
