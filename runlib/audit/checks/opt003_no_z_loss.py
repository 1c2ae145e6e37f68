"""OPT003: z-loss off with low-precision (bf16/fp16/fp8) compute.

Why it matters:
    Nothing in the cross-entropy loss pins the softmax normalizer log Z of the output logits: it can
    drift to large magnitudes, where 16-bit logits lose resolution (bf16 keeps 8 significant bits)
    and the loss becomes unstable. A z-loss of 1e-4 * log(Z)^2 keeps log Z near 0 at no measurable
    cost; PaLM uses it (arXiv 2204.02311, §5), as do OLMo 2 (arXiv 2501.00656) and Chameleon
    (arXiv 2405.09818) for stability. It is advice, not a defect.

Flagged:
    precision: {compute: bf16}
    optimizer: {kind: adamw, lr: 3.0e-4, z_loss: 0}

Preferred:
    precision: {compute: bf16}
    optimizer: {kind: adamw, lr: 3.0e-4, z_loss: 1.0e-4}

How to fix:
    Set optimizer.z_loss: 1.0e-4 (PaLM's coefficient).
"""

from collections.abc import Iterator

from runlib.audit.registry import DELETE, Context, Finding, case

CODE = "OPT003"
NAME = "no-z-loss-with-low-precision"
SEVERITY = "info"
Z_LOSS = 1e-4  # PaLM, arXiv 2204.02311
LOW_PRECISION = ("bf16", "fp16", "fp8")  # fp8 runs keep logits and softmax in 16-bit


def check(ctx: Context) -> Iterator[Finding]:
    compute = ctx.spec.precision.compute
    if ctx.spec.optimizer.z_loss == 0 and compute in LOW_PRECISION:
        yield ctx.finding(
            "optimizer.z_loss",
            f"z_loss is 0 with {compute} compute: nothing keeps the logits' log-normalizer near 0, so it can drift "
            "to magnitudes where 16-bit logits lose precision",
            f"set optimizer.z_loss: {Z_LOSS:g} (PaLM's coefficient on log(Z)^2)",
            value=Z_LOSS,
        )


PASS = [
    {},
    {"optimizer.z_loss": 1e-5},
    {"optimizer.z_loss": 0.0, "precision.compute": "fp32", "precision.master_weights": "fp32"},
]
FAIL = [
    case({"optimizer.z_loss": 0.0}, "info"),
    case({"optimizer.z_loss": DELETE}, "info"),
    case({"optimizer.z_loss": 0.0, "precision.compute": "fp16", "precision.loss_scaling": "dynamic"}, "info"),
    case({"optimizer.z_loss": 0.0, "precision.compute": "fp8", "hardware.accelerator": "h100-sxm"}, "info"),
]
