"""A run that read nothing publishes nothing.

Invariant: when no record of the run was converted (no input file, every file unreadable, every record rejected
or skipped), the dataset is not published, whatever OUT held before: the run fails (exit 1) with the counts, the
first reject and what to check, unless ``--allow-empty`` asks for an empty dataset. An empty dataset that looks
like a successful night is worse than a failed one: the failure is seen. (A run that converted records but
trained no turn is judged by :func:`refuse_empty_replacement`: it may not replace a
dataset that has samples.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, OutputError
from msgtrain.run.config import ConvertConfig
from msgtrain.run.parts import PartStats
from msgtrain.run.storage import first_line


def first_reject(location: Path | str | None) -> str | None:
    """``where: message`` of the first line of a rejects file (or object), or None."""
    line = first_line(location) if location is not None else None
    try:
        record = json.loads(line) if line and line.strip() else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return f"{record.get('where') or record.get('file')}: {record.get('message')}"


def nothing_found(ignored: Any) -> str:
    """What a run (or ``validate``) that found no log file in its inputs says: how many paths it passed over, and
    the first one with its reason."""
    ignored = list(ignored)
    first = (
        f": {ignored[0]['path']} ({ignored[0]['reason']})" + (", ..." if len(ignored) > 1 else "") if ignored else ""
    )
    return f"no log file found in the inputs ({len(ignored)} paths passed over{first})"


def refuse_nothing_read(
    cfg: ConvertConfig, report: dict[str, Any], rejects: Path | str | None = None, hint: str = ""
) -> None:
    """Raise :class:`OutputError` (code ``nothing_read``) when the run's report converted no record. ``hint``: what
    the executor's workers need to read the inputs (:attr:`msgtrain.run.execute.Executor.input_hint`), shown when
    inputs were unreadable."""
    records = report["records"]
    if records["converted"] or cfg.allow_empty:
        return
    files = report.get("files", {}).get("read", 0)
    if not records["read"]:
        what = nothing_found(report.get("files", {}).get("ignored", ())) if files == 0 else "no record"
    else:
        reasons = {**records["rejected_by_reason"], **records["skipped_by_reason"]}
        by_reason = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
        n, f = records["read"], files
        what = f"{n} record{'s' * (n != 1)} in {f} file{'s' * (f != 1)}, none converted ({by_reason})"
    example = first_reject(rejects)
    unreadable = records["rejected_by_reason"].get("unreadable_file", 0)
    hint = hint if unreadable else ""
    raise OutputError(
        f"read nothing: {what}" + (f"; first: {example}" if example else "") + "; nothing was published",
        hint=hint + "`msgtrain validate INPUTS` lists every problem; --allow-empty publishes an empty dataset",
        code="nothing_read",
    )


def refuse_empty_replacement(cfg: ConvertConfig, had: int, samples: int) -> None:
    """An empty result does not silently replace a dataset that has samples (``had``: the samples of the dataset
    OUT shows now), whether OUT is a directory or a store prefix: a wrong template, a wrong folder."""
    if samples or cfg.allow_empty:
        return
    if had:
        raise OutputError(
            f"this run produced no samples; refusing to replace the {had} samples in {cfg.output}",
            hint="check the inputs and the report's rejects; pass --allow-empty to publish an empty dataset",
            code="empty_result",
        )


def check_reject_rate(cfg: ConvertConfig, stats: PartStats) -> None:
    limit = cfg.max_reject_rate
    rejected = sum(stats.records_rejected.values())
    if limit is not None and stats.records_read and rejected / stats.records_read > limit:
        raise MsgtrainError(
            f"{rejected} of {stats.records_read} records rejected ({rejected / stats.records_read:.1%}), above"
            f" --max-reject-rate {limit:.1%}; stopping",
            hint="look at the rejects of the state directory's parts; the inputs may be the wrong format",
            code="reject_rate",
        )
