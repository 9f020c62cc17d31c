"""Paths a Ray task opens are absolute, resolved on the driver before any task is planned.

Invariants:
- A Ray worker runs in a working directory of its own (on another node, or in its session directory on this
  one), so a relative path the driver was given names nothing there, or another file. Before planning, the driver
  makes absolute every local path a task opens: OUT (and with it the state, parts and staging directories shard
  tasks write into), ``--rejects``, a ``--tokenizer`` folder, a ``--chat-template`` file, and each job's input.
- What a user reads keeps the spelling they gave: a sample's ``source`` and a reject's file name the input as it
  was passed (``sample_logs/x.jsonl:3``), as the local engine writes them, so the two engines' datasets are
  byte-identical (:func:`msgtrain.run.parts.convert_job` puts the spelling back).
- URLs (``s3://...``) and hub ids are left alone: they mean the same on every node.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from msgtrain.linearize.tokenizer_source import looks_local
from msgtrain.run.config import ConvertConfig
from msgtrain.run.parts import Job
from msgtrain.run.storage import is_remote


def _absolute(path: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def config_for_workers(cfg: ConvertConfig) -> ConvertConfig:
    """``cfg`` with every local path a task opens made absolute (inputs keep their spelling: see the module)."""
    update: dict[str, Any] = {}
    if cfg.output is not None and not is_remote(str(cfg.output)):
        update["output"] = _absolute(cfg.output)
    if cfg.rejects is not None:
        update["rejects"] = _absolute(cfg.rejects)
    if cfg.tokenizer is not None and looks_local(cfg.tokenizer):
        update["tokenizer"] = str(_absolute(cfg.tokenizer))
    if cfg.chat_template is not None and not is_remote(cfg.chat_template):
        update["chat_template"] = str(_absolute(cfg.chat_template))
    return cfg.model_copy(update=update) if update else cfg


def job_for_workers(job: Job) -> Job:
    """``job`` with a local input's path absolute; its ``meta["source"]`` keeps the spelling samples are named by."""
    if isinstance(job.path, str) or job.path.is_absolute():
        return job
    return replace(job, path=_absolute(job.path))
