"""pyarrow without pandas, in the processes msgtrain owns (``msgtrain convert``'s, a local worker's).

pyarrow looks for pandas the first time it converts anything: its pandas shim imports pandas when ``pa.array``,
``pa.table`` or ``pa.scalar`` asks whether a value is a pandas object, and its C++ layer imports it the first time it
converts to numpy (``Array.to_numpy``) or infers a type, for pandas' null sentinels. Every one of those calls does,
typed or not, from numpy or from Python lists (pyarrow 26). msgtrain never hands pyarrow a pandas object, and
importing pandas is about a fifth of a one-record convert's start-up. :func:`skip_pandas` lets pyarrow's first look
find no pandas, so nothing imports it.

Invariants:
- Only where no user code shares the process: the convert command with the local engine, and its worker processes.
  Library calls (``msgtrain.convert`` from Python) never call it, so pyarrow keeps its pandas integration there.
- What stays off in such a process is pyarrow recognising pandas objects where it accepts any sequence (a pandas
  Series given to ``pa.array`` converts as a plain sequence; ``pd.NaT`` is not a null): msgtrain builds arrays from
  numpy and Python values only. What asks pyarrow for pandas itself (``to_pandas``, ``Table.from_pandas``) still
  imports pandas and works.
- Harmless where it cannot help: nothing is done when pandas is already imported, and pyarrow internals that differ
  (the shim is private) leave pyarrow as it was (:func:`skip_pandas` returns False).
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _NoPandas(MetaPathFinder):
    """Refuses ``import pandas`` while installed."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def skip_pandas() -> bool:
    """Let pyarrow's first look for pandas (its shim's, its C++ layer's) find none, in this process; True when that
    was done (see the module docstring for where this may be called)."""
    if "pandas" in sys.modules:
        return False
    import pyarrow as pa

    refuse = _NoPandas()
    sys.meta_path.insert(0, refuse)
    try:
        shim = getattr(pa.lib, "_pandas_api", None)
        if shim is None:
            return False
        bool(shim.have_pandas)  # the shim remembers that it tried and found none
        pa.array([0], type=pa.int32()).to_numpy()  # so does the C++ layer's pandas lookup
    except Exception:  # a pyarrow whose internals differ: it stays as it was
        return False
    finally:
        sys.meta_path.remove(refuse)
    return "pandas" not in sys.modules
