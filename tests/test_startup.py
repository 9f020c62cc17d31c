"""Commands import only what they need: ``--help`` and ``formats`` load none of the heavy libraries that
``convert`` needs (transformers, datasets, pyarrow, torch, ray), and ``formats`` loads neither the readers nor the
message model (it lists the generated catalogue, which must equal the registry). Checked in a fresh interpreter
through ``sys.modules`` (not timed: a timing test would be flaky on a shared machine)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    "msgtrain.ingest.core.base",
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


# What a one-record convert with the embedded tokenizer must not import: the libraries a tokenizer folder, a hub id,
# a --config or pandas objects would need, and readers its file does not need (tests/test_lazy_detection.py).
CONVERT_LIGHT = (
    "pandas",
    "datasets",
    "torch",
    "transformers",
    "yaml",
    "pyarrow.acero",
    "pyarrow.dataset",
    "msgtrain.ingest.structure.structural",
)


def test_a_one_record_convert_imports_no_pandas_datasets_torch_transformers_or_yaml(tmp_path: Path) -> None:
    log = tmp_path / "one.jsonl"
    with open(ROOT / "sample_logs" / "calls" / "agent_calls.jsonl", encoding="utf-8") as f:
        log.write_text(f.readline(), encoding="utf-8")
    code, heavy = _imported_by("convert", str(log), "-q", "-o", str(tmp_path / "out"), watch=CONVERT_LIGHT)
    assert code == 0 and (tmp_path / "out" / "report.json").is_file()
    assert heavy == []


def test_the_reports_counts_per_policy_and_source_equal_pyarrows_group_by() -> None:
    """The run's tally sums with numpy (pyarrow's group_by would import Acero at every convert); checked against
    ``Table.group_by().aggregate()`` on seeded random tables (null keys and sample ids, chunked columns)."""
    import random
    from collections import Counter

    import pyarrow as pa

    from msgtrain.run.assembly import _group_counts

    rng = random.Random(37)
    for trial in range(60):
        n = rng.randint(1, 30)
        table = pa.table(
            {
                "policy": pa.array([rng.choice(["a", "b", None, "c"]) for _ in range(n)], type=pa.string()),
                "source": pa.array([rng.choice(["x", "y"]) for _ in range(n)], type=pa.string()),
                "sample_id": pa.array([rng.choice(["s", None]) for _ in range(n)], type=pa.string()),
                "num_tokens": pa.array([rng.randint(0, 2**31 - 1) for _ in range(n)], type=pa.int32()),
                "num_trained_tokens": pa.array([rng.randint(0, 999) for _ in range(n)], type=pa.int32()),
                "num_turns": pa.array([rng.randint(0, 9) for _ in range(n)], type=pa.int32()),
            }
        )
        if trial % 2:
            table = pa.concat_tables([table, table])
        for column in ("policy", "source"):
            agg = table.group_by(column).aggregate(
                [("num_tokens", "sum"), ("num_trained_tokens", "sum"), ("num_turns", "sum"), ("sample_id", "count")]
            )
            expected = {
                str(r[column]): Counter(
                    samples=r["sample_id_count"],
                    tokens=r["num_tokens_sum"],
                    trained_tokens=r["num_trained_tokens_sum"],
                    turns=r["num_turns_sum"],
                )
                for r in agg.to_pylist()
            }
            assert _group_counts(table, column) == expected


PANDAS_LATER = """
import sys
import pyarrow as pa
from msgtrain.export.without_pandas import skip_pandas
assert skip_pandas()
table = pa.table({"ids": pa.array([[1, 2], [3]], type=pa.list_(pa.int32())), "s": ["a", None]})
table.column("ids").chunk(0).offsets.to_numpy()
assert "pandas" not in sys.modules
frame = table.to_pandas()  # what asks pyarrow for pandas still gets it
assert "pandas" in sys.modules and frame["s"].isna().tolist() == [False, True]
print("ok")
"""

LIBRARY = """
import sys
from pathlib import Path
import pyarrow as pa
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert
convert(ConvertConfig(inputs=[sys.argv[1]], output=sys.argv[2], quiet=True))
print(pa.lib._pandas_api.have_pandas)
"""


def test_pyarrow_without_pandas_imports_it_when_asked_and_only_in_msgtrains_own_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", PANDAS_LATER], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
    # A library call leaves pyarrow's pandas integration as it was (it sees pandas, which is installed).
    log = ROOT / "sample_logs" / "calls" / "agent_calls.jsonl"
    args = [sys.executable, "-c", LIBRARY, str(log), str(tmp_path / "out")]
    run = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "True"


def test_formats_imports_no_reader_and_no_message_model() -> None:
    code, heavy = _imported_by("formats", watch=FORMATS_LIGHT)
    assert code == 0
    assert heavy == []
    code, heavy = _imported_by("formats", preload="msgtrain.ingest.registry", watch=FORMATS_LIGHT)
    assert "msgtrain.ingest.registry" in heavy and "msgtrain.model" in heavy  # the probe sees them when imported


def test_the_formats_catalogue_is_the_registry() -> None:
    from msgtrain.ingest import catalog, registry

    readers = [registry.load_reader(m) for m in registry.MODULES]
    listed = tuple((r.name, r.description, r.example) for r in readers)
    stale = "the catalogue is stale: run `python -m msgtrain.ingest.registry`"
    assert listed == catalog.FORMATS, stale
    assert tuple(row[:2] for row in catalog.READERS) == tuple(
        zip([r.name for r in readers], registry.MODULES, strict=True)
    ), stale
    assert registry.catalog_text() == Path(catalog.__file__).read_text(encoding="utf-8"), stale


# ------------------------------------------------------------------ the console script's exit
RUN = """
import atexit, sys, threading, time
from pathlib import Path
from typing import Any
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


# ------------------------------------------------------------------ a conversion imports what it uses
def test_a_convert_on_the_embedded_tokenizer_imports_neither_transformers_nor_datasets(tmp_path: Path) -> None:
    """The embedded tokenizer is built with ``tokenizers`` alone, templates render through transformers' own
    chat-template module loaded without its package (msgtrain.linearize.hf_chat), and the Parquet features and
    dataset_info.json are written without ``datasets``: no transformers, torch, datasets or hub client."""
    log = tmp_path / "one.jsonl"
    log.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n"
    )
    watch = ("transformers", "torch", "datasets", "huggingface_hub")
    code, heavy = _imported_by("convert", str(log), "-q", "-o", str(tmp_path / "out"), watch=watch)
    assert code == 0 and (tmp_path / "out" / "report.json").is_file()
    assert heavy == []


def test_the_embedded_tokenizer_is_the_one_transformers_builds() -> None:
    """Oracle: the tokenizer built through transformers (what the embedded one stands for): the same vocabulary and
    pipeline, added tokens, special ids and fingerprint (which keys resumed parts)."""
    from msgtrain.linearize.snapshot import _facts
    from msgtrain.linearize.tokenizer import DEMO_TOKENIZER, TokenizerBundle, _build_demo_tokenizer, _demo_tokenizer

    light, truth = _demo_tokenizer(), _build_demo_tokenizer()
    assert light.backend_tokenizer.to_str() == truth.backend_tokenizer.to_str()
    assert _facts(light) == _facts(truth)
    for text in ("<|im_start|>user\nhé 👋<|im_end|>\n", "  \t\r\n", "<|endoftext|>x"):
        assert light.encode(text, add_special_tokens=False) == truth.encode(text, add_special_tokens=False)
        ids = truth.encode(text, add_special_tokens=False)
        assert light.decode(ids) == truth.decode(ids)
        assert light.convert_ids_to_tokens(ids) == truth.convert_ids_to_tokens(ids)
    assert TokenizerBundle(light, DEMO_TOKENIZER).fingerprint == TokenizerBundle(truth, DEMO_TOKENIZER).fingerprint


def test_templates_render_through_the_standalone_chat_template_module_as_apply_chat_template_renders_them() -> None:
    """Oracle: ``apply_chat_template`` of transformers itself, for the embedded template and the real Qwen3 one
    (tools, reasoning), against transformers' chat-template module executed without its package."""
    from transformers import AutoTokenizer

    from msgtrain.linearize.hf_chat import standalone
    from msgtrain.linearize.tokenizer import _build_demo_tokenizer
    from tests.conftest import shared_path

    module = standalone()
    assert module.__name__.startswith("_msgtrain_transformers_chat")
    tool: dict[str, Any] = {
        "type": "function",
        "function": {"name": "add", "description": "Add.", "parameters": {"type": "object"}},
    }
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2? Ünïcode «ok»"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}],
        },
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "4."},
    ]
    for hf in (_build_demo_tokenizer(), AutoTokenizer.from_pretrained(shared_path("tokenizers", "qwen3"))):
        for tools, generation in ((None, False), ([tool], True)):
            offered: Any = tools
            expected = hf.apply_chat_template(messages, tools=offered, add_generation_prompt=generation, tokenize=False)
            data = module._plain_template_data({"messages": messages, "tools": tools})
            rendered = module._compile_jinja_template(hf.chat_template).render(
                **data, add_generation_prompt=generation, **hf.special_tokens_map
            )
            assert rendered == expected


BANNER = """
import os, sys
sys.modules["torch"] = None  # torch is installed here: find_spec("torch") now says it is not
import msgtrain.cli
import transformers  # what any command that loads a tokenizer through transformers does
from msgtrain.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("advisory", [None, ""])
def test_no_dependency_prints_a_banner_when_torch_is_missing(advisory: str | None) -> None:
    """On a base install (no torch) transformers announces "PyTorch was not found" as it is imported; msgtrain turns
    its advisory messages off before any import of transformers. With the variable set empty by the user the banner
    shows: the simulated absence of torch is seen."""
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    env["PYTHONPATH"] = str(ROOT)
    if advisory is not None:
        env["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = advisory
    proc = subprocess.run(
        [sys.executable, "-c", BANNER, "formats"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0
    printed = proc.stdout + proc.stderr
    if advisory is None:
        assert "PyTorch" not in printed and proc.stderr == ""
    else:
        assert "PyTorch was not found" in printed


# Each command in a process of its own, forked after the imports above: what it prints goes to files of its own, and
# it exits as a process does (its exit handlers run), without paying the interpreter's start and imports each time.
EACH = """
import json, os, sys
sys.modules["torch"] = None
import msgtrain.cli
import transformers
from msgtrain.cli import main
codes = []
for i, argv in enumerate(json.loads(sys.argv[1])):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            target = os.open(os.path.join(sys.argv[2], f"{i}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.exit(main(argv))
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def test_no_command_prints_a_dependency_banner_or_warning(tmp_path: Path) -> None:
    """Every command that reads logs or output, on a base install (torch absent) with transformers imported, prints
    only its own output: stderr stays empty, stdout names no dependency's advisory."""
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    env["PYTHONPATH"] = str(ROOT)
    log = tmp_path / "one.jsonl"
    with open(ROOT / "sample_logs" / "calls" / "agent_calls.jsonl", encoding="utf-8") as f:
        log.write_text(f.readline(), encoding="utf-8")
    out = str(tmp_path / "out")
    commands = [
        ["convert", str(log), "-q", "-o", out],
        ["validate", str(log)],
        ["inspect", str(log)],
        ["stats", out],
        ["formats", "--explain", str(log)],
    ]
    printed = tmp_path / "printed"
    printed.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", EACH, json.dumps(commands), str(printed)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]  # the imports print nothing
    codes = json.loads(proc.stdout)
    for i, argv in enumerate(commands):
        stdout = (printed / f"{i}.out").read_text(encoding="utf-8")
        stderr = (printed / f"{i}.err").read_text(encoding="utf-8")
        assert codes[i] == 0, (argv, stderr[-2000:])
        assert stderr == "", (argv, stderr[-2000:])
        assert not re.search(r"PyTorch|TensorFlow|Flax|Warning", stdout), (argv, stdout[-2000:])


@pytest.mark.parametrize(
    "shards",
    [
        [("train", 4, 100, 50)],
        [("train", 2, 60, 30), ("train", 3, 70, 35), ("validation", 1, 9, 8)],
        [],
    ],
    ids=["one-shard", "splits-and-shards", "empty"],
)
def test_features_and_dataset_info_are_what_datasets_writes(tmp_path: Path, shards: list[tuple[Any, ...]]) -> None:
    """Oracle: ``datasets`` itself (``Features.from_arrow_schema``, ``DatasetInfo.write_to_directory``), for every
    target; msgtrain writes both without importing it."""
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo

    from msgtrain.export.targets import TARGETS
    from msgtrain.export.writer import INFO_FILE, ShardInfo, hf_features, write_parquet_info

    infos = [ShardInfo(split, rows, num_bytes, size) for split, rows, num_bytes, size in shards]
    for target in TARGETS.values():
        assert hf_features(target.schema) == Features.from_arrow_schema(target.schema).to_dict(), target.name
        ours, theirs = tmp_path / target.name / "ours", tmp_path / target.name / "theirs"
        ours.mkdir(parents=True)
        theirs.mkdir()
        write_parquet_info(ours, target, ["train", "validation"], infos)
        split_infos = SplitDict()
        for name in ("train", "validation"):
            mine = [s for s in infos if s.split == name]
            if mine:
                rows = [s.rows for s in mine]
                split_infos.add(
                    SplitInfo(
                        name=name,
                        num_bytes=sum(s.num_bytes for s in mine),
                        num_examples=sum(rows),
                        shard_lengths=rows if len(mine) > 1 else None,
                    )
                )
        DatasetInfo(
            description=f"msgtrain export, target {target.name!r}: {target.description}",
            features=Features.from_arrow_schema(target.schema),
            splits=split_infos,
            download_size=sum(s.size for s in infos),
            dataset_size=sum(s.num_bytes for s in split_infos.values()),
            config_name="default",
        ).write_to_directory(str(theirs))
        assert (ours / INFO_FILE).read_bytes() == (theirs / INFO_FILE).read_bytes(), target.name
