"""Files a reader consults beside its input (a Claude Code sub-agent's parent session) are part of what a part is
keyed by, and are reached through the storage interface (:mod:`msgtrain.ingest.core.files`)."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq

from msgtrain.ingest.core.files import LocalFiles
from msgtrain.ingest.registry import declared_partners
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from tests.conftest import SAMPLE_LOGS

SUBAGENT = SAMPLE_LOGS / "claude_code" / "session" / "subagents" / "agent-a7c41d2.jsonl"
SESSION = SAMPLE_LOGS / "claude_code" / "session.jsonl"


def _convert(logs: Path, out: Path, resume: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    report = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, resume=resume, quiet=True))
    rows = [row for f in sorted((out / "data").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    return report, sorted(rows, key=lambda r: r["sample_id"])


def test_a_claude_code_sub_agent_declares_its_parent_session_and_nothing_else() -> None:
    sub = PurePosixPath("/logs/abc/subagents/agent-x.jsonl")
    assert declared_partners(sub, LocalFiles()) == [PurePosixPath("/logs/abc.jsonl")]
    assert declared_partners(PurePosixPath("/logs/abc.jsonl"), LocalFiles()) == []


def test_a_sub_agent_converted_before_its_parent_session_arrived_is_converted_again_under_resume(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    (logs / "session" / "subagents").mkdir(parents=True)
    shutil.copy(SUBAGENT, logs / "session" / "subagents" / SUBAGENT.name)
    _, before = _convert(logs, tmp_path / "out", resume=True)
    assert {r["policy"] for r in before} == {"subagent:a7c41d2"}  # no session: the agent id is all there is

    shutil.copy(SESSION, logs / "session.jsonl")  # the parent session arrives the next night
    report, resumed = _convert(logs, tmp_path / "out", resume=True)
    _, clean = _convert(logs, tmp_path / "clean", resume=False)
    assert report["resume"]["reused"] == 0  # the sub-agent's part was keyed by its absent session
    assert resumed == clean
    assert "subagent:Explore" in {r["policy"] for r in resumed}

    again, _ = _convert(logs, tmp_path / "out", resume=True)  # nothing changed: every part is reused
    assert again["resume"]["reused"] == again["resume"]["parts"] == report["resume"]["parts"]
