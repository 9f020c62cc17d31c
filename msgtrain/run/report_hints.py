"""The one next step a run's books suggest, as a line for the summary (or None when the books suggest nothing).

Invariant: a hint is derived from ``report.json``'s numbers alone (so it is the same for a run and for its
report read later), names the option or command to try, and at most one is given: the first that applies, in
order of how much of the data it concerns.
"""

from __future__ import annotations

from typing import Any

# Template re-rendering worth a hint: this share of the samples starts over because of it, and this little of
# the tokens is trained (each restart repeats the whole context untrained).
RERENDER_SHARE = 0.2
LOW_TRAINED_SHARE = 0.2
# Samples dropped for length worth a hint (share of the samples that would have been written).
DROPPED_SHARE = 0.05
# TRL's SFTConfig.max_length default (trl 1.x): longer rows are cut from the right, their last trained turns lost.
TRL_DEFAULT_MAX_LENGTH = 1024
# Targets a TRL trainer reads as rows of one sample each (canonical through its assistant_masks column).
TRL_READ_TARGETS = ("canonical", "trl", "labels")
# Context-incomplete samples worth a hint (share of the samples written).
INCOMPLETE_SHARE = 0.5


def next_step(report: dict[str, Any]) -> str | None:
    """One next step for the run described by ``report``, or None."""
    samples = report["samples"]["written"]
    tokens = report["tokens"]
    target = report.get("config", {}).get("target")
    rerender = report.get("cuts_by_reason", {}).get("template_rerender", 0)
    share = tokens["trained"] / tokens["total"] if tokens["total"] else 0.0
    if target != "tree" and samples and rerender >= RERENDER_SHARE * samples and share < LOW_TRAINED_SHARE:
        name = report.get("tokenizer", {}).get("name") or "TOKENIZER"
        return (
            f"{rerender} of {samples} samples start over because the chat template re-renders earlier turns "
            f"(template_rerender), and {share:.1%} of the tokens are trained: `--target tree` writes each "
            "conversation's shared prefixes once, and "
            f"`msgtrain audit-template --tokenizer {name}` shows which template feature breaks the prefixes"
        )
    dropped = sum(report["samples"].get("dropped_by_reason", {}).values())
    if dropped and dropped >= DROPPED_SHARE * (samples + dropped):
        overflow = report.get("config", {}).get("overflow")
        fix = "raise --max-length" if overflow == "split" else "`--overflow split` keeps them as several rows"
        return f"{dropped} samples were dropped for their length (listed in drops.jsonl): {fix}"
    splits = (report.get("outputs") or {}).get("splits") or {}
    longest = max((s.get("longest_sample_tokens") or 0 for s in splits.values()), default=0)
    if target in TRL_READ_TARGETS and longest > TRL_DEFAULT_MAX_LENGTH:
        return (
            f"the longest sample holds {longest} tokens: TRL's SFTConfig cuts rows at max_length="
            f"{TRL_DEFAULT_MAX_LENGTH} by default, losing the trained turns at their ends; set "
            f"SFTConfig(max_length={longest}) (or None), or convert with --max-length to fit the trainer"
        )
    incomplete = report.get("flags", {}).get("context_incomplete", 0)
    if samples and incomplete >= INCOMPLETE_SHARE * samples:
        return (
            f"{incomplete} of {samples} samples lack the system prompt, tool schemas or files the model was sent"
            " (not in the logs): if you know the prompt and tools, `--system-prompt FILE --tools FILE` (or `context:`"
            " per format in a config) puts them in (README: Supplying what a log does not hold)"
        )
    return None
