"""BATCH003: the batch ramp is malformed.

Why it matters:
    A batch ramp is a step function of tokens seen: it must start at 0 tokens (else the run begins
    on a batch the ramp does not state), its thresholds must strictly increase (else a stage is
    skipped or its order is ambiguous), and every threshold must fall inside the run (else the
    stage never applies). Megatron-LM's step batch-size schedule enforces the first two (first
    threshold 0, strictly increasing; NVIDIA/Megatron-LM PR #3779); nanotron requires data stages
    to start at step 1 with unique, sorted start steps (nanotron config.py).

Flagged:
    tokens: 100B
    batch:
      ramp:
        - {after: 1B tokens, global_batch: 1Mi tokens}     # not at 0
        - {after: 20B tokens, global_batch: 4Mi tokens}
        - {after: 10B tokens, global_batch: 2Mi tokens}    # goes back
        - {after: 150B tokens, global_batch: 8Mi tokens}   # after the run's end

Preferred:
    batch:
      ramp:
        - {after: 0 tokens, global_batch: 1Mi tokens}
        - {after: 10B tokens, global_batch: 2Mi tokens}
        - {after: 20B tokens, global_batch: 4Mi tokens}

How to fix:
    Start the first stage at 0 tokens, list the stages by increasing threshold with no duplicates,
    and drop (or move inside the run) stages whose threshold is at or after the run's end.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan.timeline import ramp_points
from runlib.spec.units import format_count

CODE = "BATCH003"
NAME = "malformed-batch-ramp"
SEVERITY = "error"


def _tokens(n: float) -> str:
    return f"{format_count(n)} tokens"


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    points = ramp_points(spec)
    if not points:
        return
    run_end = ctx.plan.tokens_total if ctx.plan.phases else spec.tokens
    if spec.batch.linear_ramp is not None:  # its points start at 0 and increase by construction
        over = points[-1][0]
        if run_end > 0 and over >= run_end:
            yield ctx.finding(
                "batch.linear_ramp.over",
                f"the linear batch ramp runs over {spec.batch.linear_ramp.over} ({_tokens(over)}), to or past the "
                f"run's end ({_tokens(run_end)}): the steady batch is never reached",
                "shorten linear_ramp.over to a part of the run (BLOOM: 20B of 366B tokens)",
            )
        return
    stages = spec.batch.ramp or []
    first = points[0][0]
    if first != 0:
        yield ctx.finding(
            "batch.ramp[0].after",
            f"the batch ramp's first stage starts at {stages[0].after} ({_tokens(first)}), not at 0 tokens: "
            "the run begins on the steady micro_batch * grad_accum batch, which the ramp does not state",
            "start the first stage at 0 tokens (with the batch the run should begin with)",
            value="0 tokens",
        )
    for i in range(1, len(points)):
        previous, current = points[i - 1][0], points[i][0]
        if current <= previous:
            yield ctx.finding(
                f"batch.ramp[{i}].after",
                f"ramp stage {i} starts at {stages[i].after} ({_tokens(current)}), "
                + ("the same threshold as" if current == previous else "before")
                + f" stage {i - 1} ({_tokens(previous)}): thresholds must strictly increase",
                "order the stages by increasing threshold and merge stages with the same threshold",
            )
    for i, (threshold, _) in enumerate(points):
        if run_end > 0 and threshold >= run_end:
            yield ctx.finding(
                f"batch.ramp[{i}].after",
                f"ramp stage {i} starts at {stages[i].after} ({_tokens(threshold)}), at or after the run's end "
                f"({_tokens(run_end)}): it never applies",
                "remove the stage or move its threshold inside the run",
            )


def _ramp(*afters: str) -> list[dict[str, str]]:
    batches = ["128Ki tokens", "256Ki tokens", "256Ki tokens"]
    return [{"after": a, "global_batch": b} for a, b in zip(afters, batches[: len(afters)], strict=True)]


PASS = [
    {},
    {"batch.ramp": _ramp("0 tokens", "10%")},
    {"batch.ramp": _ramp("0%", "100M tokens", "99%")},
]
FAIL = [
    case({"batch.ramp": _ramp("1%", "10%")}, "error"),
    case({"batch.ramp": _ramp("0 tokens", "20%", "10%")}, "error"),
    case({"batch.ramp": _ramp("0 tokens", "10%", "10%")}, "error"),
    case({"batch.ramp": _ramp("0 tokens", "150%")}, "error"),
    case({"batch.linear_ramp": {"start": "32Ki tokens", "increment": "32Ki tokens", "over": "100%"}}, "error"),
]
