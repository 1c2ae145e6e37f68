"""PHASE001: the phases' tokens do not add up to the run's tokens.

Why it matters:
    `tokens` is the run's length: the LR schedule's decay horizon, percent durations (warmup,
    decay, phases) and the budget estimates are all measured against it, while the run actually
    trains the phases' tokens. When the two disagree the run stops early or late relative to its
    own schedule, and percentages of the run mean something else than what was written.

Flagged:
    tokens: 100B
    phases: [{name: foundation, tokens: 85%}, {name: anneal, tokens: 10%}]   # 95%

Preferred:
    phases: [{name: foundation, tokens: 90%}, {name: anneal, tokens: 10%}]

How to fix:
    Make the phase percentages add up to 100%, or, with phases in tokens or steps, set `tokens`
    to their sum (the finding gives it); the tolerance is 1e-6 of the run.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.units import format_count

CODE = "PHASE001"
NAME = "phase-tokens-mismatch"
SEVERITY = "error"
TOLERANCE = 1e-6  # relative


def check(ctx: Context) -> Iterator[Finding]:
    spec, phases = ctx.spec, ctx.plan.phases
    if not phases:
        return  # PHASE006
    run_tokens = spec.tokens
    nominal = sum(p.span.nominal_tokens for p in phases)
    if abs(nominal - run_tokens) <= TOLERANCE * max(run_tokens, 1):
        return
    percents = [p.tokens.amount for p in spec.phases if p.tokens.unit == "percent"]
    if len(percents) == len(spec.phases):
        total = sum(percents)
        largest = max(range(len(spec.phases)), key=lambda i: spec.phases[i].tokens.amount)
        adjusted = spec.phases[largest].tokens.amount + 100.0 - total
        hint = f" (e.g. phase {spec.phases[largest].name!r}: {adjusted:g}%)" if adjusted > 0 else ""
        yield ctx.finding(
            "phases",
            f"phase percentages add up to {total:g}%, not 100%: the phases train {format_count(nominal)} "
            f"of the run's {format_count(run_tokens)} tokens",
            f"make the phase percentages add up to 100%{hint}",
        )
        return
    # T = P * T + A  =>  T = A / (1 - P), with P the percent share and A the absolute tokens
    share = sum(percents) / 100.0
    absolute = sum(
        p.span.nominal_tokens for s, p in zip(spec.phases, phases, strict=True) if s.tokens.unit != "percent"
    )
    detail = ", ".join(f"{p.name} {format_count(p.span.nominal_tokens)}" for p in phases)
    if share < 1.0 and absolute > 0:
        fit = round(absolute / (1.0 - share))
        fix = f"set tokens: {fit} ({format_count(fit)}) so that the phases fill the run, or change the phases' tokens"
        value = fit
    else:
        fix = "change the phases' tokens so that they add up to the run's tokens"
        value = None
    yield ctx.finding(
        "tokens",
        f"the phases add up to {format_count(nominal)} tokens ({detail}) but tokens: {format_count(run_tokens)} "
        f"({(nominal - run_tokens) / max(run_tokens, 1):+.2%})",
        fix,
        value=value,
    )


PASS = [
    {},
    {
        "phases[0].tokens": "2049966080 tokens",
        "phases[1].tokens": "5%",
        "phases[2].tokens": "2%",
        "phases[3].tokens": "8%",
    },
    {
        "tokens": 2411724800,
        "phases[0].tokens": "1000000000 tokens",
        "phases[1].tokens": "1411724800 tokens",
        "phases[2].tokens": "0%",
        "phases[3].tokens": "0%",
    },
]
FAIL = [
    case({"phases[0].tokens": "80%"}, "error"),
    case({"phases[0].tokens": "2000000000 tokens"}, "error"),
    case({"phases[0].tokens": "1000 steps"}, "error"),
]
