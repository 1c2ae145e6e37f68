"""MON002: no held-out evaluation during training.

Why it matters:
    The training loss cannot tell memorization of repeated data from learning, nor one source
    from another. A held-out loss per source at a regular interval is the signal that shows
    overfitting on a repeated source, the effect of a phase change, and a regression after a loss
    spike, while there is still time to act; evaluating only after each phase finds it too late.

Flagged:
    monitor: {spike: {...}}        # no eval_every

Preferred:
    monitor: {eval_every: 2000 steps, spike: {...}}

How to fix:
    Set monitor.eval_every (a few hundred to a few thousand steps; it costs a small share of the
    run with the default 200 held-out documents per source).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MON002"
NAME = "no-heldout-eval"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    every = ctx.spec.monitor.eval_every
    if every is None:
        message = "monitor.eval_every is absent: no held-out loss during training"
    elif every.amount <= 0:
        message = f"monitor.eval_every: {every} never evaluates the held-out loss"
    else:
        return
    yield ctx.finding(
        "monitor.eval_every",
        message,
        "set monitor.eval_every, e.g. 1000 steps (or a few % of the run)",
    )


PASS = [{}, {"monitor.eval_every": "1%"}]
FAIL = [
    case({"monitor.eval_every": "__delete__"}, "warning"),
    case({"monitor.eval_every": "0 steps"}, "warning"),
]
