"""PREC001: fp16 compute without loss scaling.

Why it matters:
    fp16 has 5 exponent bits: gradients below ~6e-8 flush to zero and the model silently stops
    learning, while large activations overflow past 65504. Loss scaling shifts gradients into the
    representable range; without it an fp16 run wastes its compute (DeepSpeed #697).

Flagged:
    precision: {compute: fp16, loss_scaling: none}

Preferred:
    precision: {compute: fp16, loss_scaling: dynamic}   # or compute: bf16 where the hardware has it

How to fix:
    Set precision.loss_scaling to dynamic (and keep the scaler in checkpoint.state), or switch to
    bf16 on hardware that supports it.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PREC001"
NAME = "fp16-without-loss-scaling"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    precision = ctx.spec.precision
    if precision.compute == "fp16" and precision.loss_scaling == "none":
        yield ctx.finding(
            "precision.loss_scaling",
            "fp16 compute with loss_scaling: none: small gradients underflow to zero and training stalls",
            "set precision.loss_scaling: dynamic (and add scaler to checkpoint.state), or use bf16",
            value="dynamic",
        )


PASS = [
    {},
    {
        "precision.compute": "fp16",
        "precision.loss_scaling": "dynamic",
        "checkpoint.state": ["model", "optimizer", "scheduler", "rng", "data", "scaler"],
    },
]
FAIL = [case({"precision.compute": "fp16", "precision.loss_scaling": "none"}, "error")]
