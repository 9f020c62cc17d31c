"""Every Python block of README.md and docs/*.md runs as written, or says it is a sketch.

A block preceded by ``<!-- tested -->`` runs in an empty directory; ``<!-- tested after: msgtrain convert ... -->``
runs in a directory where that command (``sample_logs`` and ``configs/`` are the checkout's) has been run. A block
whose first line is ``# Sketch: why`` is not run (it needs a model download, a GPU or a trainer msgtrain does not
install). No block holds ``...``: a user pastes them.

Every ``msgtrain`` command line of a shell or plain block names a command, options and targets the CLI has and
configs that ship (placeholders such as ``LOGS/``, ``OUT``, ``PATH`` stand for the user's own); those whose inputs
all ship with the checkout (the quick start, ``formats``, ``inspect`` on a sample log) are run.
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
        if a == "sample_logs" or a.startswith(("configs/", "sample_logs/")):
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


# --- command lines ------------------------------------------------------------------------------------------------

COMMAND_START = re.compile(r"(?:^|&&|\s--\s|^[A-Z_]+=\S+)\s*msgtrain\s+(?P<args>.*)$")


def _command_lines() -> list[tuple[str, list[str]]]:
    """(file:line, arguments after ``msgtrain``) of every msgtrain command in a shell or plain block."""
    found = []
    for doc in DOCS:
        for block in _blocks(doc):
            if block.language not in ("bash", "sh", "console", ""):
                continue
            text = block.code.replace("\\\n", " ")  # continued lines
            for line in text.splitlines():
                line = line.split(" # ", 1)[0].strip()
                match = COMMAND_START.search(line)
                if match and not line.startswith(("│", "├", "└")):
                    args = shlex.split(match.group("args").replace("[", " ").replace("]", " "))
                    found.append((block.where, args))
    return found


COMMANDS = _command_lines()


def test_every_documented_command_uses_commands_options_and_values_the_cli_has() -> None:
    import typer

    from msgtrain.cli import _register_commands, app
    from msgtrain.export.targets import TARGETS

    _register_commands()
    group = typer.main.get_command(app)
    assert len(COMMANDS) > 15
    for where, args in COMMANDS:
        command = group.commands.get(args[0])  # type: ignore[attr-defined]
        assert command is not None, f"{where}: no command {args[0]!r}"
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for i, arg in enumerate(args):
            name = arg.split("=", 1)[0]
            if name.startswith("-"):
                assert name in options, f"{where}: `msgtrain {args[0]}` has no option {name}"
            if name == "--target":
                assert args[i + 1] in TARGETS, f"{where}: no target {args[i + 1]!r}"
            if name == "--config" and args[i + 1].startswith("configs/"):
                assert (ROOT / args[i + 1]).is_file(), f"{where}: {args[i + 1]} is not shipped"


WRITES = ("-o", "--output", "--html", "--plot")  # options naming what a command writes: redirected to tmp_path


def test_documented_commands_whose_inputs_ship_with_the_checkout_run(tmp_path: Path) -> None:
    """Those whose every input is in the checkout (the quick start, inspect on a sample log, formats); what they
    write goes to tmp_path."""
    ran = 0
    for where, args in COMMANDS:
        writes = {i + 1 for i, a in enumerate(args) if a in WRITES}
        inputs = [a for i, a in enumerate(args[1:], 1) if i not in writes and not a.startswith("-")]
        if not all(a.isdigit() or (ROOT / a).exists() for a in inputs):
            continue
        argv = [
            str(tmp_path / f"{ran}-{Path(a).name}") if i in writes else str(ROOT / a) if (ROOT / a).exists() else a
            for i, a in enumerate(args)
        ]
        assert main([*argv, "-q"] if args[0] == "convert" else argv) == 0, where
        ran += 1
    assert ran >= 3


def test_the_graph_log_example_is_what_the_documented_operations_write(tmp_path: Path) -> None:
    import json

    from msgtrain import MessageGraph
    from msgtrain.model import Generation

    doc = ROOT / "docs" / "graph-log.md"
    (block,) = [b for b in _blocks(doc) if '"format":"msgtrain.graph"' in b.code and '"retract"' in b.code]
    g = MessageGraph(graph_id="demo", template_kwargs={"enable_thinking": False}, log=tmp_path / "run.graph.jsonl")
    g.append({"role": "user", "content": "Hi"})
    engine = Generation(token_ids=[9906, 0], logprobs=[-0.01, -0.2], finish_reason="stop")
    g.append({"role": "assistant", "content": "Hello!"}, generation=engine)
    g.append({"role": "user", "content": "Bye"})
    g[2] = {"role": "user", "content": "Bye now"}  # in place: nobody saw "Bye"
    g[0] = {"role": "user", "content": "Hi there"}  # before the sampled turn: a fork
    written = (tmp_path / "run.graph.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in written] == [json.loads(line) for line in block.code.splitlines()]
    g.save(tmp_path / "saved.graph.jsonl")
    saved = (tmp_path / "saved.graph.jsonl").read_text(encoding="utf-8").splitlines()
    head = re.search(r"ends\s+with `(\{[^`]*\})`", doc.read_text(encoding="utf-8"))
    assert head is not None and json.loads(saved[-1]) == json.loads(head.group(1))


def test_the_message_json_examples_of_the_graph_log_parse_as_the_three_kinds() -> None:
    import json

    from msgtrain.model.message import parse_message

    (block,) = [b for b in _blocks(ROOT / "docs" / "graph-log.md") if b.language == "json"]
    decoder, text, kinds = json.JSONDecoder(), block.code, []
    position = 0
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        record, position = decoder.raw_decode(text, position)
        kinds.append(parse_message(record).kind)
    assert kinds == ["parts", "option_call", "option_result"]


def test_every_yaml_block_is_valid_yaml_with_keys() -> None:
    import yaml

    blocks = [b for doc in DOCS for b in _blocks(doc) if b.language == "yaml"]
    assert blocks
    for block in blocks:
        data = yaml.safe_load(block.code)
        assert isinstance(data, dict) and data, block.where
        values = "\n".join(line.split("#", 1)[0] for line in block.code.splitlines())  # comments may describe
        assert "..." not in values, f"{block.where}: `...` in a config a user pastes"


def _emitted_drop_reasons() -> set[str]:
    """Every reason a sampled turn or a sample can be dropped with: the linearizer's DropReason and the length
    policy's counters (``dropped_turns["..."]`` / ``dropped_samples["..."]`` anywhere in the package)."""
    from msgtrain.linearize import DropReason

    counted = re.compile(r"dropped_(?:turns|samples)\[\s*[\"'](\w+)[\"']\s*\]")
    found = {r.value for r in DropReason}
    for path in (ROOT / "msgtrain").rglob("*.py"):
        found.update(counted.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_drop_reason_the_code_can_emit_is_listed_with_its_fix_in_the_exactness_rules() -> None:
    text = (ROOT / "docs" / "exactness.md").read_text(encoding="utf-8")
    section = text.split('## What "token-exact" means', 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {name for line in rows for name in re.findall(r"`(\w+)`", line)}
    reasons = _emitted_drop_reasons()
    assert {"render_error", "completion_not_renderable", "sample_too_long", "no_turn_fits"} <= reasons
    assert not reasons - listed, f"drop reasons missing from docs/exactness.md's table: {reasons - listed}"
    for line in rows:  # reason | what happened | fix: every row names a fix
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 3 and all(cells), line


def test_the_readme_is_a_users_path_of_at_most_300_lines() -> None:
    """What it does, the two commands, converting, feeding a trainer, nightly runs, scaling out, links: everything
    longer lives in docs/, linked from where it matters."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    sections = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert sections == [
        "Two commands",
        "Convert your logs",
        "Feed your trainer",
        "Run it nightly",
        "Scale out",
        "Links",
    ]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    """The anchors of a markdown file's headings (outside code blocks)."""
    out, fenced = set(), False
    for line in doc.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def test_every_relative_link_of_the_readme_and_docs_names_a_file_and_heading_that_exist() -> None:
    link = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")
    checked = 0
    for doc in DOCS:
        for target in link.findall(doc.read_text(encoding="utf-8")):
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            assert file.exists(), f"{doc.relative_to(ROOT)}: link to {target}: no such file"
            if anchor and file.suffix == ".md":
                assert anchor in _anchors(file), f"{doc.relative_to(ROOT)}: link to {target}: no such heading"
            checked += 1
    assert checked > 20
