"""``--engine ray`` gives the local engine's output byte for byte (a Ray cluster of two one-CPU nodes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import corpus as gen
from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from msgtrain.run.part_store import LocalParts
from msgtrain.run.parts import Job, LinearizeSettings
from tests.conftest import SAMPLE_LOGS


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def ray_local(ray_cluster: Any) -> Any:
    import ray

    return ray


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Several files, so tasks run side by side: generated conversations (two bad records), and the sample logs."""
    root = tmp_path / "in"
    (root / "generated").mkdir(parents=True)
    convs = gen.make_conversations(gen.synthetic_pool(), 6, 6, reasoning=True)
    for k, group in enumerate(gen.spread(convs, 3)):
        gen.write_calls(root / "generated" / f"calls-{k}.jsonl", group, model="policy")
    gen.write_native(root / "generated" / "graphs.jsonl", convs[:2], model="policy")
    with open(root / "generated" / "calls-0.jsonl", "a", encoding="utf-8") as f:
        f.write('{"request": {"messages": [{"role": "user"\n{"request": 1, "response": {}}\n')
    for p in sorted(SAMPLE_LOGS.rglob("*")):
        if p.is_file():
            dest = root / "sample_logs" / p.relative_to(SAMPLE_LOGS)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
    return root


def _convert_with_ray(monkeypatch: pytest.MonkeyPatch, cfg: ConvertConfig) -> dict[str, Any]:
    """Run the pipeline with ``engine="ray"`` through the pipeline's own dispatch, counting the Ray calls."""
    from msgtrain.run import ray_engine

    calls: list[int] = []
    real = ray_engine.run_parts_ray

    def counted(*args: Any, **kwargs: Any) -> None:
        calls.append(len(args[0]))
        real(*args, **kwargs)

    monkeypatch.setattr(ray_engine, "run_parts_ray", counted)
    report = pipeline.convert(cfg)
    assert calls, "the Ray engine did not run"
    return report


def test_ray_engine_output_is_byte_identical_to_the_local_engine(
    ray_local: Any, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny chunks: big files' chunks (line ranges) travel through Ray Data as jobs too.
    local = pipeline.convert(ConvertConfig(inputs=(inputs,), output=tmp_path / "local", workers=1, chunk_mb=0.004))
    report = _convert_with_ray(
        monkeypatch, ConvertConfig(inputs=(inputs,), output=tmp_path / "ray", engine="ray", chunk_mb=0.004)
    )
    assert report["resume"]["parts"] > report["files"]["read"]
    assert report["records"] == local["records"]
    assert report["samples"]["written"] > 0
    assert report["records"]["rejected"] >= 2  # bad records travel through Ray as rejects too
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")


def test_one_task_per_shard_gives_the_local_engines_shards_byte_for_byte(
    ray_local: Any, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.run import assembly

    # Small shards, a held-out split and a length policy that splits rows: shard boundaries fall inside files
    # and inside chunked files, and a file's rows land in two splits.
    options: dict[str, Any] = {
        "rows_per_shard": 7,
        "row_group_size": 3,
        "split": {"validation": 0.3},
        "max_length": 600,
        "overflow": "split",
        "target": "labels",
        "chunk_mb": 0.004,
    }
    local = pipeline.convert(ConvertConfig(inputs=(inputs,), output=tmp_path / "local", workers=1, **options))
    from msgtrain.run import ray_engine

    shards: list[str] = []  # the shard tasks the driver hands out
    real = ray_engine.run_tasks_ray

    def counted(calls: list[tuple[Any, tuple[Any, ...]]], **kwargs: Any) -> list[Any]:
        shards.extend(args[3].name for fn, args in calls if fn is assembly.write_shard)
        return real(calls, **kwargs)

    monkeypatch.setattr(ray_engine, "run_tasks_ray", counted)
    report = _convert_with_ray(
        monkeypatch, ConvertConfig(inputs=(inputs,), output=tmp_path / "ray", engine="ray", **options)
    )
    files = report["outputs"]["splits"]
    assert len(files["train"]["files"]) >= 3 and files["validation"]["files"]
    assert sorted(shards) == sorted(f for split in files.values() for f in split["files"])
    assert report["samples"]["length_policy"]["split_rows"] > 0
    assert report["records"] == local["records"] and report["samples"] == local["samples"]
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")  # shards, dataset_info.json, report.json


def test_strict_errors_come_back_as_msgtrain_errors(ray_local: Any, tmp_path: Path) -> None:
    from msgtrain.run.ray_engine import run_parts_ray

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": {"messages": []}, "response": {"choices": []}}\n', encoding="utf-8")
    settings = LinearizeSettings(None, None, (), None, "calls", strict=True)
    parts = LocalParts(tmp_path / "parts")
    parts.reset(resume=False)
    with pytest.raises(MsgtrainError) as err:
        run_parts_ray([Job(bad, "k", {"source": str(bad)})], settings, parts, lambda job, stats: None)
    assert type(err.value).__module__.startswith("msgtrain")


def test_a_missing_ray_is_a_config_error_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.run.ray_engine import run_parts_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    settings = LinearizeSettings(None, None, (), None, None)
    with pytest.raises(ConfigError, match=r"msgtrain\[ray\]"):
        run_parts_ray([Job(tmp_path / "x.jsonl", "k", {})], settings, LocalParts(tmp_path), lambda job, stats: None)


@pytest.mark.parametrize("options", [{"target": "packed", "pack_length": 1024}, {"format": "jsonl"}])
def test_targets_not_written_one_shard_per_task_are_written_by_a_task_not_the_driver(
    ray_local: Any, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    local = pipeline.convert(ConvertConfig(inputs=(inputs,), output=tmp_path / "local", workers=1, **options))

    from msgtrain.run import assembly, execute

    def not_here(*args: Any, **kwargs: Any) -> Any:  # Ray's workers are other processes: they keep the original
        raise AssertionError("the driver assembled the dataset itself")

    monkeypatch.setattr(assembly, "write_dataset", not_here)
    monkeypatch.setattr(execute, "write_dataset", not_here)  # the local executor's, called on the driver
    report = _convert_with_ray(
        monkeypatch, ConvertConfig(inputs=(inputs,), output=tmp_path / "ray", engine="ray", **options)
    )
    assert report["samples"] == local["samples"] and report["samples"]["written"] > 0
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")
