"""MIX004: a source used by a phase has zero or unknown available tokens.

Why it matters:
    The epochs a source is repeated (MIX003), whether the run has enough data at all, and the
    sampler's repetition of the source all follow from its token count. A source with no tokens
    cannot be sampled: the run stops or silently renormalizes the mixture. A source whose tokens
    are not declared leaves the repetition of its data unchecked.

Flagged:
    data: {sources: {math: {domain: math, input: ...}}}          # no tokens
    phases: [{name: foundation, mixture: {web: 0.9, math: 0.1}}]

Preferred:
    data: {sources: {math: {domain: math, input: ..., tokens: 80B}}}

How to fix:
    Declare the source's tokens after curation (an estimate for planning; the measured count
    replaces it once curated), or drop the source from the mixtures.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "MIX004"
NAME = "source-without-tokens"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    used = {s.name: s.tokens_used for s in ctx.plan.sources}
    for name, source in ctx.spec.data.sources.items():
        if source.tokens:
            continue
        phases = [p.name for p in ctx.spec.phases if p.mixture.get(name, 0.0) > 0]
        if not phases:
            continue
        state = "declares 0 tokens" if source.tokens == 0 else "does not declare its tokens"
        yield ctx.finding(
            f"data.sources.{name}.tokens",
            f"source {name!r} {state}, but phases {', '.join(phases)} draw "
            f"{format_count(used.get(name, 0.0))} tokens from it",
            f"set data.sources.{name}.tokens to the tokens it holds after curation, or remove it from the mixtures",
        )


PASS = [
    {},
    {
        "data.sources.code.tokens": "__delete__",
        "phases[0].mixture": {"web": 1.0},
        "phases[1].mixture": {"web": 1.0},
        "phases[2].mixture": {"web": 1.0},
        "phases[3].mixture": {"web": 1.0, "code": 0.0},
    },
]
FAIL = [
    case({"data.sources.code.tokens": "__delete__"}, "error"),
    case({"data.sources.code.tokens": 0}, "error"),
]
