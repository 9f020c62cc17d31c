"""assemble: the third step of a run, parts → the dataset (shards, ``report.json``, rejects, drops) in a staging
location of OUT, not yet published. The executor writes it where the parts are
(:meth:`msgtrain.run.execute.Executor.assemble`); :mod:`msgtrain.run.assembly` holds how.

Invariants:
- Deterministic: parts are assembled in sorted (source path, content hash, chunk) order whatever the number of
  workers or the order they finished in, and the chunks of one input file together, so the same inputs and
  settings give byte-identical output.
- The published dataset is exactly this run's inputs; ``--keep-missing`` also keeps the parts of earlier inputs
  that are no longer inputs (rotated logs), never those of a file that is an input now with other bytes.
- Accounting balances (:func:`~msgtrain.run.assembly.check_accounting`) and a result the run must refuse (reject
  rate, empty, nothing read) is refused before it is published.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgtrain.run.assembly import REJECTS, UNREADABLE, AssemblyJob, Group, tokenizer_info
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.empty_result import refuse_nothing_read
from msgtrain.run.storage import child

if TYPE_CHECKING:
    from msgtrain.run.execute import Executor
    from msgtrain.run.outputs import Output
    from msgtrain.run.plan import RunPlan


def assemble(
    cfg: ConvertConfig,
    plan: RunPlan,
    output: Output,
    executor: Executor,
    staged: Path | str,
    progress: ProgressHook | None,
) -> tuple[dict[str, Any], list[str]]:
    """Write the dataset of the plan's parts into ``staged``; return its report and the part keys it holds."""
    keys = published_keys(cfg, plan)
    manifest = plan.manifest
    # The parts of one input file (its chunks, in chunk order) are assembled together.
    groups: list[Group] = [
        list(g) for _, g in itertools.groupby(keys, key=lambda k: (manifest[k]["source"], manifest[k]["digest"]))
    ]
    rejects = Path(cfg.rejects) if cfg.rejects is not None else None
    job = AssemblyJob(
        cfg,
        plan.parts,
        groups,
        staged,
        rejects,
        plan.ignored,
        tokenizer_info(plan.tok, cfg.content_format),
        output.previous_samples(),
    )
    data = executor.assemble(job, plan.tok, progress)
    refuse_nothing_read(cfg, data, rejects or child(staged, REJECTS), executor.input_hint)
    data["resume"] = {"parts": len(keys), "reused": plan.reused, "converted": plan.converted}
    return data, keys


def _sound(plan: RunPlan, key: str) -> bool:
    """Whether the kept part ``key`` (its input is gone) passes the checks a reused part passes
    (:meth:`~msgtrain.run.part_store.PartsStore.reuse`). One that does not cannot be recomputed: it is left out, and
    named among the report's unreadable inputs (the run exits 3)."""
    meta = plan.manifest[key]
    if plan.parts.reuse(key, meta):
        return True
    reason = f"{UNREADABLE}: its part, kept with --keep-missing since the input is gone, is corrupt and was dropped"
    plan.ignored.append({"path": str(meta["source"]), "reason": reason})
    return False


def published_keys(cfg: ConvertConfig, plan: RunPlan) -> list[str]:
    """The parts the dataset is made of, in assembly order."""
    manifest, complete = plan.manifest, plan.complete
    published = list(plan.run_keys)
    if cfg.keep_missing:
        # Parts of earlier inputs that are not inputs now (rotated logs); a file that is an input now with other
        # bytes replaces its old parts.
        kept = sorted(
            k
            for k, m in manifest.items()
            if k not in plan.run_keys
            and m["settings"] == plan.skey
            and m["digest"] not in plan.run_digests
            and m.get("real", m["source"]) not in plan.run_paths
            and complete(k)
        )
        published += [k for k in kept if _sound(plan, k)]
    return sorted(
        published,
        key=lambda k: (manifest[k]["source"], manifest[k]["digest"], manifest[k].get("chunk") or [0, 1]),
    )
