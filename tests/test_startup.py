"""Commands import only what they need: ``--help`` and ``formats`` load none of the heavy libraries that
``convert`` needs (transformers, datasets, pyarrow, torch, ray), and ``formats`` loads neither the readers nor the
message model (it lists the generated catalogue, which must equal the registry). Checked in a fresh interpreter
through ``sys.modules`` (not timed: a timing test would be flaky on a shared machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("transformers", "datasets", "pyarrow", "torch", "ray", "tokenizers", "pandas")
# What ``formats`` must not need either: the readers, the message model, the template engine, numpy, YAML.
# (pydantic is not in the list: typer >= 0.2x builds its option parsers with it, for every command with options.)
FORMATS_LIGHT = (
    *HEAVY,
    "jinja2",
    "numpy",
    "yaml",
    "msgtrain.model",
    "msgtrain.ingest.base",
    "msgtrain.ingest.registry",
)

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
wanted = set(json.loads(sys.stdin.readline()))
heavy = sorted(w for w in wanted if any(m == w or m.startswith(w + ".") for m in sys.modules))
print("\\n" + json.dumps({"code": code, "heavy": heavy}))
"""


def _imported_by(*argv: str, preload: str = "", watch: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, preload, *argv],
        input=json.dumps(watch) + "\n",
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


def test_formats_imports_no_reader_and_no_message_model() -> None:
    code, heavy = _imported_by("formats", watch=FORMATS_LIGHT)
    assert code == 0
    assert heavy == []
    code, heavy = _imported_by("formats", preload="msgtrain.ingest.registry", watch=FORMATS_LIGHT)
    assert "msgtrain.ingest.registry" in heavy and "msgtrain.model" in heavy  # the probe sees them when imported


def test_the_formats_catalogue_is_the_registry() -> None:
    from msgtrain.ingest import catalog, registry  # noqa: F401 - importing registry registers the readers
    from msgtrain.ingest.registry import REGISTRY

    listed = tuple((r.name, r.description, r.example) for r in REGISTRY.values())
    assert listed == catalog.FORMATS, "the formats catalogue is stale: run `python -m msgtrain.ingest.catalog`"
    assert catalog.generate() == Path(catalog.__file__).read_text(encoding="utf-8")


# ------------------------------------------------------------------ the console script's exit
RUN = """
import atexit, sys, threading, time
from pathlib import Path
mode, marker = sys.argv[1], Path(sys.argv[2])
atexit.register(lambda: marker.with_suffix(".atexit").write_text("ran"))
if mode == "thread":
    def late() -> None:
        time.sleep(0.5)
        marker.with_suffix(".thread").write_text("done")
    threading.Thread(target=late).start()
sys.argv = ["msgtrain", *sys.argv[3:]]
from msgtrain.cli import run
run()
"""


def _run_script(tmp_path: Path, mode: str, *argv: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp_path / f"m-{mode}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, mode, str(marker), *argv], capture_output=True, text=True, env=env, timeout=120
    )
    return proc, marker


def test_the_console_script_exits_with_mains_code_after_its_exit_handlers(tmp_path: Path) -> None:
    """``run`` leaves without interpreter teardown, but only after atexit handlers ran and buffered output (here a
    pipe, so block-buffered) was flushed; its exit code is the one ``main`` returned."""
    from msgtrain.cli import main

    proc, marker = _run_script(tmp_path, "plain", "formats")
    assert proc.returncode == 0
    assert marker.with_suffix(".atexit").read_text() == "ran"
    assert "input formats" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].strip()
    missing = str(tmp_path / "no-such-input.jsonl")
    proc, marker = _run_script(tmp_path, "plain", "convert", missing, "-o", str(tmp_path / "out"))
    assert proc.returncode == main(["convert", missing, "-o", str(tmp_path / "out2")]) != 0
    assert "does not exist" in proc.stderr
    assert marker.with_suffix(".atexit").read_text() == "ran"


def test_the_console_script_waits_for_a_running_non_daemon_thread(tmp_path: Path) -> None:
    proc, marker = _run_script(tmp_path, "thread", "--help")
    assert proc.returncode == 0
    assert marker.with_suffix(".thread").read_text() == "done"  # the normal exit joined it
    assert marker.with_suffix(".atexit").read_text() == "ran"
