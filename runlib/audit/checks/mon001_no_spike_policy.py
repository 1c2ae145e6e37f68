"""MON001: no loss-spike policy.

Why it matters:
    Loss spikes are routine in large runs (PaLM, arXiv 2204.02311 §5.1: ~20 spikes, handled by
    restarting ~100 steps earlier and skipping 200-500 batches; OLMo 2, arXiv 2501.00656). Without
    a policy a spike goes unnoticed until the run diverges, and the compute since then is lost;
    with one the run logs it, skips the batch, or rolls back automatically.

Flagged:
    monitor: {eval_every: 2000 steps}    # no spike

Preferred:
    monitor: {eval_every: 2000 steps, spike: {zscore: 5.0, window: 200, action: rollback, rollback: 200 steps}}

How to fix:
    Add monitor.spike (at least action: log; rollback for large runs).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MON001"
NAME = "no-spike-policy"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.monitor.spike is None:
        yield ctx.finding(
            "monitor.spike",
            "monitor.spike is absent: loss spikes are neither detected nor handled",
            "add monitor.spike, e.g. {zscore: 5.0, window: 200, action: rollback, rollback: 100 steps, max_retries: 3}",
        )


PASS = [{}, {"monitor.spike": {"action": "log"}}]
FAIL = [case({"monitor.spike": "__delete__"}, "warning")]
