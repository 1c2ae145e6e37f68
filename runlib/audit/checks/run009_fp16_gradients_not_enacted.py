"""RUN009: fp16 gradients, which the runlib trainer does not enact.

Why it matters:
    Megatron-style fp16 runs without --accumulate-allreduce-grads-in-fp32 accumulate and all-reduce
    gradients in fp16 (BLOOM's precursor trials did); each micro-batch's gradient sum then rounds to
    10 mantissa bits and overflows past 65504 unless the loss scale is low. runlib reduces gradients
    in fp32, or in bf16 for grads: bf16 (runlib.model.parallelize): grads: fp16 would silently be
    another dtype than the one the audit planned, so the workflow gate refuses the spec.

Flagged:
    precision: {compute: fp16, grads: fp16, loss_scaling: dynamic}

Preferred:
    precision: {compute: fp16, grads: fp32, loss_scaling: dynamic}

How to fix:
    Use grads: fp32 (2 more bytes per parameter, shardable with zero2/fsdp). A warning in `runlib
    audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import precision_field_refusals

CODE = "RUN009"
NAME = "fp16-gradients-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in precision_field_refusals(ctx.spec.precision):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix, value="fp32")


PASS = [{}, {"precision.grads": "bf16"}]
FAIL = [
    case({"precision.grads": "fp16"}, "warning"),
    case(
        {
            "precision.compute": "fp16",
            "precision.grads": "fp16",
            "precision.loss_scaling": "dynamic",
            "hardware.accelerator": "v100",
        },
        "warning",
    ),
]
