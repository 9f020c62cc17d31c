"""The README's cluster section, as written, on a local two-node Ray cluster (tests/conftest.py's ``ray_cluster``).

It follows the "driver on a node of the cluster" command (``RAY_ADDRESS=... msgtrain convert ... --engine ray``)
in a process of its own, with relative paths as a user types them. The address is the test cluster's own rather
than ``auto``: ``auto`` reads the machine-wide ``/tmp/ray/ray_current_cluster``, which names whichever cluster
started last on a shared machine. ``ray job submit`` runs the same command through the dashboard's job server;
its extra (``ray[default]``) is what ``msgtrain[ray]`` installs, and starting a dashboard per test session costs
more than this suite affords on two cores, so it is not run here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import SAMPLE_LOGS

REPO = Path(__file__).resolve().parent.parent


def _msgtrain(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Only the environment given names a cluster: the local run must not join one.
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(REPO), **(env or {})}
    code = "import sys; from msgtrain.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}


def test_the_driver_on_a_node_with_relative_paths_gives_the_local_engines_dataset(
    ray_cluster: Any, tmp_path: Path
) -> None:
    shutil.copytree(SAMPLE_LOGS, tmp_path / "sample_logs")
    ray_env = {"RAY_ADDRESS": ray_cluster.address}
    ray = _msgtrain(tmp_path, "convert", "sample_logs", "-o", "out/cluster", "--engine", "ray", "-q", env=ray_env)
    assert ray.returncode == 0, ray.stderr[-2000:]
    local = _msgtrain(tmp_path, "convert", "sample_logs", "-o", "out/local", "-q")
    assert local.returncode == 0, local.stderr[-2000:]
    assert _files(tmp_path / "out" / "cluster") == _files(tmp_path / "out" / "local")
    assert (tmp_path / "out" / "cluster" / "report.json").is_file()
