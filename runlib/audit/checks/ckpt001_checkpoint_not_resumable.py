"""CKPT001: the checkpoint state lacks a piece needed to resume exactly.

Why it matters:
    A run of any length is resumed many times (Llama 3 saw 466 interruptions in 54 days, arXiv
    2407.21783). Resuming reproduces the uninterrupted run only if the checkpoint holds the model,
    the optimizer state (Adam moments), the LR scheduler, the RNG states (dropout, data shuffling)
    and the data position; without the data state the run re-reads or skips data (HF #26413,
    KempnerForge #51). With dynamic loss scaling the scaler's current scale and growth tracker are
    state too: a restart at the initial scale overflows for hundreds of steps.

Flagged:
    checkpoint: {state: [model, optimizer]}

Preferred:
    checkpoint: {state: [model, optimizer, scheduler, rng, data]}   # + scaler with dynamic loss scaling

How to fix:
    Add the missing pieces to checkpoint.state (the finding gives the full list).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "CKPT001"
NAME = "checkpoint-not-resumable"
SEVERITY = "error"
REQUIRED = ("model", "optimizer", "scheduler", "rng", "data")


def check(ctx: Context) -> Iterator[Finding]:
    state = list(ctx.spec.checkpoint.state)
    required = list(REQUIRED)
    if ctx.spec.precision.loss_scaling == "dynamic":
        required.append("scaler")  # a static scale is in the spec; a dynamic one is state
    missing = [s for s in required if s not in state]
    if not missing:
        return
    full = required + [s for s in state if s not in required]
    why = " (dynamic loss scaling keeps its scale in the scaler)" if "scaler" in missing else ""
    yield ctx.finding(
        "checkpoint.state",
        f"checkpoint.state lacks {', '.join(missing)}{why}: a resumed run does not continue the same run",
        f"set checkpoint.state: [{', '.join(full)}]",
        value=full,
    )


PASS = [
    {},
    {"precision.compute": "fp16", "precision.loss_scaling": "static", "precision.loss_scale": 1024},
    {
        "precision.compute": "fp16",
        "precision.loss_scaling": "dynamic",
        "checkpoint.state": ["model", "optimizer", "scheduler", "rng", "data", "scaler"],
    },
]
FAIL = [
    case({"checkpoint.state": ["model", "optimizer"]}, "error"),
    case({"checkpoint.state": ["model", "optimizer", "scheduler", "rng"]}, "error"),  # no data position
    case({"precision.compute": "fp16", "precision.loss_scaling": "dynamic"}, "error"),  # no scaler
]
