"""The run stage keeps its shape (issue #28): ``run/pipeline.py`` stays a conductor of four steps, no function in
``run/`` grows past what one reads at once, and only the executor implementations know which engine runs the work
and only the storage implementations ask where a location is.

Read from the source with ``ast``, so the rules hold for code that is never run in the suite too:

- an *engine branch* is any read of a config's ``engine`` (``cfg.engine``), an import of Ray or of
  ``msgtrain.run.ray_engine``, or an ``isinstance`` test against an executor class: outside ``execute.py`` and
  ``ray_engine.py`` a step calls the :class:`~msgtrain.run.execute.Executor` protocol instead;
- a *location branch* is a call of ``is_remote`` / ``protocol`` (storage's URL test) or a test of a string for a
  URL scheme (``x.startswith("s3://")``, ``"://" in x``): outside the executors (which make paths mean the same
  on every node) and ``storage.py`` / ``outputs.py`` a step calls the storage interface or the
  :class:`~msgtrain.run.outputs.Output` protocol instead. A function that picks local or store by the type of a
  ``Path | str`` parameter (a local location is a Path, a store location a URL string) branches on the location
  too: there is none (parts are written, reused and read through :class:`~msgtrain.run.part_store.PartsStore`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "msgtrain" / "run"
PIPELINE_MAX_LINES = 299  # "under 300"
FUNCTION_MAX_LINES = 80
EXECUTORS = frozenset({"execute.py", "ray_engine.py"})
STORAGE = frozenset({"storage.py", "outputs.py"})
EXECUTOR_CLASSES = frozenset({"LocalPool", "RayTasks"})
LOCATION_TESTS = frozenset({"is_remote", "protocol"})


def _modules() -> list[Path]:
    return sorted(RUN.glob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def long_functions(tree: ast.Module) -> list[str]:
    """Every function (nested ones on their own, and inside their parent) longer than the limit, with its length:
    ``end_lineno - lineno + 1``, decorators not counted."""
    return [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
    ]


def engine_branches(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "engine":
            found.append(f"line {node.lineno}: reads .engine")
        elif isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: imports {a.name}"
                for a in node.names
                if a.name == "ray" or a.name.startswith(("ray.", "msgtrain.run.ray_engine"))
            ]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            module = node.module
            if module == "ray" or module.startswith(("ray.", "msgtrain.run.ray_engine")):
                found.append(f"line {node.lineno}: imports from {module}")
            elif module == "msgtrain.run" and any(a.name == "ray_engine" for a in node.names):
                found.append(f"line {node.lineno}: imports msgtrain.run.ray_engine")
        elif isinstance(node, ast.Call) and _name(node.func) == "isinstance" and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(_name(c) in EXECUTOR_CLASSES for c in classes):
                found.append(f"line {node.lineno}: isinstance of an executor")
    return found


def _is_scheme(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "://" in node.value


def location_branches(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in LOCATION_TESTS:
            found.append(f"line {node.lineno}: calls {_name(node.func)}()")
        elif isinstance(node, ast.Call) and _name(node.func) in ("startswith", "endswith", "match"):
            args = [*node.args, *(a for arg in node.args if isinstance(arg, ast.Tuple) for a in arg.elts)]
            if any(_is_scheme(a) for a in args):
                found.append(f"line {node.lineno}: tests a string for a URL scheme")
        elif isinstance(node, ast.Compare) and any(_is_scheme(c) for c in [node.left, *node.comparators]):
            found.append(f"line {node.lineno}: compares with a URL scheme")
    return found


def _union_names(annotation: ast.expr | None) -> set[str | None]:
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_names(annotation.left) | _union_names(annotation.right)
    return {_name(annotation)} if annotation is not None else set()


def _is_location_union(annotation: ast.expr | None) -> bool:
    return {"Path", "str"} <= _union_names(annotation)


def type_dispatches(tree: ast.Module) -> set[str]:
    """Functions that test the type (``str`` or ``Path``) of one of their ``Path | str`` parameters."""
    found = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs] if _is_location_union(a.annotation)}
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and _name(node.func) == "isinstance"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in params
                and _name(node.args[1]) in ("str", "Path")
            ):
                found.add(fn.name)
    return found


def test_pipeline_py_stays_under_300_lines() -> None:
    lines = len((RUN / "pipeline.py").read_text(encoding="utf-8").splitlines())
    assert lines <= PIPELINE_MAX_LINES, f"run/pipeline.py has {lines} lines: put the logic in its step's module"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_no_function_in_the_run_stage_is_longer_than_80_lines(path: Path) -> None:
    assert long_functions(_tree(path)) == [], f"split these functions of run/{path.name}"


@pytest.mark.parametrize("path", [p for p in _modules() if p.name not in EXECUTORS], ids=lambda p: p.name)
def test_only_the_executors_branch_on_the_engine(path: Path) -> None:
    assert engine_branches(_tree(path)) == [], f"run/{path.name}: call the Executor protocol (run/execute.py)"


@pytest.mark.parametrize("path", [p for p in _modules() if p.name not in EXECUTORS | STORAGE], ids=lambda p: p.name)
def test_only_the_storage_implementations_branch_on_where_a_location_is(path: Path) -> None:
    assert location_branches(_tree(path)) == [], (
        f"run/{path.name}: go through run/storage.py or the Output protocol (run/outputs.py)"
    )


@pytest.mark.parametrize("path", [p for p in _modules() if p.name not in EXECUTORS | STORAGE], ids=lambda p: p.name)
def test_no_new_function_picks_the_disk_or_a_store_by_the_type_of_its_location(path: Path) -> None:
    assert type_dispatches(_tree(path)) == set(), (
        f"run/{path.name}: choose between the disk and a store once, where the location is resolved (an Output, a"
        " PartsStore), and call its methods"
    )


def test_the_type_dispatch_rule_sees_a_location_parameter_tested_for_its_type() -> None:
    source = (
        "def f(parts: Path | str | None, n: int | str) -> None:\n    if isinstance(parts, str) or isinstance(n, str):\n"
    )
    assert type_dispatches(ast.parse(source + "        pass\n")) == {"f"}
    assert type_dispatches(ast.parse("def g(n: int | str) -> None:\n    isinstance(n, str)\n")) == set()


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("def f(cfg):\n    if cfg.engine == 'ray':\n        pass\n", engine_branches),
        ("from msgtrain.run.ray_engine import run_task_ray\n", engine_branches),
        ("def f():\n    from msgtrain.run import ray_engine\n", engine_branches),
        ("import ray\n", engine_branches),
        ("def f(e):\n    return isinstance(e, (LocalPool, RayTasks))\n", engine_branches),
        ("def f(out):\n    return 1 if is_remote(str(out)) else 2\n", location_branches),
        ("def f(out):\n    return storage.protocol(out)\n", location_branches),
        ("def f(out):\n    return out.startswith(('s3://', 'gs://'))\n", location_branches),
        ("def f(out):\n    return '://' in out\n", location_branches),
    ],
)
def test_the_rules_see_the_branches_they_forbid(source: str, rule: object) -> None:
    assert callable(rule)
    assert rule(ast.parse(source)), f"{rule.__name__} missed: {source!r}"


def test_the_function_length_rule_counts_nested_functions_on_their_own_and_in_their_parent() -> None:
    inner = "    def inner():\n" + "        x = 1\n" * FUNCTION_MAX_LINES
    found = long_functions(ast.parse("def outer():\n" + inner))
    assert [f.split(" ")[0] for f in found] == ["outer", "inner"]


# ------------------------------------------------------------------------------- readers reach siblings via storage
INGEST = RUN.parent / "ingest"
# Modules that may list a folder: the storage interface itself, input discovery (it walks the input roots the run
# was given), and a folder log's reader (its input *is* the folder, copied whole from a store).
MAY_LIST = frozenset({"files.py", "registry.py", "openhands_v1.py", "strands.py", "opencode.py", "cline_task.py"})
LISTING_CALLS = frozenset({"iterdir", "listdir", "scandir", "walk", "glob", "rglob", "is_file", "exists"})


def folder_reads(tree: ast.Module) -> set[str]:
    """What a module does to reach files beside its input without the storage interface: list a folder
    (``iterdir``, ``glob``, ``os.listdir`` / ``scandir`` / ``walk``) or probe the disk for a file (``is_file``,
    ``exists``). Computing a sibling's *location* (``location.parent / name``) is fine: opening it goes through
    the interface."""
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LISTING_CALLS
    }


@pytest.mark.parametrize("path", sorted(INGEST.rglob("*.py")), ids=lambda p: p.relative_to(INGEST).as_posix())
def test_readers_reach_files_beside_their_input_only_through_the_storage_interface(path: Path) -> None:
    if path.name in MAY_LIST:
        return
    assert not folder_reads(_tree(path)), (
        f"ingest/{path.relative_to(INGEST).as_posix()} lists a folder or opens a file beside its input"
        " on the local disk: an object-store run"
        " cannot see it, so its rows differ from a local run's. Use msgtrain.ingest.core.files.input_files()"
        " (listing, head, open_sibling, sibling_copy, kept_copy) and declare the files with partners(location, beside)"
    )


def consults_other_files(tree: ast.Module) -> bool:
    """Whether a module reaches files beside its input (calls ``input_files()``)."""
    return any(isinstance(node, ast.Call) and _name(node.func) == "input_files" for node in ast.walk(tree))


def declares_partners(tree: ast.Module) -> bool:
    """Whether a class of the module has a ``partners`` method (the reader protocol's declaration)."""
    return any(
        isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.FunctionDef) and f.name == "partners" for f in node.body)
        for node in ast.walk(tree)
    )


@pytest.mark.parametrize("path", sorted(INGEST.rglob("*.py")), ids=lambda p: p.relative_to(INGEST).as_posix())
def test_a_reader_that_consults_another_file_declares_its_partners(path: Path) -> None:
    """The reader protocol's rule (msgtrain.ingest.core.events.Reader): whatever a reader joins its input with is in the
    part's key, or --resume would reuse a part built from the old partner."""
    tree = _tree(path)
    if path.name == "files.py" or not consults_other_files(tree):
        return
    assert declares_partners(tree), (
        f"ingest/{path.relative_to(INGEST).as_posix()} reads files beside its input (input_files()) but its reader"
        " declares none: add"
        " partners(location, beside) returning them, so that changing one converts again the parts that used it"
    )


def test_the_partners_rule_sees_a_reader_that_consults_a_file_without_declaring_it() -> None:
    undeclared = ast.parse("class R:\n    def read(self, path):\n        input_files().open_sibling(path, x)\n")
    assert consults_other_files(undeclared) and not declares_partners(undeclared)
    declared = ast.parse("class R:\n    def partners(self, location, beside):\n        return []\n")
    assert declares_partners(declared)


def test_the_sibling_rule_sees_a_listing_and_a_path_beside_the_input() -> None:
    assert folder_reads(ast.parse("for p in path.parent.iterdir():\n    pass\n")) == {"iterdir"}
    assert folder_reads(ast.parse("q = path.parent / 'question.jsonl'\nq.is_file()\n")) == {"is_file"}
    assert folder_reads(ast.parse("q = location.parent / 'question.jsonl'\n")) == set()
