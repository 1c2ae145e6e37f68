"""PREC005: 16-bit parameters with no fp32 master weights.

Why it matters:
    With master_weights: none the parameters themselves take the optimizer's updates in the
    compute dtype (fp8 runs keep 16-bit weights). bf16 keeps 8 significant bits, so an update
    smaller than about 2^-8 (1/256) of a weight's magnitude rounds back to the old value; fp16
    keeps 11 bits (1/2048). Adam's updates are about the learning rate in size, so as the LR
    decays, ever more weights stop moving and the end of the run (the anneal) is partly wasted.
    Mixed-precision training keeps an fp32 master copy for this reason (Micikevicius et al.,
    arXiv 1710.03740, §3.1); pure-bf16 training needs stochastic rounding or Kahan summation to
    match it (Zamirai et al., arXiv 2010.06192). torchtitan's training.dtype: bfloat16 is this
    mode and is documented as such (torchtitan config: "no fp32 master weights").

Flagged:
    precision: {compute: bf16, master_weights: none}

Preferred:
    precision: {compute: bf16, master_weights: fp32}

How to fix:
    Set precision.master_weights: fp32 (4 more bytes per parameter, shardable with zero1/fsdp);
    keep none only with an optimizer that rounds stochastically, and say so in audit.ignore.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PREC005"
NAME = "no-fp32-master-weights"
SEVERITY = "warning"
# significant bits of the dtype the parameters are stored in (fp8 compute keeps 16-bit weights)
WEIGHT_BITS = {"bf16": ("bf16", 8), "fp8": ("bf16", 8), "fp16": ("fp16", 11)}


def check(ctx: Context) -> Iterator[Finding]:
    precision = ctx.spec.precision
    if precision.master_weights != "none" or precision.compute not in WEIGHT_BITS:
        return
    dtype, bits = WEIGHT_BITS[precision.compute]
    ratio = 2**bits  # an update below |w| / ratio rounds away
    peak = ctx.spec.optimizer.lr
    floor = peak * ctx.spec.schedule.min_lr_ratio
    if floor > 0:
        lr_text = f"at the schedule's floor LR {floor:.3g} every weight larger than ~{floor * ratio:.3g} in magnitude can no longer change"
    elif peak > 0:
        lr_text = (
            f"even at the peak LR {peak:.3g} weights larger than ~{peak * ratio:.3g} do not move, "
            "and as the LR decays toward 0 all of them freeze"
        )
    else:
        lr_text = "small updates are lost"
    stored = f"{precision.compute} compute keeps {dtype} weights; " if precision.compute == "fp8" else ""
    yield ctx.finding(
        "precision.master_weights",
        f"master_weights: none with {precision.compute} compute: {stored}{dtype} keeps {bits} significant bits, so an update "
        f"smaller than ~1/{ratio} of a weight rounds away; with Adam's updates of about the LR, {lr_text}",
        "set precision.master_weights: fp32 (shard it with parallelism.sharding: zero1 or fsdp if memory is short)",
        value="fp32",
    )


PASS = [
    {},
    {"precision.compute": "fp32", "precision.master_weights": "none"},
    {"precision.compute": "fp16", "precision.loss_scaling": "dynamic", "precision.master_weights": "fp32"},
]
FAIL = [
    case({"precision.master_weights": "none"}, "warning"),
    case({"precision.master_weights": "none", "schedule.min_lr_ratio": 0.0}, "warning"),
    case(
        {"precision.master_weights": "none", "precision.compute": "fp16", "precision.loss_scaling": "dynamic"},
        "warning",
    ),
    case(
        {"precision.master_weights": "none", "precision.compute": "fp8", "hardware.accelerator": "h100-sxm"}, "warning"
    ),
]
