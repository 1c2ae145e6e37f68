"""BATCH005: a phase's tokens are not a whole number of optimizer steps.

Why it matters:
    A phase runs whole optimizer steps, so its token count is rounded to the nearest multiple of
    the tokens per step; the difference (the drift) moves every later phase boundary and the
    run's end, and with it the LR schedule points, checkpoint positions and the epochs per source
    the plan reports. Frameworks round silently (LitGPT floors max_tokens // tokens per step;
    auditor.md section 2.4: steps = tokens / tokens_per_step, non-integer => report the drift).
    Info when there is any drift; a warning when it exceeds 0.1% of the phase.

Flagged:
    tokens: 2.4B
    batch: {micro_batch: 8, grad_accum: 2}                  # 256Ki tokens per step
    phases: [{name: long, tokens: 2%, ...}]                  # 48M tokens = 183.1 steps

Preferred:
    phases: [{name: long, tokens: 183 steps, ...}]          # or 47972352 tokens (183 whole steps)

How to fix:
    Give the phase the token count (or percent) the finding names, which is the whole number of
    steps the run will take, or give the phase in steps.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case, summarize
from runlib.spec.units import format_count

CODE = "BATCH005"
NAME = "phase-not-whole-steps"
SEVERITY = "info"
WARNING_FRACTION = 0.001  # 0.1% of the phase
MIN_DRIFT_TOKENS = 1.0  # below one token the drift is float noise of a percentage


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    for p in ctx.plan.phases:
        span = p.span
        drift = span.drift_tokens
        if abs(drift) < MIN_DRIFT_TOKENS:
            continue
        nominal = span.nominal_tokens
        fraction = abs(drift) / nominal if nominal > 0 else float("inf")
        unit = p.settings.phase.tokens.unit
        whole = span.tokens
        if unit == "percent" and spec.tokens > 0:
            value = f"{whole / spec.tokens * 100:.12g}%"
        else:
            value = f"{whole} tokens"
        # a batch ramp gives a phase many step sizes (BLOOM's: 117): the first few, how many more, the last
        sizes = [format_count(t) for t in sorted({seg.tokens_per_step for seg in span.segments})]
        steps_per = f"{sizes[0]}-token steps" if len(sizes) == 1 else f"steps of {summarize(sizes)} tokens"
        stated = f"{nominal:.0f} tokens" if unit == "tokens" else f"{p.settings.phase.tokens} = {nominal:.0f} tokens"
        yield ctx.finding(
            f"phases[{p.settings.index}].tokens",
            f"phase {p.name!r}: {stated} is not a whole number of {steps_per}: it runs "
            f"{span.steps} steps = {whole} tokens, a drift of {drift:+,.0f} tokens ({fraction * 100:.2g}% of the phase)",
            f"set tokens: {value} ({span.steps} whole steps), or tokens: {span.steps} steps",
            value=value,
            severity="warning" if fraction > WARNING_FRACTION else "info",
        )


PASS = [
    {},
    {"phases[2].tokens": "184 steps"},
    {"phases[0].tokens": "2049966080 tokens"},
]
FAIL = [
    # 33920 tokens of drift each way: under 0.1% of either phase
    case({"phases[0].tokens": "2050000000 tokens", "phases[1].tokens": "120552320 tokens"}, "info"),
    # 48.1M tokens in the long phase = 183.49 steps of 256Ki tokens: 0.27% drift
    case({"phases[2].tokens": "48100000 tokens", "phases[3].tokens": "193072480 tokens"}, "warning"),
    case({"tokens": "2.4B"}, "info"),
]
