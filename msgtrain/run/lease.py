"""One run at a time per object-store OUT: a lease object, ``OUT/_state/lock``.

A store has no ``flock``; two runs on one ``s3://…/OUT`` would otherwise race on the manifest, the parts and
the pointer. The lease is a small JSON object naming its holder (``pid``, ``host``, ``run``) and when it expires.

Invariants:
- Taking the lease is one conditional write. On S3 (and S3-compatible servers that implement conditional
  writes): created with ``If-None-Match: *`` (exactly one of two racing runs succeeds; the other gets 412), and an
  expired lease is taken over, and a held one renewed or released, with ``If-Match: <its ETag>``, so two runs
  taking over the same stale lease cannot both win and a run never deletes a lease it lost.
- Stores without conditional writes here (``gs://``, ``az://``, ``hf://`` through fsspec): write, wait
  :data:`SETTLE_SECONDS`, read back, and hold the lease only if it still names this run. Two runs that write
  within less than the store's write latency of each other could both read back their own (the store's
  last-writer-wins is not visible yet); with a strongly consistent store (GCS, Azure Blob) and a settle time
  well above one write's latency this window is closed in practice, not in principle.
- The holder renews the lease every ``ttl / 4`` (a heartbeat thread). A run that dies stops renewing; once
  ``expires`` (the holder's clock, UTC seconds) has passed, the next run takes the lease over. Clocks of the
  machines running msgtrain must agree to well within ``ttl`` (NTP). A lease whose holder ran on this very
  machine (host name and boot id) and whose process is gone is taken over at once.
- A holder that could not renew in time (its lease expired and another run took it) has lost it:
  :meth:`StoreLease.check` raises :class:`~msgtrain.run.lock.LockedError` before anything is published.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from msgtrain.run.lock import LockedError
from msgtrain.run.storage import Store, StoreAccessError

LEASE_OBJECT = "lock"
DEFAULT_TTL = 120.0  # seconds a lease lives without a heartbeat
TTL_ENV = "MSGTRAIN_LEASE_SECONDS"
SETTLE_SECONDS = 1.0  # read-back delay on stores without conditional writes


class _Conflict(Exception):
    """A conditional write's condition failed: someone else wrote the lease."""


def default_ttl() -> float:
    try:
        return float(os.environ.get(TTL_ENV, "") or DEFAULT_TTL)
    except ValueError:
        return DEFAULT_TTL


class StoreLease:
    """The lease ``url`` for this run; :meth:`acquire`, then :meth:`release` (or use :func:`store_lock`)."""

    def __init__(self, url: str, ttl: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.store = Store.of(url)
        self.ttl = ttl if ttl is not None else default_ttl()
        self.clock = clock
        self.run = secrets.token_hex(8)
        self.holder = {"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id(), "run": self.run}
        self._tag: str | None = None  # ETag (S3) or the bytes we last wrote (elsewhere)
        self._lost: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- store operations
    @property
    def _conditional(self) -> bool:
        return self.store.protocol in ("s3", "s3a")

    def _body(self) -> bytes:
        now = self.clock()
        data = {**self.holder, "acquired": now, "expires": now + self.ttl, "format": "msgtrain.lease"}
        return (json.dumps(data, sort_keys=True) + "\n").encode()

    def _read(self) -> tuple[dict[str, Any], str] | None:
        """The lease as it is now and its tag; None when there is none."""
        path = self.store._path(self.url)
        if self._conditional:
            bucket, key, _ = self.store.fs.split_path(path)
            try:
                out = self.store.fs.call_s3("get_object", Bucket=bucket, Key=key)
            except FileNotFoundError:
                return None
            # s3fs hands back an aiobotocore stream: read it on s3fs's own event loop.
            from fsspec.asyn import sync

            data = sync(self.store.fs.loop, out["Body"].read)
            return _parse(data), str(out["ETag"])
        if not self.store.exists(self.url):
            return None
        data = self.store.read_bytes(self.url)
        return _parse(data), data.decode("utf-8", "replace")

    def _write(self, body: bytes, tag: str | None) -> str:
        """Write the lease if it is still as ``tag`` says (None: absent); return the new tag or raise _Conflict."""
        path = self.store._path(self.url)
        if self._conditional:
            bucket, key, _ = self.store.fs.split_path(path)
            match = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
            try:
                out = self.store.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=body, **match)
            except FileNotFoundError as e:
                self._check_bucket(bucket)  # a bucket that is not there is said so, never taken for a live run
                raise _Conflict(str(e)) from None
            except FileExistsError as e:
                raise _Conflict(str(e)) from None
            except OSError as e:
                if _precondition_failed(e):
                    raise _Conflict(str(e)) from None
                raise
            return str(out["ETag"])
        # Without conditional writes: compare, write, let the store settle, read back.
        current = self._read()
        if (current[1] if current else None) != tag:
            raise _Conflict("the lease changed")
        self.store.put_bytes(self.url, body)
        time.sleep(SETTLE_SECONDS)
        after = self._read()
        if after is None or after[1] != body.decode():
            raise _Conflict("another run wrote the lease at the same time")
        return after[1]

    def _check_bucket(self, bucket: str) -> None:
        """Raise :class:`StoreAccessError` when ``bucket`` does not exist (a write there fails as 'not found')."""
        try:
            if self._conditional:
                self.store.fs.call_s3("head_bucket", Bucket=bucket)
                missing = False
            else:
                missing = not self.store.fs.exists(bucket)
        except FileNotFoundError:
            missing = True
        except OSError:
            return  # not allowed to look: the write's own error stands
        if missing:
            proto = self.store.protocol
            how = f"aws s3 mb s3://{bucket}" if self._conditional else f"create the bucket {proto}://{bucket}"
            raise StoreAccessError(
                f"the bucket {bucket} does not exist at {self.store.endpoint()}",
                where=self.url,
                hint=f"{how}, or fix the bucket name in -o",
            )

    def _delete(self, tag: str) -> None:
        current = self._read()
        if current is not None and current[1] == tag:
            self.store.remove(self.url)

    # ---------------------------------------------------------------------------------------------- the lease
    def acquire(self) -> None:
        """Take the lease, or raise :class:`LockedError` naming the live holder (a store that cannot be reached,
        refuses this process or lacks the bucket says so, naming the URL)."""
        with self.store.connection_errors(self.url):
            try:
                self._acquire()
            except FileNotFoundError:
                self._check_bucket(self.store._path(self.url).split("/")[0])
                raise

    def _acquire(self) -> None:
        for _ in range(3):  # a lease that vanished or changed between our read and our write: look again
            current = self._read()
            try:
                if current is None:
                    self._tag = self._write(self._body(), None)
                else:
                    data, tag = current
                    expires = data.get("expires")
                    if isinstance(expires, (int, float)) and expires > self.clock() and not _dead_here(data):
                        raise _locked(self.url, data)
                    self._tag = self._write(self._body(), tag)  # stale: its run stopped renewing it
            except _Conflict:
                continue
            self._start_heartbeat()
            return
        current = self._read()
        raise _locked(self.url, current[0] if current else {})

    def renew(self) -> None:
        with self._lock:
            if self._lost or self._tag is None:
                return
            try:
                self._tag = self._write(self._body(), self._tag)
            except _Conflict:
                current = self._read()
                self._lost = _describe(current[0] if current else {})

    def check(self) -> None:
        """Raise :class:`LockedError` if the lease was lost (taken over after this run failed to renew it)."""
        if self._lost:
            raise LockedError(
                f"this run lost its lease on the output to {self._lost}; nothing was published",
                where=self.url,
                hint="the run stalled longer than the lease lives (MSGTRAIN_LEASE_SECONDS); rerun with --resume",
            )

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._tag is not None and not self._lost:
                # Best effort: the lease expires by itself. A store gone mid-run must not replace the error that
                # stopped the run (the store's own connection errors are not OSErrors).
                with contextlib.suppress(Exception):
                    if self._conditional:
                        bucket, key, _ = self.store.fs.split_path(self.store._path(self.url))
                        current = self._read()
                        if current is not None and current[1] == self._tag:
                            self.store.fs.call_s3("delete_object", Bucket=bucket, Key=key)
                    else:
                        self._delete(self._tag)
            self._tag = None

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl / 4):
                with contextlib.suppress(Exception):  # a failed renewal is retried at the next beat
                    self.renew()

        self._thread = threading.Thread(target=beat, name="msgtrain-lease", daemon=True)
        self._thread.start()


def _boot_id() -> str | None:
    """This machine's boot id (Linux): with the host name, says that a lease was taken on this very machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _dead_here(holder: dict[str, Any]) -> bool:
    """The holder ran on this machine (same host name and boot id) and its process is gone: its lease is stale
    now, without waiting for it to expire (as the local lock's kernel-dropped flock)."""
    from msgtrain.run.lock import _pid_alive

    pid, boot = holder.get("pid"), _boot_id()
    same_machine = boot is not None and holder.get("boot") == boot and holder.get("host") == socket.gethostname()
    return same_machine and isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid)


def _precondition_failed(error: OSError) -> bool:
    """S3 refused a conditional write: 412 PreconditionFailed, or 409 ConditionalRequestConflict (a concurrent
    conditional write to the same key). s3fs turns both into a plain OSError, with the botocore error as cause."""
    cause = error.__cause__
    code = str(getattr(cause, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def _parse(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    pid, host = holder.get("pid", "unknown"), holder.get("host")
    return f"PID {pid}" + (f" on {host}" if host else "")


def _locked(url: str, holder: dict[str, Any]) -> LockedError:
    who = _describe(holder)
    expires = holder.get("expires")
    left = f", lease expires in {max(0, int(expires - time.time()))} s" if isinstance(expires, (int, float)) else ""
    return LockedError(
        f"another msgtrain run ({who}, run {holder.get('run', 'unknown')}) is writing this output{left}",
        where=url,
        hint=f"wait for {who} to finish, or stop it; the lease of a dead run is taken over once it expires",
    )


@contextlib.contextmanager
def store_lock(state_url: str, ttl: float | None = None) -> Iterator[StoreLease]:
    """Hold the lease ``STATE/lock`` for the ``with`` body; raise :class:`LockedError` if a live run holds it."""
    from msgtrain.run.storage import join

    lease = StoreLease(join(state_url, LEASE_OBJECT), ttl)
    with lease.store.connection_errors(state_url):  # the first contact with the store of an object-store OUT
        lease.acquire()
    try:
        yield lease
    finally:
        lease.release()
