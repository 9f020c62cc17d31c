"""The one table of input formats. Adding a format = one new module + one line here.

Order matters for detection: more specific detectors come first; generic ones (plain OpenAI message lists) last.
"""

from __future__ import annotations

from msgtrain.ingest import calls, native
from msgtrain.ingest.base import REGISTRY, Reader, register

_READERS: list[Reader] = [
    native.READER,
    calls.READER,
]

if not REGISTRY:
    for _reader in _READERS:
        register(_reader)
