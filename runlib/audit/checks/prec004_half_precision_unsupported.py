"""PREC004: bf16 (or fp16) compute on an accelerator without it.

Why it matters:
    bf16 needs hardware support: NVIDIA Ampere (A100, sm_80) and later, AMD MI200/MI300. A V100 or
    T4 has fp16 tensor cores but no bf16 ones: frameworks refuse (PyTorch autocast raises
    "Current CUDA Device does not support bfloat16", torch/amp/autocast_mode.py) or
    emulate bf16 at a fraction of the speed, so the plan's time and cost (made at a bf16 peak the
    device does not have) are wrong. The same holds for fp16 on a device declared without it.

Flagged:
    hardware: {accelerator: v100}
    precision: {compute: bf16}

Preferred:
    hardware: {accelerator: v100}
    precision: {compute: fp16, loss_scaling: dynamic}   # or a bf16 accelerator (a100-80gb, h100-sxm, ...)
    checkpoint: {state: [model, optimizer, scheduler, rng, data, scaler]}

How to fix:
    On V100/T4 use compute: fp16 with loss_scaling: dynamic (and scaler in checkpoint.state), or
    move to an accelerator with bf16. For hardware outside the catalog, hardware.peak_tflops
    declares the dtypes it supports.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.hardware import CATALOG

CODE = "PREC004"
NAME = "half-precision-unsupported-by-accelerator"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    compute = ctx.spec.precision.compute
    if compute not in ("bf16", "fp16"):
        return
    accel = ctx.plan.accelerator
    if not accel.peak_tflops or accel.supports(compute):
        return  # nothing known about an uncatalogued device without peak_tflops: nothing to say
    supported = ", ".join(d for d in ("fp8", "bf16", "fp16", "fp32") if accel.supports(d))
    other = "fp16" if compute == "bf16" else "bf16"
    if accel.supports(other):
        fallback = (
            "compute: fp16 with loss_scaling: dynamic (and scaler in checkpoint.state)"
            if other == "fp16"
            else "compute: bf16"
        )
    else:
        fallback = "compute: fp32"
    with_it = ", ".join(k for k, a in CATALOG.items() if a.supports(compute) and k != "cpu")
    yield ctx.finding(
        "precision.compute",
        f"compute: {compute} but {accel.key} ({accel.description}) has no {compute} support (it supports {supported or 'no listed dtype'}): "
        f"the run fails or runs {compute} emulated, far below the plan's speed",
        f"use {fallback} on {accel.key}, or an accelerator with {compute} ({with_it})",
    )


PASS = [
    {},
    {"hardware.accelerator": "h100-sxm"},
    {"hardware.accelerator": "v100", "precision.compute": "fp16", "precision.loss_scaling": "dynamic"},
    {"hardware.accelerator": "t4", "precision.compute": "fp32"},
    {"hardware.accelerator": "cpu"},
]
FAIL = [
    case({"hardware.accelerator": "v100"}, "error"),
    case({"hardware.accelerator": "t4"}, "error"),
    case(
        {
            "hardware.accelerator": "custom-npu",
            "hardware.memory_gib": 64.0,
            "hardware.peak_tflops": {"bf16": 400.0, "fp32": 50.0},
            "precision.compute": "fp16",
            "precision.loss_scaling": "dynamic",
        },
        "error",
    ),
]
