"""``audit-template``'s entry: load the tokenizer and audit its template, or, for a Mistral tokenizer (no template:
mistral-common encodes), audit mistral-common's encoding (:mod:`msgtrain.tools.audit_mistral`). Above both auditors,
so neither imports the other's caller."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError
from msgtrain.tools.audit import AuditReport, TemplateAuditor, report_of
from msgtrain.tools.audit_mistral import audit_mistral
from msgtrain.tools.battery import FEATURES, PROBES
from msgtrain.tools.tokenizer import load_bundle


def audit_template(
    tokenizer: str | Path,
    chat_template: str | Path | None = None,
    *,
    features: Sequence[str] = (),
    template_kwargs: dict[str, Any] | None = None,
) -> AuditReport:
    """Load the tokenizer (local folder) and audit its chat template over the probe battery (or ``features``)."""
    unknown = [f for f in features if f not in FEATURES]
    if unknown:
        raise ConfigError(f"unknown feature(s) {', '.join(unknown)}", hint=f"features: {', '.join(FEATURES)}")
    bundle = load_bundle(tokenizer, chat_template)
    probes = [p for p in PROBES if not features or p.feature in features]
    if bundle.encodes_messages:  # a Mistral tokenizer: no template, mistral-common encodes the probes
        return audit_mistral(bundle, str(tokenizer), probes)  # type: ignore[arg-type]
    folder = Path(tokenizer) if Path(tokenizer).is_dir() else None
    auditor = TemplateAuditor(bundle, template_kwargs, folder)
    results = [auditor.run_probe(p) for p in probes]
    eot = auditor.end_of_turn(results) if any(r.status != "unsupported" for r in results) else None
    return report_of(
        str(tokenizer),
        str(chat_template) if chat_template is not None else None,
        dict(template_kwargs or {}),
        results,
        eot,
        auditor.generation_masks(),
        auditor.special_tokens(),
        auditor.content_format,
    )
