"""The convert pipeline, four steps with one contract each: **plan** (:mod:`msgtrain.run.plan`: discover and hash
the inputs, cut them into chunks, key their parts, reuse finished ones) → **execute** (:mod:`msgtrain.run.execute`:
jobs → parts through an :class:`~msgtrain.run.execute.Executor`) → **assemble** (:mod:`msgtrain.run.assemble`:
parts → shards, ``report.json``, ``rejects.jsonl``, ``drops.jsonl``) → **publish** (:mod:`msgtrain.run.outputs`:
under OUT's lock or lease, the atomic swap or pointer). Where the work runs is the executor's business and where
OUT lives the output's: no step asks either.

Invariants:
- Accounting: records read = converted + rejected + skipped (per reason); sampled turns found = trained + dropped
  (per reason). :func:`check_accounting` asserts both before anything is published.
- Safe output (:mod:`msgtrain.run.publish`): OUT is checked before anything is written (never an input, ``.`` or
  ``/``, never a directory msgtrain did not write unless ``overwrite``); OUT exists at every instant and shows the
  previous dataset or the new one, never a partial one. One run at a time per OUT (:mod:`msgtrain.run.lock`;
  on an object store a lease object, :mod:`msgtrain.run.lease`).
  A killed run leaves OUT untouched plus its finished parts in the state directory (``.OUT.msgtrain-state``),
  which ``--resume`` reuses.
- Deterministic: parts are assembled in sorted (source path, content hash, chunk) order whatever the number of
  workers or the order they finished in, so the same inputs and settings give byte-identical output.
- Work is split by input file, and a JSONL log larger than ``chunk_mb`` into chunks of whole conversations
  (:mod:`msgtrain.ingest.core.chunks`): the same samples and accounting as the whole file, in parallel and in memory
  bounded by the chunk, not the file.
- Resumable / incremental: a part is keyed by file content + file name + linearization settings + tokenizer
  (:func:`~msgtrain.run.parts.part_key`; never the folder: a file moved elsewhere is reused, its sources rewritten;
  the same bytes are converted once per run); with ``--resume`` finished parts are reused, exactly as a clean run
  would write them. The published dataset is exactly this run's inputs; ``keep_missing`` also keeps the parts of
  earlier inputs that are no longer inputs (rotated logs). A corrupt or partial part or manifest is recomputed.
- A bad record or file never stops the run (unless ``strict``); it lands in the rejects file. A sample longer than
  ``max_length`` (implied by ``pack_length`` for the packed and tree targets) never stops it either: the length
  policy drops it, counts it by reason and lists it (ids, length) in ``drops.jsonl``.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from msgtrain.errors import ConfigError
from msgtrain.run.allocators import give_back_free_memory
from msgtrain.run.assemble import assemble
from msgtrain.run.assembly import check_accounting
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.execute import Interrupted, execute, executor_for
from msgtrain.run.outputs import output_for
from msgtrain.run.plan import RunPlan, plan_run

__all__ = ["Interrupted", "check_accounting", "convert"]


def convert(cfg: ConvertConfig, progress: ProgressHook | None = None) -> dict[str, Any]:
    """Run a conversion described by a :class:`msgtrain.run.config.ConvertConfig`; return the report.

    OUT is checked before anything is written and held (its lock or lease) for the whole run, starting with the
    litter of dead runs."""
    started = time.perf_counter()
    if cfg.output is None:
        raise ConfigError("no output directory", hint="pass -o OUT")
    executor = executor_for(cfg)
    cfg = executor.prepare(cfg)  # before OUT is named: its state and parts directories are opened by workers too
    if cfg.keep_missing and not cfg.resume:
        raise ConfigError("--keep-missing keeps parts of earlier runs: it needs --resume", hint="add --resume")
    output = output_for(cfg)
    # The indexes of files that answer each other, built once per folder and shared by this machine's workers.
    with output.held(), executor.session(), tempfile.TemporaryDirectory(prefix="msgtrain-shared-") as shared:
        plan = plan_run(cfg, output, executor, progress, shared)
        execute(plan, executor, cfg, progress)
        # The run's memos (segment ids, encodings, renderings) served the conversion; the assembly encodes nothing,
        # and what they hold (up to their caps, 320 MiB) would stay beside the dataset being written.
        plan.tok.clear_run_memos()
        give_back_free_memory()
        with output.staging() as staged:
            data, published = assemble(cfg, plan, output, executor, staged, progress)
            output.publish(staged, data)
        output.forget(plan.manifest, published)
    return _finish(data, plan, started)


def _finish(data: dict[str, Any], plan: RunPlan, started: float) -> dict[str, Any]:
    """The report a caller gets: report.json's, plus what must not be in it (timings, where things landed)."""
    data["seconds"] = round(time.perf_counter() - started, 3)
    outputs = data["outputs"]
    faults = data["records"]["rejected_by_reason"].get("reader_error", 0)
    outputs["debug_log"] = plan.settings.debug_log if faults else None
    if not data["records"]["rejected"]:
        outputs["rejects"] = None
    return data
