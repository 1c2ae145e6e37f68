"""PHASE005: an anneal phase that is not the last phase.

Why it matters:
    The anneal phase carries the schedule's final LR decay on the highest-quality mixture; the
    model at its end is the one the run delivers. A phase after it trains on at the LR floor (or
    re-warms the LR), which undoes part of the annealing gain (Hägele et al. 2024, arXiv
    2405.18392; OLMo 2, arXiv 2501.00656: mid-training with the decay is the final stage).

Flagged:
    phases: [{name: foundation, kind: foundation}, {name: anneal, kind: anneal}, {name: long, kind: long_context}]

Preferred:
    phases: [{name: foundation, kind: foundation}, {name: long, kind: long_context}, {name: anneal, kind: anneal}]

How to fix:
    Move the anneal phase to the end of the list (and keep the schedule's decay on it).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PHASE005"
NAME = "anneal-not-last"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    phases = ctx.spec.phases
    for i, phase in enumerate(phases[:-1]):
        if phase.kind != "anneal":
            continue
        later = phases[i + 1 :]
        after = ", ".join(repr(p.name) for p in later) + (" still trains" if len(later) == 1 else " still train")
        yield ctx.finding(
            f"phases[{i}].kind",
            f"anneal phase {phase.name!r} is phase {i + 1} of {len(phases)}: {after} after the LR decay",
            f"move phase {phase.name!r} to the end of phases",
        )


PASS = [
    {},
    {"phases[3].kind": "foundation", "phases[1].kind": "foundation"},  # no anneal at all
]
FAIL = [
    case({"phases[2].kind": "anneal", "phases[3].kind": "long_context", "phases[3].seq_len": 4096}, "warning"),
    case({"phases[0].kind": "anneal"}, "warning"),
]
