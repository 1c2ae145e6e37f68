"""MIX003: a source is repeated for too many epochs over the run.

Why it matters:
    Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models", arXiv 2305.16264) find
    that up to about 4 epochs of repeated data are almost as good as fresh data, that returns
    diminish quickly beyond that, and that around 16 epochs further repetition adds next to
    nothing (their fitted R_D* ~ 15.4) while the risk of memorization grows. The epochs of a
    source follow from its weight in every phase, each phase's tokens and the tokens the source
    holds; frameworks such as Megatron raise the epoch count silently.

Flagged:
    data: {sources: {math: {tokens: 10B}}}
    tokens: 1T
    phases: [{name: foundation, tokens: 100%, mixture: {web: 0.9, math: 0.1}}]   # math: 10 epochs

Preferred:
    phases: [{name: foundation, tokens: 100%, mixture: {web: 0.96, math: 0.04}}]   # math: 4 epochs

How to fix:
    Curate more tokens for the source, or lower its mixture weights (the finding gives both the
    tokens it would need and the weights that keep it at 4 epochs); a source that is a phase's whole
    mixture keeps weight 1 whatever it is scaled by, so there the fix is other sources or fewer
    tokens. Warning above 4 epochs, error above 16.
"""

import math
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, Severity, case
from runlib.spec.units import format_count

CODE = "MIX003"
NAME = "source-repeated-too-often"
SEVERITY = "warning"
WARN_EPOCHS = 4.0  # Muennighoff et al. 2023: ~free up to 4 epochs
ERROR_EPOCHS = 16.0  # ... and next to worthless beyond ~16 (R_D* ~ 15.4)


def check(ctx: Context) -> Iterator[Finding]:
    for source in ctx.plan.sources:
        epochs = source.epochs
        if epochs is None or not math.isfinite(epochs) or epochs <= WARN_EPOCHS:
            continue  # unknown or zero availability is MIX004's
        if source.name not in ctx.spec.data.sources:
            continue  # undeclared: MIX002
        factor = WARN_EPOCHS / epochs
        uses, alone = [], []
        for phase in ctx.spec.phases:
            weight = phase.mixture.get(source.name, 0.0)
            if weight > 0:
                uses.append(f"{phase.name}: {weight:g} -> {weight * factor:.3g}")
                if all(w <= 0 for name, w in phase.mixture.items() if name != source.name):
                    alone.append(phase.name)
        needed = math.ceil(source.tokens_used / WARN_EPOCHS)
        severity: Severity = "error" if epochs > ERROR_EPOCHS else "warning"
        if len(alone) == len(uses):  # its only source wherever it is used: renormalizing undoes a lower weight
            other = (
                f"or, as it is the whole mixture of {', '.join(alone)}, train {'that phase' if len(alone) == 1 else 'those phases'} "
                f"on {factor:.3g}x the tokens, or add other sources so that it is at most {factor:.3g} of the mixture"
            )
        else:
            other = (
                f"or scale its mixture weights by {factor:.3g} to stay at {WARN_EPOCHS:g} epochs "
                f"({'; '.join(uses)}) and renormalize the rest"
            )
        yield ctx.finding(
            f"data.sources.{source.name}.tokens",
            f"source {source.name!r} is seen {epochs:.1f} epochs: the phases draw {format_count(source.tokens_used)} tokens "
            f"from its {format_count(source.tokens_available or 0)} (more than {WARN_EPOCHS:g} epochs adds little, "
            f"more than {ERROR_EPOCHS:g} next to nothing; Muennighoff et al. 2023)",
            f"curate at least {format_count(needed)} tokens for {source.name!r}, {other}",
            value=needed,
            severity=severity,
        )


PASS = [
    {},
    {"data.sources.code.tokens": "140M"},  # 3.98 epochs
]
FAIL = [
    case({"data.sources.code.tokens": "100M"}, "warning"),
    case({"data.sources.code.tokens": "30M"}, "error"),
]
