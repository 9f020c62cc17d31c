"""Shared test fixtures: the ../shared materials (skipped with a reason where absent) and tokenizers."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

# Every rendering that replays loop iterations of an earlier one is also rendered in full and compared
# (msgtrain.linearize.render.VERIFY_REPLAY): the whole suite doubles as an oracle for replay. Set before msgtrain is
# imported; subprocesses inherit it.
os.environ.setdefault("MSGTRAIN_VERIFY_REPLAY", "1")
# Tokenizer snapshots (msgtrain.linearize.snapshot) go to a directory of this session, not the user's cache;
# subprocesses inherit it, so CLI tests restore the snapshots the suite's own loads stored.
if "MSGTRAIN_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["MSGTRAIN_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="msgtrain-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, True)
# `datasets` caches what load_dataset reads (and its locks) under ~/.cache: tests that load a dataset as a user does
# (the README's code) write there instead. Read by datasets when it is imported, so set before any test imports it.
if "HF_DATASETS_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["HF_DATASETS_CACHE"] = _DATASETS_CACHE = tempfile.mkdtemp(prefix="msgtrain-test-hf-datasets-")
    atexit.register(shutil.rmtree, _DATASETS_CACHE, True)

# Where bytecode writing is off (PYTHONDONTWRITEBYTECODE, as container images set it), every test worker would compile
# msgtrain and rewrite the test modules' asserts again (about 5 s of each worker's collection) and every msgtrain
# process a test starts would compile what it imports: the suite writes the checkout's bytecode (to its __pycache__
# folders, which git ignores; installed packages have theirs). Set before the workers and subprocesses start, which
# inherit it.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    import sys

    sys.dont_write_bytecode = False

import pytest

from tests.gguf_vocab import GGUF_FAMILIES, record_added_tokens, require_family_folder
from tests.template_families import FAMILIES, GLM, KIMI_K2

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SAMPLE_LOGS = ROOT / "sample_logs"
# pytest's wall time and each worker's peak memory, printed at the end of every run (tests/suite_stats.py)
pytest_plugins = ["tests.suite_stats"]


def _sigint_state() -> tuple[object, frozenset[int]]:
    import signal

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set()) if hasattr(signal, "pthread_sigmask") else set()
    return signal.getsignal(signal.SIGINT), frozenset(int(s) for s in mask)


def as_a_terminal_job() -> None:
    """``preexec_fn`` for a process a test interrupts as a terminal would: SIGINT handled by default and not blocked,
    whatever the test runner's process inherited (a job started in the background of a shell ignores SIGINT)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.fixture(autouse=True)
def _sigint_as_it_was() -> Any:
    """Every test leaves SIGINT's handler and this thread's signal mask as it found them. Processes the suite starts
    inherit both (an ignored or blocked SIGINT survives exec), so a test that leaked them would make a later Ctrl-C
    test's msgtrain ignore the interrupt and finish with exit 0. A leak is undone and reported as a warning naming
    the test, never left to the next one."""
    import signal
    import warnings

    before = _sigint_state()
    yield
    after = _sigint_state()
    if after != before:
        signal.signal(signal.SIGINT, before[0])  # type: ignore[arg-type]
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_SETMASK, before[1])
        current = os.environ.get("PYTEST_CURRENT_TEST", "a test")
        warnings.warn(f"{current} left SIGINT changed ({before} -> {after}); restored", stacklevel=1)


# `.ci/run` sets MSGTRAIN_TEST_SHARED_USERS to a file: the tests that reach into ../shared are listed there (node
# ids) so that they alone run again in a copy of the checkout with nothing beside it (MSGTRAIN_TEST_ONLY names the
# list there), cheaply showing that a bare clone skips them rather than failing. A test reaches the materials through
# `shared_path` / `shared_folders` or by opening or listing anything below SHARED (an audit hook sees those).
_SHARED_USERS_FILE = os.environ.get("MSGTRAIN_TEST_SHARED_USERS")
_shared_users: set[str] = set()
SHARED_ABSENT = "shared-absent"  # the id of the parameter shared_folders gives where ../shared is absent


def _note_shared_use() -> None:
    current = os.environ.get("PYTEST_CURRENT_TEST")  # "tests/x.py::test_y[param] (call)", set while a test runs
    if _SHARED_USERS_FILE and current:
        _shared_users.add(current.rsplit(" ", 1)[0])


if _SHARED_USERS_FILE:
    import sys

    _SHARED_PREFIXES = tuple({str(SHARED) + os.sep, str(SHARED.resolve()) + os.sep})

    def _audit(event: str, args: tuple[Any, ...]) -> None:
        if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str | os.PathLike):
            path = os.fspath(args[0])
            if isinstance(path, str) and path.startswith(_SHARED_PREFIXES):
                _note_shared_use()

    sys.addaudithook(_audit)


def _one_tokenizer_after_another(items: list[pytest.Item]) -> None:
    """In a test module that names its tokenizer parameter (``TOKENIZER_PARAM = "template"``), the tests of one
    tokenizer run one after another, in the order they were written, whichever test function they belong to: only the
    few tokenizers used last stay loaded (msgtrain.linearize.loading.KEPT), so interleaved they would be loaded again
    for every test function and seed."""
    first: dict[tuple[str, object], int] = {}
    keys = []
    for index, item in enumerate(items):
        name = getattr(getattr(item, "module", None), "TOKENIZER_PARAM", None)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if name is None or name not in params:
            keys.append(index)
            continue
        group = (str(item.path), params[name])
        keys.append(first.setdefault(group, index))
    order = sorted(range(len(items)), key=lambda i: (keys[i], i))
    items[:] = [items[i] for i in order]


# The test files that cost the most CPU (seconds, measured one file at a time with ../shared present), run first:
# under `pytest -n N --dist loadfile` (make test; pytest_xdist_make_scheduler below keeps this order) a worker takes
# the next file when it is nearly done with its last, so with the longest files first the run ends on short ones and
# the workers finish together (xdist's default order, by number of tests, left a 40 s file for the end). Only the
# order changes, never an outcome; a file not listed runs after these, in its usual order.
HEAVIEST_FILES = {
    # seconds of an idle run (2026-12-07, 2 cores); the test files that share the session's Ray cluster are one unit
    # of work (RAY_CLUSTER_FILES): about 65 s
    "test_object_store.py": 65,
    "test_cluster_recipe.py": 65,
    "test_ray_engine.py": 65,
    "test_export_tree.py": 45,
    "test_tools_audit.py": 37,
    "test_store_identity.py": 24,
    "test_linearize_oracle.py": 21,
    "test_linearize_shortcuts.py": 21,
    "test_tokenizer_snapshot.py": 19,
    "test_validate_parity.py": 16,
    "test_tools_targets.py": 13,
    "test_linearize_oracle_gguf.py": 13,
    "test_startup.py": 13,
    "test_configs.py": 12,
    "test_mistral.py": 11,
    "test_shipped_mappings.py": 10,
    "test_scaling.py": 10,
    "test_nightly_safety.py": 10,
    "test_stop_signals.py": 9,
    "test_linearize_oracle_families.py": 8,
    "test_torn_reads.py": 8,
    "test_export.py": 8,
}
# The test files that use the session's Ray cluster (the ``ray_cluster`` fixture, below): under --dist loadfile they
# are one unit of work, run by one worker, so the session starts one cluster (about 10 s and processes of its own on
# a small machine), not one on each worker. tests/test_suite_schedule.py checks the list against the fixture's users.
RAY_CLUSTER_FILES = frozenset({"test_object_store.py", "test_cluster_recipe.py", "test_ray_engine.py"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the files of RAY_CLUSTER_FILES as one unit, in the order of the collection (the
    costliest files first, HEAVIEST_FILES); any other mode as xdist makes it."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # xdist (from 3.8, --no-loadscope-reorder) would otherwise order the files by their number of tests
    config.option.loadscopereorder = False

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = str(super()._split_scope(nodeid))
            return "the Ray cluster's test files" if Path(scope).name in RAY_CLUSTER_FILES else scope

    return RayFilesTogether(config, log)


def _heaviest_files_first(items: list[pytest.Item]) -> None:
    """Items of the files in HEAVIEST_FILES first, the costliest first; each file's items keep their order."""
    items.sort(key=lambda item: -HEAVIEST_FILES.get(item.path.name, 0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests grouped by tokenizer where a module asks for it, the costliest files first; with MSGTRAIN_TEST_ONLY: run
    only the listed tests, and the placeholder of a listed parametrization over ../shared's folders (whose real
    parameters do not exist without them); the rest is deselected."""
    _one_tokenizer_after_another(items)
    _heaviest_files_first(items)
    only = os.environ.get("MSGTRAIN_TEST_ONLY")
    if not only:
        return
    listed = set(Path(only).read_text(encoding="utf-8").split())
    functions = {test.split("[", 1)[0] for test in listed}
    keep = [
        item
        for item in items
        if item.nodeid in listed or (SHARED_ABSENT in item.nodeid and item.nodeid.split("[", 1)[0] in functions)
    ]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _SHARED_USERS_FILE:
        return
    # Under pytest-xdist each worker lists its own tests beside the file; the controller, which finishes after
    # every worker, merges them into the one list `.ci/run` reads.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    target = Path(f"{_SHARED_USERS_FILE}.{worker}" if worker else _SHARED_USERS_FILE)
    users = set(_shared_users)
    if not worker:
        for part in Path(_SHARED_USERS_FILE).parent.glob(Path(_SHARED_USERS_FILE).name + ".gw*"):
            users.update(part.read_text(encoding="utf-8").split())
            part.unlink()
    target.write_text("".join(f"{test}\n" for test in sorted(users)), encoding="utf-8")


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a reason when the materials are not present."""
    _note_shared_use()
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(
            f"../shared/{'/'.join(parts)} not present (it ships beside the checkout in CI, not with the package)"
        )
    return p


def shared_folders(*parts: str) -> list[Any]:
    """The names of the folders under ../shared/<parts>, to parametrize a test over (new folders included).

    Called at collection, so it never skips: where the materials are absent it gives one parameter that skips when
    the test runs, with the reason, so a bare clone collects cleanly and reports the skip."""
    p = SHARED.joinpath(*parts)
    if p.is_dir():
        return sorted(child.name for child in p.iterdir() if child.is_dir())
    reason = f"../shared/{'/'.join(parts)} not present (it ships beside the checkout in CI, not with the package)"
    return [pytest.param("absent", marks=pytest.mark.skip(reason=reason), id=SHARED_ABSENT)]


# name -> (tokenizer folder, chat template override or None). SmolLM3 and the DeepSeek-R1-Distill-Qwen template ship
# without a vocabulary here: they are paired with qwen3's (SmolLM3's template writes <|im_start|>/<|im_end|>/<think>,
# which that vocabulary has; DeepSeek's full-width tokens it lacks are added, see ADDED_TOKENS).
TEMPLATES = {
    "qwen3": ("tokenizers/qwen3", None),
    "qwen2.5": ("tokenizers/qwen3", "tokenizers/qwen2.5-instruct/tokenizer_config.json"),
    "phi3": ("tokenizers/phi-3-mini-instruct", None),
    "gpt-oss": ("tokenizers/gpt-oss", None),
    "smollm3": ("tokenizers/qwen3", "tokenizers/smollm3/chat_template.jinja"),
    "deepseek-r1-distill": ("tokenizers/qwen3", "tokenizers/deepseek-r1-distill-qwen-32b/tokenizer_config.json"),
}

# Special tokens a template writes that its paired vocabulary lacks: added as special added tokens (bos/eos first).
ADDED_TOKENS = {
    "deepseek-r1-distill": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "additional": [
            "<｜User｜>",
            "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁outputs▁begin｜>",
            "<｜tool▁outputs▁end｜>",
            "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>",
        ],
    }
}
# The bundles of TEMPLATES, built once per test process and kept for the session. msgtrain keeps only the few
# tokenizers used last (msgtrain.linearize.loading.KEPT), and a test worker runs many files that each use several of
# these: each file loaded them again (the snapshot restored and the bundle built, and transformers' own tokenizer,
# which the oracles render with, loaded anew: about a second for qwen3's or gpt-oss's vocabulary each time). Bundles
# are immutable once built (msgtrain.linearize.loading), so the tests share one as they share msgtrain's cached one;
# the six hold about 200 MB of a worker.
_BUILT: dict[str, object] = {}

FIXTURE_TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
# Template families written for the tests in the shape of real ones (each file names the template it follows), over
# qwen3's vocabulary with the template's control tokens added as special tokens:
# name -> (template file, added tokens, bos, eos, generation_config.json's eos_token_id as tokens or None).
SHAPED = {
    "rerender-tooluse": (
        "rerender_tooluse.jinja",
        ["<|START_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>"],
        "<BOS_TOKEN>",
        "<|END_OF_TURN_TOKEN|>",
        None,
    ),
    "calls-only": ("calls_only.jinja", [], None, None, None),
    "role-headers": (
        "role_headers.jinja",
        ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"],
        None,
        "<|endoftext|>",
        ["<|endoftext|>", "<|user|>", "<|observation|>"],
    ),
    "drops-calls": (
        "drops_calls.jinja",
        ["<|start_of_role|>", "<|end_of_role|>"],
        None,
        "<|end_of_text|>",
        None,
    ),
    "moves-context": ("moves_context.jinja", ["<|user|>", "<|end|>", "<|tool|>"], None, "<|eot|>", None),
    "prefill-turns": (
        "prefill_turns.jinja",
        ["<|turn>", "<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>"],
        "<bos>",
        "<turn|>",
        ["<turn|>", "<|tool_response>"],
    ),
}

# Real template families: llama.cpp's copies of the models' own chat templates (tests/assets.py: models/templates/
# in the llama-cpp-python source distribution), over qwen3's vocabulary with each template's control tokens added as
# special tokens. name -> (llama.cpp template file, added tokens, bos, eos, generation_config.json's eos_token_id as
# tokens or None). Most have no generation_config, as a folder rebuilt from a GGUF vocabulary has none: their stop
# tokens must be found from the template.
REAL = {
    "command-r-plus-tooluse": (
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        ["<|START_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>"],
        "<BOS_TOKEN>",
        "<|END_OF_TURN_TOKEN|>",
        None,
    ),
    "gemma-4": (
        "google-gemma-4-31B-it.jinja",
        [
            "<|turn>",
            "<turn|>",
            "<|channel>",
            "<channel|>",
            "<|tool_call>",
            "<tool_call|>",
            "<|tool_response>",
            "<tool_response|>",
            "<|tool>",
            "<tool|>",
            '<|"|>',
            "<|think|>",
            "<|image|>",
            "<|audio|>",
            "<|video|>",
        ],
        "<bos>",
        "<eos>",
        None,
    ),
    "hermes-3-tooluse": (
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        [],
        "<|begin_of_text|>",
        "<|im_end|>",
        None,
    ),
    "glm-4.6": (
        "GLM-4.6.jinja",
        list(GLM),
        None,
        "<|endoftext|>",
        ["<|endoftext|>", "<|user|>", "<|observation|>"],
    ),
    "granite-3.3": (
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>", "<|start_of_cite|>", "<|end_of_cite|>"],
        "<|end_of_text|>",
        "<|end_of_text|>",
        None,
    ),
    "mistral-nemo": (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        [
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        "<s>",
        "</s>",
        None,
    ),
    "llama-3.1": (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|end_of_text|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
        ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
    ),
    "llama-3.2": (
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
        "<|begin_of_text|>",
        "<|eot_id|>",
        None,
    ),
    "qwen3-coder": ("Qwen3-Coder.jinja", [], None, "<|im_end|>", None),
    "deepseek-v3.1": (
        "deepseek-ai-DeepSeek-V3.1.jinja",
        [
            "<｜User｜>",
            "<｜Assistant｜>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁output▁begin｜>",
            "<｜tool▁output▁end｜>",
        ],
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        None,
    ),
    "kimi-k2": ("moonshotai-Kimi-K2.jinja", list(KIMI_K2), None, "<|im_end|>", None),
}


def _shaped_spec(name: str) -> tuple[str, list[str], str | None, str | None, list[str] | None]:
    """(chat template text, added tokens, bos, eos, generation_config.json's eos_token_id as tokens) of a SHAPED or
    REAL family or of one in tests/template_families.py."""
    if name in SHAPED:
        template, added, bos, eos, gen_eos = SHAPED[name]
        return (FIXTURE_TEMPLATES / template).read_text(encoding="utf-8"), list(added), bos, eos, gen_eos
    from tests.assets import require_template

    if name in FAMILIES:
        fam = FAMILIES[name]
        template, added, bos, eos = f"{fam.template}.jinja", list(fam.added), fam.bos, fam.eos
        gen_eos = list(fam.stop) or None
    else:
        template, added, bos, eos, gen_eos = REAL[name]
    return require_template(template), list(added), bos, eos, gen_eos


# How shaped_tokenizer_folder writes a folder, part of its key: 2 records the added tokens in tokenizer_config.json.
_SHAPED_FORM = 2


@functools.lru_cache(maxsize=64)
def _digest_of(path: Path, size: int, mtime_ns: int) -> str:
    import hashlib

    return hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()


def _content_digest(path: Path) -> str:
    """The digest of a file's bytes, read once per process while its size and modification time stay: the folders
    made from ../shared's files are keyed by their content, so a copy of the same files (a fresh checkout of the
    materials) finds them made."""
    st = path.stat()
    return _digest_of(path, st.st_size, st.st_mtime_ns)


def shaped_tokenizer_folder(name: str) -> Path:
    """A tokenizer folder (tokenizer files, the template, generation_config.json) for a SHAPED or REAL family, made
    once beside the test assets (tests/assets.py) and kept there, keyed by everything it is made from (the template,
    the tokens, qwen3's files, the library versions): both test workers and later sessions find it made. Skipped
    when ../shared's qwen3 vocabulary is absent."""
    import hashlib
    import json

    from msgtrain.cache import version
    from tests.assets import asset_dir

    base = shared_path("tokenizers", "qwen3")
    text, added, bos, eos, gen_eos = _shaped_spec(name)
    vocabulary = [(p.name, _content_digest(p)) for p in sorted(base.iterdir()) if p.is_file()]
    made_of = [text, added, bos, eos, gen_eos, vocabulary, version("transformers"), version("tokenizers"), _SHAPED_FORM]
    key = hashlib.sha256(json.dumps(made_of).encode()).hexdigest()[:12]
    folder = asset_dir() / "shaped-tokenizers" / f"{name}-{key}"
    if folder.is_dir():
        return folder
    import shutil
    import tempfile

    from tokenizers import AddedToken

    from msgtrain.linearize.tokenizer import auto_tokenizer

    hf = auto_tokenizer(str(base))
    vocab = hf.get_vocab()  # a dict of 150k entries: built once, not per token
    new = [t for t in [*added, *(x for x in (bos, eos) if x)] if t not in vocab]
    hf.add_tokens([AddedToken(t, special=True, normalized=False) for t in new], special_tokens=True)
    hf.add_special_tokens({k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v})
    hf.chat_template = text
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        hf.save_pretrained(str(tmp))
        record_added_tokens(tmp)
        if gen_eos:
            ids = [hf.convert_tokens_to_ids(t) for t in gen_eos]
            (tmp / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}), encoding="utf-8")
        try:
            tmp.rename(folder)  # made by another worker meanwhile: theirs is the same
        except OSError:
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _without_snapshot(folder: Path) -> Any:
    """The bundle of a tokenizer folder the tests made, loaded through transformers without taking a snapshot of it
    (msgtrain.linearize.snapshot): no process the tests start restores one, and the tests that load these folders
    check against transformers' own tokenizer (the oracle renders with apply_chat_template), which a restored
    snapshot would load again; taking one costs about a second of a 150k vocabulary, for each of some forty folders.
    Snapshots are checked on ../shared's vocabularies (tests/test_tokenizer_snapshot.py), which the CLI tests
    restore."""
    from msgtrain.linearize import load_tokenizer

    saved = os.environ.get("MSGTRAIN_CACHE")
    os.environ["MSGTRAIN_CACHE"] = "0"
    try:
        return load_tokenizer(str(folder))
    finally:
        if saved is None:
            del os.environ["MSGTRAIN_CACHE"]
        else:
            os.environ["MSGTRAIN_CACHE"] = saved


def load_named_tokenizer(name: str):  # type: ignore[no-untyped-def]
    from msgtrain.linearize import load_tokenizer

    if name == "demo":
        return load_tokenizer(None)
    if name in SHAPED or name in REAL or name in FAMILIES:
        return _without_snapshot(shaped_tokenizer_folder(name))
    if name in GGUF_FAMILIES:
        return _without_snapshot(require_family_folder(name))
    folder, template = TEMPLATES[name]
    # shared_path on every call, not only the first: it skips where ../shared is absent and lists the calling test
    # among the users of ../shared (MSGTRAIN_TEST_SHARED_USERS), whichever test built the bundle
    folder_path, template_path = shared_path(folder), shared_path(template) if template else None
    if name not in ADDED_TOKENS:
        if name not in _BUILT:
            _BUILT[name] = load_tokenizer(str(folder_path), str(template_path) if template_path else None)
        return _BUILT[name]
    if name not in _BUILT:
        import json

        from tokenizers import AddedToken

        from msgtrain.linearize.tokenizer import TokenizerBundle, auto_tokenizer

        hf = auto_tokenizer(str(folder_path))
        extra = ADDED_TOKENS[name]
        hf.add_tokens([AddedToken(t, special=True, normalized=False) for t in extra["additional"]], special_tokens=True)
        hf.add_special_tokens({"bos_token": extra["bos_token"], "eos_token": extra["eos_token"]})
        assert template_path is not None
        hf.chat_template = json.loads(template_path.read_text(encoding="utf-8"))["chat_template"]
        _BUILT[name] = TokenizerBundle(hf, f"{folder}+{name}")
    return _BUILT[name]


def tiny_llama(vocab_size: int, max_positions: int = 256) -> Any:
    """A randomly initialised one-layer Llama small enough for a CPU training step in a test."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(config)


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
