"""How a conversion process allocates large buffers: returned to the system when freed, so that memory follows the
largest record and what is live, not the largest heap a run ever had.

Two allocators hold freed memory by default, and a huge record (docs/performance.md, Memory) makes that memory the
peak of the next stage:

- **glibc's malloc** (numpy arrays, Python's large strings and bytes, the tokenizer's Rust buffers) serves a request
  of 128 KiB or more with its own ``mmap``, returned on ``free``, but it raises that threshold to the size of every
  such block freed (up to 32 MiB): after the first large array is freed, later ones come from the heap, which
  freed blocks fragment and which is rarely given back. :func:`tune_allocators` fixes the threshold
  (``mallopt(M_MMAP_THRESHOLD)``, which also turns the raising off), so arrays of :data:`MMAP_THRESHOLD` or more
  are always their own mappings.
- **Arrow's default pool** (mimalloc) keeps the segments of freed buffers, and touches more of a growing buffer
  than the system allocator, whose ``realloc`` of a mapping moves pages (``mremap``) without copying them. Arrow
  reads its choice from ``ARROW_DEFAULT_MEMORY_POOL`` once, when pyarrow loads; the Parquet writer allocates from
  that C++ default whatever ``pyarrow.set_memory_pool`` says, so only the variable reaches it.

Measured (``benchmarks/memory.py``'s 10 MB record, demo tokenizer; ``../shared/real_logs`` with Qwen3): peak RSS
497 → 344 MiB and 0.99 → 0.68 GB, the same output bytes, no more CPU time. Neither setting changes what is computed or
written. They are process-wide, so they are made by the command line and in worker processes (the environment
variable is inherited by the workers it spawns), never on import: a library caller keeps its own allocators, and a
user's ``ARROW_DEFAULT_MEMORY_POOL`` wins.
"""

from __future__ import annotations

import contextlib
import os
import sys

MMAP_THRESHOLD = 1 << 20  # bytes: a block this large or larger is mapped alone and unmapped when freed
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def tune_allocators() -> None:
    """Fix glibc's mmap threshold in this process, and choose Arrow's system pool for a pyarrow not yet loaded in
    it and for the processes it starts (unless the environment names a pool). Elsewhere than glibc the threshold
    is left alone."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def give_back_free_memory() -> None:
    """Return the free pages inside glibc's heap to the system (``malloc_trim(0)``), between a run's stages: what a
    stage freed in blocks under :data:`MMAP_THRESHOLD` (a huge record's pieces, its Python objects) stays resident
    in the heap's holes, which the next stage's large arrays, mapped apart, never reuse (a 1 MB byte-level record
    left 3-5 MiB so at the assembly's peak). It changes no setting; elsewhere than glibc it does nothing."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
