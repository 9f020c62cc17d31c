"""Every Python block of README.md and docs/*.md runs as written, or says it is a sketch.

A block preceded by ``<!-- tested -->`` runs in an empty directory; ``<!-- tested after: msgtrain convert ... -->``
runs in a directory where that command (``sample_logs`` and ``configs/`` are the checkout's) has been run. A block
whose first line is ``# Sketch: why`` is not run (it needs a model download, a GPU or a trainer msgtrain does not
install). No block holds ``...``: a user pastes them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from msgtrain.cli import main
from tests.conftest import ROOT, SAMPLE_LOGS

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- tested(?: after: (?P<setup>msgtrain .+?))? -->$")
SKETCH = "# Sketch:"


@dataclass(frozen=True)
class Block:
    where: str  # file:line of the opening fence
    language: str
    code: str
    marker: str | None  # the comment line right before the fence, when it is a test marker
    setup: str | None  # the command the block runs after

    @property
    def sketch(self) -> bool:
        return self.code.startswith(SKETCH)


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = lines[i - 1].strip() if i else ""
        marker = MARKER.match(before)
        blocks.append(
            Block(
                where=f"{path.relative_to(ROOT)}:{i + 1}",
                language=opened.group(1),
                code="\n".join(lines[i + 1 : end]) + "\n",
                marker=before if marker else None,
                setup=marker.group("setup") if marker else None,
            )
        )
        i = end + 1
    return blocks


PYTHON = [b for doc in DOCS for b in _blocks(doc) if b.language == "python"]
RUNNABLE = [b for b in PYTHON if b.marker is not None]


def test_every_python_block_is_tested_or_says_it_is_a_sketch_and_none_holds_an_ellipsis() -> None:
    assert len(RUNNABLE) >= 5
    for block in PYTHON:
        assert block.sketch != (block.marker is not None), f"{block.where}: mark it <!-- tested --> or # Sketch:"
        assert "..." not in block.code, f"{block.where}: `...` in code a user pastes"


def _setup_args(command: str) -> list[str]:
    """The command's arguments, with the checkout's sample_logs and configs/ spelled as paths."""
    args = shlex.split(command)[1:]
    out = []
    for a in args:
        if a == "sample_logs" or a.startswith("configs/"):
            a = str(SAMPLE_LOGS if a == "sample_logs" else ROOT / a)
        out.append(a)
    return [*out, "-q"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str | None, Path]:
    """Per setup command: a directory where it ran (once for every block that needs it)."""
    dirs: dict[str | None, Path] = {}
    for setup in dict.fromkeys(b.setup for b in RUNNABLE):
        folder = tmp_path_factory.mktemp("docs")
        if setup is not None:
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(folder)
                assert main(_setup_args(setup)) == 0, setup
        dirs[setup] = folder
    return dirs


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_the_block_runs_as_written(
    block: Block, prepared: dict[str | None, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    if "trl" in block.code or "transformers" in block.code:
        pytest.importorskip("trl", reason="the trainers extra is not installed (pip install 'msgtrain[trainers]')")
    monkeypatch.chdir(prepared[block.setup])
    exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
