"""Every config in configs/ fits the logs it is documented for: it converts sample_logs/ and a real-log folder of
its kind (../shared/real_logs) with exit 0, nothing lost to the length policy. A config that cannot must say in its
header which option to change for longer logs and why; none needs to now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgtrain.cli import main
from tests.conftest import ROOT, SAMPLE_LOGS, shared_path

# config -> the real-log folder of the kind it is for: long agent sessions for SFT and packing, a ShareGPT /
# LLaMA-Factory export for LLaMA-Factory, rewarded benchmark trajectories for RL.
KIND = {
    "sft-qwen3.yaml": "claude_code_spotter",
    "labels-axolotl.yaml": "claude_code_spotter",
    "labels-llamafactory.yaml": "sharegpt_llamafactory",
    "packed-nemo.yaml": "codex_codemie",
    "rl-grpo.yaml": "tau_bench",
}


def test_every_shipped_config_has_a_kind_of_logs_it_is_checked_on() -> None:
    assert sorted(KIND) == sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", sorted(KIND))
def test_a_shipped_config_converts_sample_logs_and_real_logs_of_its_kind_with_exit_0(
    config: str, tmp_path: Path
) -> None:
    # The real vocabulary the configs are written for (sft-qwen3's hub id names the same tokenizer).
    tokenizer = str(shared_path("tokenizers", "qwen3"))
    for name, logs in (("sample", SAMPLE_LOGS), ("real", shared_path("real_logs", KIND[config]))):
        out = tmp_path / name
        argv = ["convert", str(logs), "-o", str(out), "--config", str(ROOT / "configs" / config), "-q"]
        assert main([*argv, "--tokenizer", tokenizer]) == 0, f"{config} on {logs.name}"
        samples = json.loads((out / "report.json").read_text(encoding="utf-8"))["samples"]
        assert samples["written"] > 0, f"{config} on {logs.name}"
        policy = samples["length_policy"]
        assert not policy["dropped_turns"] and not policy["dropped_samples"], f"{config} on {logs.name}: {policy}"
