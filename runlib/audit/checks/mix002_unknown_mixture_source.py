"""MIX002: a mixture names a source that does not exist.

Why it matters:
    A phase mixture or the tokenizer's train_on mixture refers to sources by name. A misspelled or
    removed name has no documents behind it: depending on the framework the weight is dropped and
    the rest renormalized, or the run stops when the sampler first reaches it. Either way the data
    the author meant is not what the run sees.

Flagged:
    data: {sources: {web: ..., code: ...}}
    phases: [{name: foundation, mixture: {web: 0.8, cod: 0.2}}]   # no source "cod"
    branches: [{name: books, mixture: {web: 0.5, books: 0.5}}]    # a branch of the last phase too

Preferred:
    phases: [{name: foundation, mixture: {web: 0.8, code: 0.2}}]

How to fix:
    Use a name declared under data.sources (the finding suggests the closest one), or declare the
    source.
"""

import difflib
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MIX002"
NAME = "unknown-mixture-source"
SEVERITY = "error"


def _finding(ctx: Context, path: str, where: str, name: str, declared: list[str]) -> Finding:
    close = difflib.get_close_matches(name, declared, n=1, cutoff=0.6)
    known = ", ".join(declared) if declared else "none"
    if close:
        fix = f"did you mean {close[0]!r}? Use a source declared under data.sources ({known}) or declare {name!r}"
    else:
        fix = f"use a source declared under data.sources ({known}) or declare {name!r} there"
    return ctx.finding(
        path,
        f"{where} names source {name!r}, which data.sources does not declare",
        fix,
        value=close[0] if close else None,
    )


def check(ctx: Context) -> Iterator[Finding]:
    declared = list(ctx.spec.data.sources)
    for i, phase in enumerate(ctx.spec.phases):
        for name in phase.mixture:
            if name not in ctx.spec.data.sources:
                yield _finding(ctx, f"phases[{i}].mixture.{name}", f"phase {phase.name!r} mixture", name, declared)
    for name in ctx.spec.tokenizer.train_on:
        if name not in ctx.spec.data.sources:
            yield _finding(ctx, f"tokenizer.train_on.{name}", "tokenizer.train_on", name, declared)


PASS = [
    {},
    {"tokenizer.train_on": {"web": 1.0}},
    {"phases[0].mixture": {"web": 1.0}},
    {"phases[3].branches": [{"name": "web-only", "mixture": {"web": 1.0}}]},
]
FAIL = [
    case({"phases[0].mixture": {"web": 0.8, "cod": 0.2}}, "error"),
    case({"phases[3].mixture": {"web": 0.6, "books": 0.4}}, "error"),
    case({"tokenizer.train_on": {"webb": 0.8, "code": 0.2}}, "error"),
    case({"phases[3].branches": [{"name": "books", "mixture": {"web": 0.5, "books": 0.5}}]}, "error"),
]
