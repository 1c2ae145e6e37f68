"""PREC002: loss scaling with bf16 or fp32 compute (not needed).

Why it matters:
    Loss scaling exists for fp16, whose 5 exponent bits make small gradients underflow. bf16 has
    fp32's 8 exponent bits and fp32 is fp32: neither underflows where fp16 does, so a scaler only
    adds a multiply, an inf/NaN check per step, and skipped steps whenever the scale overshoots
    (Megatron-LM and DeepSpeed apply loss scaling to fp16 only; Micikevicius et al., arXiv
    1710.03740, and Kalamkar et al., arXiv 1905.12322, on bf16 needing none). It usually means the
    precision section was copied from an fp16 config.

Flagged:
    precision: {compute: bf16, loss_scaling: dynamic}

Preferred:
    precision: {compute: bf16, loss_scaling: none}

How to fix:
    Set precision.loss_scaling: none (and drop loss_scale); or, if fp16 was meant, set compute: fp16.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PREC002"
NAME = "loss-scaling-not-needed"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    precision = ctx.spec.precision
    if precision.compute in ("bf16", "fp32") and precision.loss_scaling != "none":
        exponent = "has fp32's 8 exponent bits" if precision.compute == "bf16" else "is full precision"
        yield ctx.finding(
            "precision.loss_scaling",
            f"loss_scaling: {precision.loss_scaling} with {precision.compute} compute: {precision.compute} {exponent}, "
            "so gradients do not underflow and the scaler only adds overflow checks and skipped steps",
            "set precision.loss_scaling: none (loss scaling is for fp16 compute)",
            value="none",
        )


PASS = [
    {},
    {"precision.compute": "fp16", "precision.loss_scaling": "dynamic"},
    {"precision.compute": "fp16", "precision.loss_scaling": "static", "precision.loss_scale": 1024.0},
]
FAIL = [
    case({"precision.loss_scaling": "dynamic"}, "warning"),
    case({"precision.loss_scaling": "static", "precision.loss_scale": 65536.0}, "warning"),
    case({"precision.compute": "fp32", "precision.loss_scaling": "dynamic"}, "warning"),
]
