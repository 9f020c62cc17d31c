"""Commands import only what they need: ``--help`` and ``formats`` load none of the heavy libraries that
``convert`` needs (transformers, datasets, pyarrow, torch, ray). Checked in a fresh interpreter through
``sys.modules`` (not timed: a timing test would be flaky on a shared machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("transformers", "datasets", "pyarrow", "torch", "ray", "tokenizers", "pandas")

PROBE = """
import importlib, json, sys
for name in sys.argv[1].split(","):
    if name:
        importlib.import_module(name)
from msgtrain.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as e:
    code = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.readline())))
print("\\n" + json.dumps({"code": code, "heavy": heavy}))
"""


def _imported_by(*argv: str, preload: str = "") -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, preload, *argv],
        input=json.dumps(HEAVY) + "\n",
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return int(result["code"] or 0), list(result["heavy"])


@pytest.mark.parametrize("argv", [("--help",), ("formats",), ("convert", "--help")])
def test_light_commands_import_no_heavy_library(argv: tuple[str, ...]) -> None:
    code, heavy = _imported_by(*argv)
    assert code == 0
    assert heavy == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: a heavy library imported in the process shows up in the probe's list."""
    code, heavy = _imported_by("--help", preload="pyarrow")
    assert code == 0
    assert heavy == ["pyarrow"]
