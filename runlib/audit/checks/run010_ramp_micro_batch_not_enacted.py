"""RUN010: a batch ramp stage with its own micro-batch, which the runlib trainer does not enact.

Why it matters:
    A ramp that starts below micro_batch x dp sequences (GPT-3 started at 32K tokens, Brown et al.
    2020, section 2.3) needs a smaller micro-batch early on; Megatron-LM's ramp instead keeps the
    micro-batch and changes the number of micro-batches (megatron/core/num_microbatches_calculator.py).
    batch.ramp[].micro_batch lets the plan size that stretch's memory and grad_accum (MEM001, BATCH002),
    but runlib's trainer splits every step into micro-batches of batch.micro_batch: the run would
    hold other activations, and take other batches, than the audit planned, so the workflow gate
    refuses the spec.

Flagged:
    batch:
      micro_batch: 8
      ramp:
        - {after: 0 tokens, global_batch: 32, micro_batch: 4}
        - {after: 10%, global_batch: 128}

Preferred:
    batch:
      micro_batch: 4
      ramp:
        - {after: 0 tokens, global_batch: 32}
        - {after: 10%, global_batch: 128}

How to fix:
    Drop the stage's micro_batch and use one micro-batch that divides every stage's global batch
    over dp, or train the stretch as a phase of its own with phases[].batch.micro_batch. A warning in
    `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import batch_refusals

CODE = "RUN010"
NAME = "ramp-micro-batch-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in batch_refusals(ctx.spec.batch):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


_STEADY = {"after": "10%", "global_batch": 128}
PASS = [
    {},
    {"batch.ramp": [{"after": "0 tokens", "global_batch": 64}, _STEADY]},
    # the batch's own micro-batch, stated again: nothing to enact
    {"batch.ramp": [{"after": "0 tokens", "global_batch": 64, "micro_batch": 8}, _STEADY]},
]
FAIL = [
    case({"batch.ramp": [{"after": "0 tokens", "global_batch": 32, "micro_batch": 4}, _STEADY]}, "warning"),
    case({"batch.ramp": [{"after": "0 tokens", "global_batch": 64}, {**_STEADY, "micro_batch": 16}]}, "warning"),
]
