"""OPT003: z-loss off with low-precision (bf16/fp16/fp8) compute.

Why it matters:
    Nothing in the cross-entropy loss pins the softmax normalizer log Z of the output logits: it can
    drift to large magnitudes, where 16-bit logits lose resolution (bf16 keeps 8 significant bits)
    and the loss becomes unstable. A z-loss of 1e-4 * log(Z)^2 keeps log Z near 0 at no measurable
    cost; PaLM uses it (arXiv 2204.02311, §5), as do OLMo 2 (arXiv 2501.00656) and Chameleon
    (arXiv 2405.09818) for stability. It is advice, not a defect, at the learning rates most runs
    use; at a high peak LR it is a warning: the divergence of the output logits that z-loss prevents
    appears in small models only at high learning rates, about 1e-2 and above in Wortsman et al.'s
    sweeps (arXiv 2309.14322, "output logit divergence"), and PaLM trained at 1e-2 with it.

Flagged:
    precision: {compute: bf16}
    optimizer: {kind: adamw, lr: 3.0e-4, z_loss: 0}      # info
    optimizer: {kind: adafactor, lr: 1.0e-2, z_loss: 0}  # warning

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
HIGH_LR = 5e-3  # half the LR from which Wortsman et al. 2023 see output logits diverge without z-loss


def check(ctx: Context) -> Iterator[Finding]:
    compute, lr = ctx.spec.precision.compute, ctx.spec.optimizer.lr
    if ctx.spec.optimizer.z_loss == 0 and compute in LOW_PRECISION:
        high = lr >= HIGH_LR
        at = (
            f" at a peak LR of {lr:.3g}, where output logits diverge without it (PaLM: 1e-2 with z-loss)"
            if high
            else ""
        )
        yield ctx.finding(
            "optimizer.z_loss",
            f"z_loss is 0 with {compute} compute{at}: nothing keeps the logits' log-normalizer near 0, so it can drift "
            "to magnitudes where 16-bit logits lose precision",
            f"set optimizer.z_loss: {Z_LOSS:g} (PaLM's coefficient on log(Z)^2)",
            value=Z_LOSS,
            severity="warning" if high else None,
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
    case({"optimizer.z_loss": 0.0, "optimizer.kind": "adafactor", "optimizer.lr": 1.0e-2}, "warning"),
]
