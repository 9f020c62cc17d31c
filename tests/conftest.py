"""Shared test fixtures: the ../shared materials (skipped with a reason where absent) and tokenizers."""

from __future__ import annotations

import os
from pathlib import Path

# Every rendering that replays loop iterations of an earlier one is also rendered in full and compared
# (msgtrain.linearize.render.VERIFY_REPLAY): the whole suite doubles as an oracle for replay. Set before msgtrain is
# imported; subprocesses inherit it.
os.environ.setdefault("MSGTRAIN_VERIFY_REPLAY", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SAMPLE_LOGS = ROOT / "sample_logs"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a reason when the materials are not present."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(
            f"../shared/{'/'.join(parts)} not present (it ships beside the checkout in CI, not with the package)"
        )
    return p


# name -> (tokenizer folder, chat template override or None)
TEMPLATES = {
    "qwen3": ("tokenizers/qwen3", None),
    "qwen2.5": ("tokenizers/qwen3", "tokenizers/qwen2.5-instruct/tokenizer_config.json"),
    "phi3": ("tokenizers/phi-3-mini-instruct", None),
    "gpt-oss": ("tokenizers/gpt-oss", None),
}


def load_named_tokenizer(name: str):  # type: ignore[no-untyped-def]
    from msgtrain.linearize import load_tokenizer

    if name == "demo":
        return load_tokenizer(None)
    folder, template = TEMPLATES[name]
    return load_tokenizer(str(shared_path(folder)), str(shared_path(template)) if template else None)


@pytest.fixture(scope="session")
def ray_cluster():  # type: ignore[no-untyped-def]
    """A Ray cluster of two nodes (one CPU each) on this machine, shared by every Ray test of the session: Ray's
    start-up costs tens of seconds on a small machine. The test process is connected to it as a driver."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'msgtrain[ray]')")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
