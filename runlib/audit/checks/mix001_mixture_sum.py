"""MIX001: a phase's mixture weights do not sum to 1.

Why it matters:
    Frameworks disagree on what to do with weights that do not sum to 1: Megatron normalizes them
    silently, OLMo-core warns, others sample by the raw numbers. Either the spec says what the run
    does or the run does something the author did not write down.

Flagged:
    phases: [{name: foundation, mixture: {web: 0.7, code: 0.2}}]   # sums to 0.9
    branches: [{name: code-heavy, mixture: {web: 0.5, code: 0.4}}]   # a branch of the last phase too

Preferred:
    phases: [{name: foundation, mixture: {web: 0.78, code: 0.22}}]

How to fix:
    Make the weights sum to 1; the finding gives the normalized weights. Negative weights are
    also flagged here.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MIX001"
NAME = "mixture-does-not-sum-to-one"
SEVERITY = "error"
TOLERANCE = 1e-6


def check(ctx: Context) -> Iterator[Finding]:
    for i, phase in enumerate(ctx.spec.phases):
        weights = phase.mixture
        total = sum(weights.values())
        negative = [k for k, w in weights.items() if w < 0]
        if negative:
            yield ctx.finding(
                f"phases[{i}].mixture",
                f"phase {phase.name!r} has negative weights for {', '.join(negative)}",
                "use weights >= 0 that sum to 1",
            )
        elif abs(total - 1.0) > TOLERANCE:
            normalized = {k: round(w / total, 6) for k, w in weights.items()} if total > 0 else None
            yield ctx.finding(
                f"phases[{i}].mixture",
                f"phase {phase.name!r} mixture weights sum to {total:.6g}, not 1",
                f"use the normalized weights {normalized}"
                if normalized
                else "give at least one source a positive weight",
                value=normalized,
            )


PASS = [
    {},
    {"phases[0].mixture": {"web": 0.3333333, "code": 0.6666667}},
    {"phases[3].branches": [{"name": "code-heavy", "mixture": {"web": 0.4, "code": 0.6}}]},
]
FAIL = [
    case({"phases[0].mixture": {"web": 0.7, "code": 0.2}}, "error"),
    case({"phases[3].mixture": {"web": 0.6, "code": 0.6}}, "error"),
    # a branch of the last phase, audited as its own run (runlib.audit.branches)
    case({"phases[3].branches": [{"name": "code-heavy", "mixture": {"web": 0.5, "code": 0.4}}]}, "error"),
]
