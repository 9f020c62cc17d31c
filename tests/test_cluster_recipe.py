"""The README's cluster section, as written, on a local two-node Ray cluster (tests/conftest.py's ``ray_cluster``).

It follows the "driver on a node of the cluster" command (``RAY_ADDRESS=... msgtrain convert ... --engine ray``)
in a process of its own, with relative paths as a user types them. The address is the test cluster's own rather
than ``auto``: ``auto`` reads the machine-wide ``/tmp/ray/ray_current_cluster``, which names whichever cluster
started last on a shared machine.

The ``ray job submit`` recipe (token authentication, the store's credentials in the runtime env, s3:// to s3://) runs
a head with its dashboard and job server, which costs about a minute on two busy cores: it runs with
``MSGTRAIN_TEST_RAY_JOB_SUBMIT=1`` and skips with that reason otherwise; that the README's recipe holds its steps is
checked always.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

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
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.cli import main

    shutil.copytree(SAMPLE_LOGS, tmp_path / "sample_logs")
    ray_env = {"RAY_ADDRESS": ray_cluster.address}
    ray = _msgtrain(tmp_path, "convert", "sample_logs", "-o", "out/cluster", "--engine", "ray", "-q", env=ray_env)
    assert ray.returncode == 0, ray.stderr[-2000:]
    # The reference, the local engine on the same relative paths, in this process: the driver's run is the one that
    # needs a process of its own (the local engine converts in the process that runs it, joining no cluster).
    monkeypatch.chdir(tmp_path)
    assert main(["convert", "sample_logs", "-o", "out/local", "-q"]) == 0
    assert _files(tmp_path / "out" / "cluster") == _files(tmp_path / "out" / "local")
    assert (tmp_path / "out" / "cluster" / "report.json").is_file()


# --- ray job submit ---------------------------------------------------------------------------------------------
# A head with its dashboard and job server costs about a minute on two busy cores: this test runs when asked for,
# `MSGTRAIN_TEST_RAY_JOB_SUBMIT=1 python -m pytest tests/test_cluster_recipe.py`, and skips with that reason otherwise.
JOB_SUBMIT = os.environ.get("MSGTRAIN_TEST_RAY_JOB_SUBMIT") == "1"
AWS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def _free_ports(n: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _readme_recipe() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Scale out", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1]


def _published_data(store: Any, out: str) -> dict[str, bytes]:
    import json

    version = json.loads(store.fs.cat(f"{out}/_latest"))["path"]
    files = sorted(p for p in store.fs.find(f"{version}/data"))
    return {p.rsplit("/", 1)[1]: store.fs.cat(p) for p in files}


def test_the_readme_recipe_names_token_authentication_and_passes_credentials_in_the_runtime_env() -> None:
    recipe = _readme_recipe()
    assert "export RAY_AUTH_MODE=token" in recipe and "ray get-auth-token --generate" in recipe
    assert "ray job submit" in recipe and "--runtime-env-json" in recipe and "AWS_ACCESS_KEY_ID" in recipe


def test_ray_job_submit_as_the_readme_writes_it_gives_the_local_engines_bytes(tmp_path: Path) -> None:
    """The README's recipe on one machine: token authentication on, a head with its job server, the conversion
    submitted with the store's credentials in the runtime env only (the head has none), s3:// to s3:// on a moto
    server; the published data is byte for byte the local engine's over the same input."""
    if not JOB_SUBMIT:
        import pytest

        pytest.skip("set MSGTRAIN_TEST_RAY_JOB_SUBMIT=1 to start a Ray head with its job server (about a minute)")
    import json

    import pytest

    pytest.importorskip("ray", reason="ray is not installed (pip install 'msgtrain[ray]')")
    pytest.importorskip("moto", reason="the store-test extra is not installed")
    from tests.store_helpers import moto_s3

    with moto_s3("recipe") as store:
        store.fs.put(str(SAMPLE_LOGS), "recipe/logs", recursive=True)
        credentials = {name: os.environ[name] for name in AWS}
        home = tmp_path / "home"
        home.mkdir()
        head_env = {k: v for k, v in os.environ.items() if k not in AWS and not k.startswith("RAY_")}
        head_env |= {"HOME": str(home), "RAY_AUTH_MODE": "token", "PYTHONPATH": str(REPO)}
        gcs, dashboard, client, agent = _free_ports(4)
        # Ray's socket paths under its temporary directory must stay within AF_UNIX's 107 bytes: not under tmp_path.
        ray_dir = Path(tempfile.mkdtemp(prefix="mt-ray-"))

        def ray(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["ray", *args], env=head_env, cwd=tmp_path, capture_output=True, text=True, timeout=600
            )

        assert ray("get-auth-token", "--generate").returncode == 0
        started = ray(
            "start", "--head", f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}", "--num-cpus=1",
            "--disable-usage-stats", f"--temp-dir={ray_dir}",
        )  # fmt: skip
        try:
            assert started.returncode == 0, started.stderr[-2000:]
            runtime_env = json.dumps({"env_vars": credentials})
            submitted = ray(
                "job", "submit", "--address", f"http://127.0.0.1:{dashboard}", "--runtime-env-json", runtime_env, "--",
                "msgtrain", "convert", "s3://recipe/logs", "-o", "s3://recipe/out-ray", "--engine", "ray", "-q",
            )  # fmt: skip
            assert submitted.returncode == 0, (submitted.stdout + submitted.stderr)[-3000:]
        finally:
            _stop_processes_under(ray_dir)
            shutil.rmtree(ray_dir, ignore_errors=True)
        local = _msgtrain(tmp_path, "convert", "s3://recipe/logs", "-o", "s3://recipe/out-local", "-q", env=credentials)
        assert local.returncode == 0, local.stderr[-2000:]
        ray_data, local_data = _published_data(store, "recipe/out-ray"), _published_data(store, "recipe/out-local")
        assert ray_data and ray_data == local_data


def _stop_processes_under(ray_dir: Path) -> None:
    """Stop the processes of this test's Ray head, found by its temporary directory on their command line (never
    `ray stop`, which stops every Ray process of the user on the machine)."""
    import psutil

    mine = [p for p in psutil.process_iter(["cmdline"]) if str(ray_dir) in " ".join(p.info["cmdline"] or [])]
    for process in mine:
        process.terminate()
    _, alive = psutil.wait_procs(mine, timeout=15)
    for process in alive:
        process.kill()
