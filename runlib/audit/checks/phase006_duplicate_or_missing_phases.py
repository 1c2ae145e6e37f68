"""PHASE006: duplicate phase names, or no phases at all.

Why it matters:
    A phase's name names its training stage, its checkpoints and its evaluation results; two
    phases with one name overwrite each other's checkpoints and make resuming ambiguous (nanotron
    requires unique data-stage names, config.py). A spec without phases trains nothing.

Flagged:
    phases: [{name: main, kind: foundation}, {name: main, kind: anneal}]

Preferred:
    phases: [{name: main, kind: foundation}, {name: anneal, kind: anneal}]

How to fix:
    Give each phase a unique name (the finding suggests one); give the run at least one phase.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PHASE006"
NAME = "duplicate-or-missing-phases"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    phases = ctx.spec.phases
    if not phases:
        yield ctx.finding(
            "phases",
            "the spec has no phases: the run trains nothing",
            "add at least one phase, e.g. {name: main, kind: foundation, tokens: 100%, mixture: {...}}",
        )
        return
    names = {p.name for p in phases}
    first: dict[str, int] = {}
    for i, phase in enumerate(phases):
        if phase.name not in first:
            first[phase.name] = i
            continue
        k = 2
        while f"{phase.name}-{k}" in names:
            k += 1
        suggestion = f"{phase.name}-{k}"
        names.add(suggestion)
        yield ctx.finding(
            f"phases[{i}].name",
            f"phases[{i}] is named {phase.name!r} like phases[{first[phase.name]}]: their checkpoints and results collide",
            f"rename it, e.g. {suggestion!r}",
            value=suggestion,
        )


PASS = [{}, {"phases[3].name": "anneal-2"}]
FAIL = [
    case({"phases[3].name": "foundation"}, "error"),
    case({"phases": []}, "error"),
]
