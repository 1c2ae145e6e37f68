"""PAR002: attention heads do not split evenly over the tensor-parallel degree.

Why it matters:
    Tensor parallelism gives each rank a slice of the attention heads: heads % tensor must be 0.
    Key/value heads (grouped-query attention) are either split (kv_heads % tensor == 0) or
    replicated so that each rank holds one group (tensor % kv_heads == 0); anything else cannot
    be laid out. Megatron-LM asserts both (megatron/core/transformer/transformer_config.py,
    num_attention_heads % tp and num_query_groups % tp or tp % num_query_groups); nanotron does
    the same in its config check.

Flagged:
    model: {heads: 12, kv_heads: 4}
    parallelism: {tensor: 8}          # 12 query heads do not split over 8 ranks

Preferred:
    model: {heads: 12, kv_heads: 4}
    parallelism: {tensor: 4}          # 3 query heads and 1 kv head per rank

How to fix:
    Use a tensor degree that divides the number of heads and that divides, or is a multiple of,
    the number of kv heads (the finding lists the degrees that work), or change the head counts.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case

CODE = "PAR002"
NAME = "heads-not-divisible-by-tensor"
SEVERITY = "error"


def _ok(heads: int, kv: int, tensor: int) -> bool:
    return heads % tensor == 0 and (kv % tensor == 0 or tensor % kv == 0)


def _problem(heads: int, kv: int, tensor: int) -> tuple[str, str] | None:
    if tensor <= 1 or _ok(heads, kv, tensor):
        return None
    reasons = []
    if heads % tensor:
        reasons.append(f"{heads} attention heads are not divisible by tensor {tensor}")
    if kv % tensor and tensor % kv:
        reasons.append(f"{kv} kv heads are neither divisible by tensor {tensor} nor a divisor of it")
    working = [t for t in range(2, min(heads, 1024) + 1) if _ok(heads, kv, t)][:8]
    fix = "use a tensor degree " + (f"in {working}" if working else "of 1") + " or change the head counts"
    return "; ".join(reasons), fix


def check(ctx: Context) -> Iterator[Finding]:
    model = ctx.spec.model
    heads, kv = model.heads, model.kv_heads or model.heads
    phases = ctx.plan.phases
    own, global_names = split_by_override(ctx, overrides_parallelism("tensor"))
    for p in own:
        problem = _problem(heads, kv, p.settings.parallelism.tensor)
        if problem:
            yield ctx.finding(
                f"phases[{p.settings.index}].parallelism.tensor", f"phase {p.name!r}: {problem[0]}", problem[1]
            )
    if global_names or not phases:
        problem = _problem(heads, kv, ctx.spec.parallelism.tensor)
        if problem:
            yield ctx.finding("parallelism.tensor", f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


PASS = [
    {},
    {"parallelism.tensor": 4},
    {"parallelism.tensor": 2, "model.kv_heads": 1},
    {"hardware.nodes": 3, "parallelism.tensor": 6, "model.kv_heads": 3},
]
FAIL = [
    case({"parallelism.tensor": 8}, "error"),
    case({"hardware.nodes": 3, "parallelism.tensor": 6}, "error"),
    case({"phases[2].parallelism": {"tensor": 8}}, "error"),
]
