"""The lease on an object-store OUT where the store has no conditional writes (fsspec's in-memory store stands
in for one): write, settle, read back. The S3 path (``If-None-Match`` / ``If-Match``) is tested against a moto
server in ``test_object_store.py``."""

from __future__ import annotations

import json
import time

import pytest

from msgtrain.run import lease as lease_mod
from msgtrain.run.lease import StoreLease
from msgtrain.run.lock import LockedError
from tests.store_helpers import race


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_mod, "SETTLE_SECONDS", 0.2)


def test_without_conditional_writes_two_racing_runs_still_give_one_holder() -> None:
    for attempt in range(3):
        url = f"memory://lease-race-{attempt}/_state/lock"
        leases = [StoreLease(url, ttl=30) for _ in range(2)]
        outcome = race(leases)
        winners = [i for i, error in outcome.items() if error is None]
        assert len(winners) == 1, outcome
        assert leases[winners[0]].run in str(outcome[1 - winners[0]])
        leases[winners[0]].release()


def test_without_conditional_writes_a_stale_lease_is_taken_over_and_a_lost_one_is_noticed() -> None:
    url = "memory://lease-stale/_state/lock"
    first = StoreLease(url, ttl=30)
    first.store.put_bytes(url, json.dumps({"pid": 1, "host": "gone", "expires": time.time() - 5}).encode())
    first.acquire()
    first.store.put_bytes(url, json.dumps({"pid": 7, "host": "other", "expires": time.time() + 60}).encode())
    first.renew()
    with pytest.raises(LockedError, match="PID 7 on other"):
        first.check()
    first.release()
    assert first.store.exists(url)  # the loser leaves the new holder's lease alone


def test_a_lease_held_by_a_dead_process_of_this_machine_is_taken_over_before_it_expires() -> None:
    import socket
    import subprocess
    import sys

    from msgtrain.run.lease import _boot_id

    if _boot_id() is None:
        pytest.skip("no boot id on this platform: a dead holder's lease waits for its expiry")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    url = "memory://lease-dead-here/_state/lock"
    lease = StoreLease(url, ttl=30)
    holder = {"host": socket.gethostname(), "boot": _boot_id(), "run": "killed", "expires": time.time() + 60}
    lease.store.put_bytes(url, json.dumps({**holder, "pid": int(gone.stdout)}).encode())
    lease.acquire()  # its process is gone: no wait for the expiry
    lease.release()
    # The same record from another machine (another boot) is a live lease until it expires.
    lease.store.put_bytes(url, json.dumps({**holder, "pid": int(gone.stdout), "boot": "other-machine"}).encode())
    with pytest.raises(LockedError, match="run killed"):
        StoreLease(url, ttl=30).acquire()
