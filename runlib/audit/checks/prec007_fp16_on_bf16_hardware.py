"""PREC007: fp16 compute on an accelerator that has bf16.

Why it matters:
    fp16 has 5 exponent bits: activations past 65504 overflow and small gradients underflow, so an
    fp16 run needs loss scaling, and large fp16 runs still diverge where bf16 (8 exponent bits, the
    range of fp32) does not. OPT-175B trained in fp16 on A100s and spent its run on restarts after
    loss-scale collapses and divergences, lowering the LR and the clip by hand (Zhang et al. 2022,
    arXiv 2205.01068, section 2.5 and the OPT-175B logbook in facebookresearch/metaseq); BigScience
    moved BLOOM-176B to bf16 after fp16 instabilities in its 104B trials (Le Scao et al. 2022, arXiv
    2211.05100, mixed-precision training). On hardware with bf16 at the same peak, fp16 buys
    nothing but that risk. The failures were reported at 100B parameters and more; fp16 with a
    dynamic loss scale trained GPT-NeoX-20B (Black et al. 2022, arXiv 2204.06745 §3) and the Pythia
    suite up to 12B (Biderman et al. 2023, arXiv 2304.01373 App. E), so below 50B parameters with a
    dynamic loss scale this is info.

Flagged:
    hardware: {accelerator: a100-80gb}
    precision: {compute: fp16, loss_scaling: dynamic}

Preferred:
    hardware: {accelerator: a100-80gb}
    precision: {compute: bf16, loss_scaling: none}

How to fix:
    Use compute: bf16 (and loss_scaling: none). Keep fp16 only on hardware without bf16 (V100,
    T4), with loss_scaling: dynamic.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PREC007"
NAME = "fp16-on-bf16-hardware"
SEVERITY = "warning"
INFO_BELOW_PARAMS = 50e9  # with a dynamic loss scale


def check(ctx: Context) -> Iterator[Finding]:
    accelerator = ctx.plan.accelerator
    if ctx.spec.precision.compute != "fp16" or not accelerator.supports("bf16"):
        return
    yield ctx.finding(
        "precision.compute",
        f"fp16 compute on {accelerator.description}, which has bf16 at "
        f"{accelerator.peak_tflops['bf16']:g} TFLOP/s (fp16: {accelerator.peak_tflops.get('fp16', 0):g}): fp16's "
        "5-bit exponent overflows and underflows where bf16 does not (OPT-175B's fp16 restarts, BLOOM's move "
        "to bf16)",
        "use compute: bf16 with loss_scaling: none",
        value="bf16",
        severity="info"
        if ctx.plan.params.total < INFO_BELOW_PARAMS and ctx.spec.precision.loss_scaling == "dynamic"
        else "warning",
    )


PASS = [
    {},
    {"hardware.accelerator": "v100", "precision.compute": "fp16", "precision.loss_scaling": "dynamic"},
]
FAIL = [
    case({"precision.compute": "fp16", "precision.loss_scaling": "dynamic"}, "info"),  # a 100M model
    case({"precision.compute": "fp16", "precision.loss_scaling": "static"}, "warning"),
    case(
        {
            "precision.compute": "fp16",
            "precision.loss_scaling": "dynamic",
            "model.layers": 80,
            "model.d_model": 8192,
            "model.heads": 64,
            "model.kv_heads": 8,
            "model.d_ff": 28672,
        },
        "warning",
    ),  # 70B
]
