"""transformers' chat-template module (``transformers.utils.chat_template_utils``: the sandboxed Jinja environment
``apply_chat_template`` compiles templates in, its filters and globals, and the data helpers it prepares messages
with), loaded without importing the transformers package.

Importing that module the usual way first runs ``transformers/__init__`` and ``transformers/utils/__init__`` (hub
clients, HTTP libraries, image and model utilities: about 0.8 s of CPU, most of a small conversion's start-up), for
two relative imports the module makes: ``logging`` (a logger) and ``import_utils`` (whether jinja2, torch and PIL are
installed). Here the module's own source file, as the installed transformers ships it, is executed under a private
package that answers those two imports: a standard-library logger, and availability checks that say jinja2 is there
and torch and PIL are not. torch and PIL are only ever asked about to describe Python functions passed as tools
(``get_json_schema``: a ``torch.Tensor`` parameter is "audio", a PIL image "image"); a log's tools are JSON
schemas already, so renderings are the same.

Invariants:
- The code that compiles and renders templates is transformers' file, unchanged; only its two relative imports are
  answered here. If executing it fails in any way (a transformers version whose module needs more), the real module
  is imported instead, and so it is when transformers' own package is already imported (a process that loaded a
  tokenizer through transformers uses the module transformers uses).
- ``tests/test_startup.py`` renders the same conversations with templates of several families through this module
  and through ``apply_chat_template`` and compares the text.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

REAL = "transformers.utils.chat_template_utils"
PACKAGE = "_msgtrain_transformers_chat"  # the private package the module is executed in (a sys.modules key only)

_loaded: types.ModuleType | None = None


def chat_template_utils() -> types.ModuleType:
    """transformers' chat-template module: the real one when transformers is imported, else its source executed
    without the package (see the module's docstring)."""
    global _loaded
    if "transformers" in sys.modules:
        return importlib.import_module(REAL)
    if _loaded is None:
        try:
            _loaded = standalone()
        except Exception:  # another layout or more imports than answered here: transformers' own way
            _loaded = importlib.import_module(REAL)
    return _loaded


def chat_template_helper(name: str) -> Any:
    """One function of transformers' chat-template module; ImportError when this transformers has none by that name
    (callers then render through ``apply_chat_template``)."""
    try:
        return getattr(chat_template_utils(), name)
    except (AttributeError, ImportError) as e:
        raise ImportError(f"transformers has no chat-template helper {name!r}") from e


def standalone() -> types.ModuleType:
    """The installed transformers' ``chat_template_utils.py`` executed under :data:`PACKAGE` (raises when
    transformers is not installed or the module cannot be executed there)."""
    found = importlib.util.find_spec("transformers")  # a top-level package's spec: nothing of it is executed
    if found is None or not found.submodule_search_locations:
        raise ImportError("transformers is not installed")
    source = Path(next(iter(found.submodule_search_locations))) / "utils" / "chat_template_utils.py"
    package = types.ModuleType(PACKAGE)
    package.__path__ = []  # a package of no files: its two modules are the ones below
    answers = types.ModuleType(f"{PACKAGE}.import_utils")
    answers.is_jinja_available = lambda: importlib.util.find_spec("jinja2") is not None  # type: ignore[attr-defined]
    answers.is_torch_available = lambda: False  # type: ignore[attr-defined]
    answers.is_vision_available = lambda: False  # type: ignore[attr-defined]
    log = types.ModuleType(f"{PACKAGE}.logging")
    log.get_logger = _OnceLogger  # type: ignore[attr-defined]
    package.import_utils = answers  # type: ignore[attr-defined]
    package.logging = log  # type: ignore[attr-defined]
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.chat_template_utils", source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source}")
    module = importlib.util.module_from_spec(spec)
    added = {PACKAGE: package, answers.__name__: answers, log.__name__: log, spec.name: module}
    sys.modules.update(added)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for name in added:
            sys.modules.pop(name, None)
        raise
    return module


class _OnceLogger(logging.LoggerAdapter):  # type: ignore[type-arg,unused-ignore]
    """transformers' logger surface the module uses: a standard logger with ``warning_once``."""

    def __init__(self, name: str | None = None):
        super().__init__(logging.getLogger(name or REAL), {})

    @functools.cache  # noqa: B019 (one logger per module, kept for the process)
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        self.warning(*args, **kwargs)
