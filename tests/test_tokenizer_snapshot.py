"""Tokenizer snapshots (msgtrain.linearize.snapshot) against the transformers tokenizer they stand for.

The oracle is the bundle built on transformers' own tokenizer of the same folder: every fact the linearizer reads
(added tokens, strip flags, special and stop ids, whitespace ids, the boundary-reuse and direct-decode decisions,
the fingerprint), encoding and decoding of seeded random texts mixing added-token text, whitespace and non-ASCII,
renderings, and whole linearized samples of real conversations must be equal.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msgtrain.errors import MsgtrainWarning
from tests.conftest import TEMPLATES, shared_path

FOLDERS = sorted({TEMPLATES[n][0] for n in ("qwen3", "phi3", "gpt-oss")})
# The folder the tests of the snapshot's mechanism (keys, tampered and corrupt entries, rebuilding, turning snapshots
# off) load: the smallest real vocabulary (32k tokens). What they check does not depend on the vocabulary, which only
# changes their cost (Qwen3's 150k tokens take about a second to load and restore, Phi-3's a tenth of that); every
# folder of FOLDERS is compared with the transformers tokenizer it stands for in the tests above them.
MECHANISM = TEMPLATES["phi3"][0]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("MSGTRAIN_CACHE_DIR", str(root))
    monkeypatch.delenv("MSGTRAIN_CACHE", raising=False)
    return root / "tokenizers"


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path], tuple[Any, Path]]]:
    """``take(folder)``: transformers' tokenizer of a folder and the snapshot entry ``_load_and_snapshot`` stored for
    it, taken once per module (in a cache of the module's own) and shared by its tests, which copy the entry into
    their own cache: loading a vocabulary through transformers and taking its snapshot costs seconds (gpt-oss's
    200k tokens about five), and only the tests of taking a snapshot need to take it again. The tokenizer is read,
    never changed, by the tests."""
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_and_snapshot

    root = tmp_path_factory.mktemp("module-cache")
    done: dict[Path, tuple[Any, Path]] = {}

    def take(folder: Path) -> tuple[Any, Path]:
        if folder not in done:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("MSGTRAIN_CACHE_DIR", str(root))
                env.delenv("MSGTRAIN_CACHE", raising=False)
                hf = _load_and_snapshot(str(folder), folder)
                entry = root / "tokenizers" / str(snapshot.snapshot_key(folder))
            assert (entry / "facts.json").is_file(), f"no snapshot was stored for {folder}"
            done[folder] = (hf, entry)
        return done[folder]

    yield take
    done.clear()


def _stored(taken: Callable[[Path], tuple[Any, Path]], folder: Path, cache: Path) -> tuple[Any, Path]:
    """transformers' tokenizer of ``folder`` and its snapshot, stored in this test's ``cache`` (a copy of the entry
    the module took): the state ``_load_and_snapshot(folder)`` leaves."""
    hf, entry = taken(folder)
    stored = cache / entry.name
    shutil.copytree(entry, stored)
    return hf, stored


def _pair(
    taken: Callable[[Path], tuple[Any, Path]], cache: Path, folder: Path, template: Path | None
) -> tuple[Any, Any]:
    """(bundle on transformers' tokenizer, bundle on its snapshot), both with the same template override."""
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import TokenizerBundle, _load_hf

    hf, _ = _stored(taken, folder, cache)
    restored = snapshot.load(folder)  # verified and restored from this test's cache
    assert restored is not None, f"the snapshot stored for {folder} was not used"
    if template is not None:  # the override as _load_hf applies it, to transformers' tokenizer and to the snapshot
        with pytest.MonkeyPatch.context() as env:
            env.setenv("MSGTRAIN_CACHE", "0")
            hf = _load_hf(str(folder), str(template))
        assert type(hf).__name__ != "SnapshotTokenizer"
        restored = _load_hf(str(folder), str(template))
        assert type(restored).__name__ == "SnapshotTokenizer"
    return TokenizerBundle(hf, str(folder)), TokenizerBundle(restored, str(folder))


def _texts(bundle: Any, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces = [
        *bundle.added_strings[:40],
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "hello",
        " world",
        "naïve",
        "東京",
        "🚀",
        "ﬁ",
        "123",
        "’s",
        '{"a": 1}',
        "<think>",
        "</think>",
    ]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(200)]


@pytest.mark.parametrize("folder_name", FOLDERS)
def test_a_snapshot_is_the_tokenizer_it_was_taken_of(folder_name: str, cache: Path, taken: Any) -> None:
    folder = shared_path(folder_name)
    orig, snap = _pair(taken, cache, folder, None)
    assert type(snap.hf).__name__ == "SnapshotTokenizer"
    for attr in ("added_strings", "special_ids", "stop_ids", "whitespace_ids", "boundary_reuse", "_strips"):
        assert getattr(snap, attr) == getattr(orig, attr), attr
    assert np.array_equal(snap.added_ids, orig.added_ids)
    assert np.array_equal(snap._is_added, orig._is_added)
    assert snap._decode_direct == orig._decode_direct
    assert snap.fingerprint == orig.fingerprint  # it keys resumed runs
    assert len(snap.hf) == len(orig.hf)
    assert snap.hf.eos_token_id == orig.hf.eos_token_id
    assert snap.hf.special_tokens_map == orig.hf.special_tokens_map
    for text in _texts(orig, seed=len(folder_name)):
        ids = orig.hf.encode(text, add_special_tokens=False)
        assert snap.hf.encode(text, add_special_tokens=False) == ids, text
        assert np.array_equal(snap.encode(text), orig.encode(text))
        assert snap.decode(ids) == orig.hf.decode(ids, skip_special_tokens=False)
        # one id, as transformers takes it (callers such as ART decode a single token id)
        assert snap.hf.decode(ids[0]) == orig.hf.decode(ids[0])
    probe = [{"role": "user", "content": "hi <|im_end|>"}, {"role": "assistant", "content": "yes"}]
    for gen in (False, True):
        assert snap.render(probe, add_generation_prompt=gen) == orig.hf.apply_chat_template(
            probe, tokenize=False, add_generation_prompt=gen
        )
    # Anything the snapshot does not hold comes from transformers' tokenizer, loaded on first use.
    assert snap.hf.convert_tokens_to_ids(orig.added_strings[0]) == orig.hf.convert_tokens_to_ids(orig.added_strings[0])
    assert snap.hf.apply_chat_template(probe, tokenize=False) == orig.hf.apply_chat_template(probe, tokenize=False)


@pytest.mark.parametrize("name", ["qwen3", "qwen2.5", "phi3", "gpt-oss"])
def test_linearized_samples_are_the_same_from_a_snapshot(name: str, cache: Path, taken: Any) -> None:
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.core.base import ReadGraph
    from msgtrain.ingest.detect import detect_format
    from msgtrain.ingest.registry import REGISTRY  # noqa: F401 - fills the registry
    from msgtrain.linearize import linearize_graph

    folder, template = TEMPLATES[name]
    orig, snap = _pair(taken, cache, shared_path(folder), shared_path(template) if template else None)
    logs = [
        shared_path("real_logs", "sharegpt_llamafactory", "glaive_toolcall_en_demo.json"),
        shared_path("real_logs", "tau_bench", "gpt-4o-airline.first20.json"),
    ]
    graphs = [e.graph for log in logs for e in read_events(detect_format(log), log) if isinstance(e, ReadGraph)][::7]
    assert graphs
    for g in graphs:
        a, b = linearize_graph(g, orig), linearize_graph(g, snap)
        assert [s.sample_id for s in a.samples] == [s.sample_id for s in b.samples]
        for x, y in zip(a.samples, b.samples, strict=True):
            assert np.array_equal(x.input_ids, y.input_ids) and np.array_equal(x.loss_mask, y.loss_mask)
        assert a.drops == b.drops and a.cuts == b.cuts


def test_an_edited_folder_gets_a_new_snapshot_and_weights_do_not_count(tmp_path: Path, cache: Path, taken: Any) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_and_snapshot

    folder = tmp_path / "tok"
    shutil.copytree(shared_path(MECHANISM), folder)
    _stored(taken, shared_path(MECHANISM), cache)  # the copy's content: the same key
    assert snapshot.load(folder) is not None
    (folder / "model.safetensors").write_bytes(b"\0" * 64)  # weights are not part of the key
    assert snapshot.load(folder) is not None
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert snapshot.load(folder) is None  # an edited file is a miss
    _load_and_snapshot(str(folder), folder)
    restored = snapshot.load(folder)
    assert restored is not None and restored.chat_template == config["chat_template"]
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 2


def test_a_corrupt_snapshot_is_ignored_and_rebuilt(cache: Path, taken: Any) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_hf

    folder = shared_path(MECHANISM)
    _stored(taken, folder, cache)
    (entry,) = list(cache.iterdir())
    (entry / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.warns(MsgtrainWarning, match="discarded"):
        assert snapshot.load(folder) is None
    assert not entry.exists()
    hf = _load_hf(str(folder), None)  # through transformers, snapshot stored again
    assert type(hf).__name__ != "SnapshotTokenizer"
    assert type(_load_hf(str(folder), None)).__name__ == "SnapshotTokenizer"


def test_snapshots_off_and_tokenizers_that_are_not_only_their_backend(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_and_snapshot, auto_tokenizer, backend_decodes_alike

    folder = shared_path(MECHANISM)
    monkeypatch.setenv("MSGTRAIN_CACHE", "0")
    _load_and_snapshot(str(folder), folder)
    assert not cache.exists()
    monkeypatch.delenv("MSGTRAIN_CACHE")
    hf = auto_tokenizer(str(folder))
    assert snapshot.snapshotable(hf, backend_decodes_alike(hf)) is not None
    hf.clean_up_tokenization_spaces = True  # decode would differ from the backend's: no snapshot
    assert not backend_decodes_alike(hf)
    assert snapshot.snapshotable(hf, backend_decodes_alike(hf)) is None

    class Wrapped(type(hf)):  # type: ignore[misc]
        def encode(self, text: str, **kwargs: Any) -> list[int]:
            return [0, *super().encode(text, **kwargs)]

    hf.clean_up_tokenization_spaces = False
    hf.__class__ = Wrapped
    assert snapshot.snapshotable(hf, True) is None  # an encode that is not the backend's: no snapshot


@pytest.mark.parametrize("folder_name", FOLDERS)
def test_a_restored_backend_is_constructed_to_the_exact_serialization(folder_name: str, taken: Any) -> None:
    """The backend is rebuilt from its vocabulary and merges (faster to encode with than a deserialized one) and
    used only when it serializes back to exactly the stored JSON."""
    from msgtrain.linearize import snapshot

    spec = taken(shared_path(folder_name))[0].backend_tokenizer.to_str()
    restored = snapshot.restore(spec)
    assert restored is not None and restored.to_str() == spec


def test_a_serialization_is_restored_once_per_process_and_shared_by_its_loads(
    tmp_path: Path, cache: Path, taken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_hf

    folder = shared_path(MECHANISM)
    _stored(taken, folder, cache)
    first = _load_hf(str(folder), None)
    assert type(first).__name__ == "SnapshotTokenizer"

    def constructed_again(spec: str) -> Any:
        raise AssertionError("a serialization restored in this process was constructed again")

    monkeypatch.setattr(snapshot, "restore", constructed_again)
    template = tmp_path / "other.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}", encoding="utf-8")
    again, other = _load_hf(str(folder), None), _load_hf(str(folder), str(template))
    assert again.backend_tokenizer is first.backend_tokenizer is other.backend_tokenizer
    assert other.chat_template == template.read_text(encoding="utf-8") != first.chat_template


def test_what_the_construction_cannot_reproduce_is_refused_not_approximated(taken: Any) -> None:
    """Refused before anything is constructed, whatever the vocabulary: shown on the smallest one."""
    from msgtrain.linearize import snapshot

    spec = taken(shared_path(MECHANISM))[0].backend_tokenizer.to_str()
    data = json.loads(spec)
    assert (
        snapshot.restore(
            json.dumps(
                {**data, "truncation": {"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}}
            )
        )
        is None
    )
    assert snapshot.restore(spec.replace('"type":"BPE"', '"type":"Unigram"', 1)) is None


def test_the_heap_is_settled_once_in_a_conversion_process_and_never_for_library_callers(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = """
import gc, json, sys
from pathlib import Path
from msgtrain.run import parts
from msgtrain.run.parts import convert_file, settings_from_config
from msgtrain.run.config import ConvertConfig
parts.SETTLE_HEAP = sys.argv[1] == "1"
log = Path(sys.argv[2])
settings = settings_from_config(ConvertConfig(inputs=[str(log)], output=sys.argv[3]))
convert_file(log, settings)
first = gc.get_freeze_count()
convert_file(log, settings)
print(json.dumps([first, gc.get_freeze_count()]))
"""
    log = tmp_path / "one.jsonl"
    log.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}) + "\n",
        encoding="utf-8",
    )
    root = Path(__file__).resolve().parents[1]
    counts = {}
    for flag in ("0", "1"):
        proc = subprocess.run(
            [sys.executable, "-c", code, flag, str(log), str(tmp_path / "out")],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=300,
            check=True,
        )
        counts[flag] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["0"] == [0, 0]
    assert counts["1"][0] > 0 and counts["1"][1] == counts["1"][0]  # frozen once, not again


def test_a_tokenizer_the_snapshot_cannot_rebuild_still_loads(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_hf

    def broken(spec: str) -> Any:
        raise TypeError("this tokenizers version cannot construct it")

    monkeypatch.setattr(snapshot, "restore", broken)
    monkeypatch.setattr(snapshot, "_RESTORED", type(snapshot._RESTORED)())  # nothing restored earlier to share
    hf = _load_hf(str(shared_path(MECHANISM)), None)
    assert type(hf).__name__ != "SnapshotTokenizer"
    assert not cache.exists() or not any(cache.iterdir())  # nothing stored


def test_no_home_directory_means_no_memos_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from msgtrain import cache

    monkeypatch.delenv("MSGTRAIN_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("MSGTRAIN_CACHE", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert cache.cache_dir("tokenizers") is None
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert cache.cache_dir("tokenizers") == Path("/somewhere/msgtrain/tokenizers")
    monkeypatch.setenv("MSGTRAIN_CACHE", "0")
    assert cache.cache_dir("tokenizers") is None


def test_whatever_taking_a_snapshot_raises_the_tokenizer_still_loads(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.linearize import snapshot
    from msgtrain.linearize.tokenizer import _load_hf

    def odd(hf: Any, decodes_alike: bool) -> str | None:
        raise AttributeError("a tokenizer class without added_tokens_decoder")

    monkeypatch.setattr(snapshot, "snapshotable", odd)
    hf = _load_hf(str(shared_path(MECHANISM)), None)
    assert hf.encode("hello", add_special_tokens=False)
    assert not cache.exists() or not any(cache.iterdir())


def _swap_two_ids(entry: Path) -> None:
    """Swap the ids of two vocabulary entries in a stored snapshot: a consistent edit that still restores."""
    spec = json.loads((entry / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    a, b = "hello", "world"
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (entry / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def _edit_template(entry: Path) -> None:
    facts = json.loads((entry / "facts.json").read_text(encoding="utf-8"))
    facts["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (entry / "facts.json").write_text(json.dumps(facts), encoding="utf-8")


@pytest.mark.parametrize("tamper", [_swap_two_ids, _edit_template], ids=["swapped_ids", "edited_template"])
def test_a_tampered_snapshot_is_discarded_with_a_warning_and_rebuilt_from_the_folder(
    cache: Path, tamper: Any, taken: Any
) -> None:
    from msgtrain.linearize.tokenizer import _load_hf

    folder = shared_path(MECHANISM)
    truth, entry = _stored(taken, folder, cache)  # transformers' tokenizer and its stored snapshot
    ids = truth.encode("hello world", add_special_tokens=False)
    assert [p for p in cache.iterdir() if not p.name.startswith(".")] == [entry]
    tamper(entry)
    with pytest.warns(MsgtrainWarning, match="changed after it was written"):
        rebuilt = _load_hf(str(folder), None)
    assert type(rebuilt).__name__ != "SnapshotTokenizer"  # taken from the folder again
    restored = _load_hf(str(folder), None)  # the rebuilt snapshot, without a warning
    assert type(restored).__name__ == "SnapshotTokenizer"
    assert restored.encode("hello world", add_special_tokens=False) == ids
    assert restored.chat_template == truth.chat_template


def test_a_snapshot_taken_for_another_folder_content_is_not_used(tmp_path: Path, cache: Path, taken: Any) -> None:
    from msgtrain.linearize import snapshot

    folder = tmp_path / "tok"
    shutil.copytree(shared_path(MECHANISM), folder)
    _, entry = _stored(taken, shared_path(MECHANISM), cache)  # the copy's content: the same key
    assert entry.name == snapshot.snapshot_key(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    key = snapshot.snapshot_key(folder)
    assert key is not None and key != entry.name
    shutil.copytree(entry, cache / key)  # the old content's snapshot under the new content's key
    with pytest.warns(MsgtrainWarning, match="another folder content"):
        assert snapshot.load(folder) is None


def test_a_folder_changed_while_transformers_loads_it_cannot_store_the_old_tokenizer_under_the_new_key(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from msgtrain.linearize import hf_load, tokenizer

    folder = tmp_path / "tok"
    shutil.copytree(shared_path(MECHANISM), folder)
    new_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    real = hf_load.auto_tokenizer

    def racing(source: str, **kwargs: Any) -> Any:
        hf = real(source, **kwargs)
        # Another process replaces the template right after transformers read the folder, before the key is made.
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["chat_template"] = new_template
        (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        return hf

    for module in (hf_load, tokenizer):  # whichever name the loading goes through
        monkeypatch.setattr(module, "auto_tokenizer", racing)
    tokenizer._load_hf(str(folder), None)
    for module in (hf_load, tokenizer):
        monkeypatch.setattr(module, "auto_tokenizer", real)
    assert tokenizer._load_hf(str(folder), None).chat_template == new_template
