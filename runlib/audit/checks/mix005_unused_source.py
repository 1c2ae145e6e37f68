"""MIX005: a declared source that no phase uses.

Why it matters:
    Every declared source is curated and tokenized, which costs time and storage; a source that no
    phase mixture gives a positive weight is never trained on. Most often it is a forgotten entry
    or a mixture that was meant to include it.

Flagged:
    data: {sources: {web: ..., code: ..., math: ...}}
    phases: [{name: foundation, mixture: {web: 0.8, code: 0.2}}]   # math unused

Preferred:
    phases: [{name: foundation, mixture: {web: 0.75, code: 0.2, math: 0.05}}]

How to fix:
    Give the source a weight in the phase(s) meant to train on it, or remove it from data.sources.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MIX005"
NAME = "unused-source"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    used = {name for p in ctx.spec.phases for name, w in p.mixture.items() if w > 0}
    for name in ctx.spec.data.sources:
        if name in used:
            continue
        tokenizer = " (only tokenizer.train_on samples it)" if ctx.spec.tokenizer.train_on.get(name, 0.0) > 0 else ""
        yield ctx.finding(
            f"data.sources.{name}",
            f"source {name!r} is declared but no phase mixture gives it a positive weight{tokenizer}",
            f"add {name!r} to the mixture of the phases meant to train on it, or remove it from data.sources",
        )


PASS = [
    {},
    {"phases[0].mixture": {"web": 1.0}},  # code still used by the other phases
]
FAIL = [
    case(
        {
            "data.sources.math": {
                "domain": "math",
                "input": {"format": "jsonl", "path": "data/math/*.jsonl"},
                "tokens": "50M",
            }
        },
        "warning",
    ),
    case(
        {
            "phases[0].mixture": {"web": 1.0},
            "phases[1].mixture": {"web": 1.0, "code": 0.0},
            "phases[2].mixture": {"web": 1.0},
            "phases[3].mixture": {"web": 1.0},
        },
        "warning",
    ),
]
