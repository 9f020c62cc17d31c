"""Helpers shared by the object-store tests (importable without the store-test extra)."""

from __future__ import annotations

import threading
from typing import Any


def race(leases: list[Any]) -> dict[int, BaseException | None]:
    """Each lease's ``acquire`` in its own thread, started together: index → None (took it) or the error."""
    from msgtrain.run.lock import LockedError

    start = threading.Barrier(len(leases))
    outcome: dict[int, BaseException | None] = {}

    def take(i: int) -> None:
        start.wait()
        try:
            leases[i].acquire()
            outcome[i] = None
        except LockedError as e:
            outcome[i] = e

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome
