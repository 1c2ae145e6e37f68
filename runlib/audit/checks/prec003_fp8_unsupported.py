"""PREC003: fp8 compute on an accelerator without fp8.

Why it matters:
    fp8 matrix multiplies need fp8 tensor cores: NVIDIA Ada/Hopper (sm_89/sm_90: L40, H100, H200)
    and later, or AMD MI300 (gfx942). On Ampere (A100), Volta (V100), Turing (T4) or a CPU,
    Transformer Engine refuses to run fp8 ("Device compute capability 8.9 or higher required for
    FP8 execution", NVIDIA/TransformerEngine transformer_engine/pytorch/fp8.py, check_fp8_support),
    so the run crashes at its first step, and the plan's time and cost (made at an fp8 peak the
    device does not have) are wrong.

Flagged:
    hardware: {accelerator: a100-80gb}
    precision: {compute: fp8}

Preferred:
    hardware: {accelerator: a100-80gb}
    precision: {compute: bf16}        # or an fp8 accelerator: h100-sxm, h200, b200, mi300x

How to fix:
    Use bf16 compute on this accelerator, or move to an accelerator with fp8 (the finding lists
    the catalog's). For hardware outside the catalog, hardware.peak_tflops declares the dtypes
    it supports.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.spec.hardware import CATALOG

CODE = "PREC003"
NAME = "fp8-unsupported-by-accelerator"
SEVERITY = "error"


def check(ctx: Context) -> Iterator[Finding]:
    if ctx.spec.precision.compute != "fp8":
        return
    accel = ctx.plan.accelerator
    if not accel.peak_tflops or accel.supports("fp8"):
        return  # nothing known about an uncatalogued device without peak_tflops: nothing to say
    supported = ", ".join(d for d in ("bf16", "fp16", "fp32") if accel.supports(d))
    fallback = (
        "bf16" if accel.supports("bf16") else "fp16 with loss_scaling: dynamic" if accel.supports("fp16") else "fp32"
    )
    with_fp8 = ", ".join(k for k, a in CATALOG.items() if a.supports("fp8"))
    yield ctx.finding(
        "precision.compute",
        f"compute: fp8 but {accel.key} ({accel.description}) has no fp8 support (it supports {supported or 'no listed dtype'}): "
        "the run fails at its first fp8 matmul",
        f"use compute: {fallback} on {accel.key}, or an accelerator with fp8 ({with_fp8})",
    )


PASS = [
    {},
    {"precision.compute": "fp8", "hardware.accelerator": "h100-sxm"},
    {"precision.compute": "fp8", "hardware.accelerator": "mi300x"},
    {"precision.compute": "fp8", "hardware.peak_tflops": {"fp8": 600.0}},
]
FAIL = [
    case({"precision.compute": "fp8"}, "error"),
    case({"precision.compute": "fp8", "hardware.accelerator": "cpu"}, "error"),
    case({"precision.compute": "fp8", "hardware.accelerator": "v100"}, "error"),
    case(
        {
            "precision.compute": "fp8",
            "hardware.accelerator": "custom-npu",
            "hardware.memory_gib": 64.0,
            "hardware.peak_tflops": {"bf16": 400.0},
        },
        "error",
    ),
]
