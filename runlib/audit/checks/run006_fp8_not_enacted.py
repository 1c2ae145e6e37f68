"""RUN006: fp8 compute, which the runlib trainer does not enact.

Why it matters:
    fp8 training needs scaled fp8 matmuls with per-tensor scaling recipes (Micikevicius et al.
    2022, arXiv 2209.05433; NVIDIA Transformer Engine, or torchao's float8 training). runlib's
    trainer uses torch autocast, which stops at 16-bit types: it has no fp8 path on any device, so
    the run would train in bf16 at half the peak the plan assumed. The workflow gate refuses the
    spec before any job starts. (PREC003 flags fp8 on a device without fp8 as an error.)

Flagged:
    hardware: {accelerator: h100-sxm}
    precision: {compute: fp8}

Preferred:
    hardware: {accelerator: h100-sxm}
    precision: {compute: bf16}

How to fix:
    Use compute: bf16 (fp16 with loss_scaling: dynamic on an accelerator without bf16). A warning
    in `runlib audit`; the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import refusal_findings
from runlib.audit.registry import Context, Finding, case

CODE = "RUN006"
NAME = "fp8-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    yield from refusal_findings(ctx, CODE)


PASS = [{}, {"precision.compute": "fp32"}, {"hardware.accelerator": "h100-sxm"}]
FAIL = [
    case({"precision.compute": "fp8", "hardware.accelerator": "h100-sxm"}, "warning"),
    case({"precision.compute": "fp8"}, "warning"),
]
