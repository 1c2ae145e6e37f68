"""`runlib shrink`'s audit.ignore: the published entries that still silence a finding of the shrunk spec,
and an entry naming shrink for each finding its own choices raise (SHRINK_CHOICES)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runlib.audit import audit
from runlib.audit.checks.mix006_too_few_heldout_docs import MIN_DOCS as MIX006_DOCS
from runlib.audit.registry import Finding
from runlib.review.shrinking.data import STAND_IN_DOCS
from runlib.spec import RunSpec, validate_data


def ignores_section(spec: RunSpec, data: dict[str, Any]) -> dict[str, str]:
    """The shrunk spec's audit.ignore: the published entries that still silence one of its findings (others
    would be stale: AUDIT001), and an entry naming shrink for each finding that shrink's own choices raise
    (SHRINK_CHOICES). MIX006 stays in view when the published spec has too few held-out documents itself;
    SCHED008 and PAR005 judge the published LR and memory policy at the shrunk scale, which is shrink's."""
    findings = audit(validate_data({k: v for k, v in data.items() if k != "audit"}).spec).findings
    codes = {f.code for f in findings}
    out = {key: reason for key, reason in spec.audit.ignore.items() if key.partition("@")[0].strip().upper() in codes}
    if "MIX006" in codes and spec.data.heldout_docs < MIX006_DOCS:
        codes.discard("MIX006")
    for f in findings:
        if f.code in SHRINK_CHOICES and f.code in codes and f.code not in out:
            out[f.code] = SHRINK_CHOICES[f.code](data, f)
    return out


# findings that shrink's own choices raise, and the reason it writes into audit.ignore
SHRINK_CHOICES: dict[str, Callable[[dict[str, Any], Finding], str]] = {
    "MIX006": lambda data, f: (
        f"runlib shrink: {data['data']['heldout_docs']} held-out documents per source, taken from sources of "
        f"~{STAND_IN_DOCS} documents ({f.value} would leave none to train on); the shrunk run's held-out loss "
        "shows that evaluation runs, not differences between sources"
    ),
    "SCHED008": lambda data, f: (
        f"runlib shrink keeps the published peak LR {data['optimizer']['lr']:g} (the optimizer is part of the "
        f"run's structure); the DeepSeek LLM fit at the shrunk run's compute would give {f.value:g}"
    ),
    "PAR005": lambda data, f: (
        "runlib shrink keeps the published sharding and recomputation (part of the run's structure); the shrunk "
        "model fits without them"
    ),
}
