"""Helpers shared by the object-store tests (importable without the store-test extra)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
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


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[Any]:
    """A moto S3 server on 127.0.0.1, with the AWS environment pointing at it (inherited by subprocesses and
    forwarded to Ray tasks), and one bucket; yields the bucket's :class:`msgtrain.run.storage.Store`."""
    import s3fs
    from moto.server import ThreadedMotoServer

    from msgtrain.run.storage import Store

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    store = Store.of(f"s3://{bucket}")
    store.fs.mkdir(bucket)
    store.server = server  # type: ignore[attr-defined]  # a test may stop it mid-run
    try:
        yield store
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()
