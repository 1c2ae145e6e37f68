"""MOE001: the expert-parallel degree does not split the experts or the ranks it borrows.

Why it matters:
    Expert parallelism gives each of `expert` ranks experts / expert of every MoE layer's routed experts
    and sends each token to the ranks of its chosen experts and back by all-to-all (GShard, Lepikhin et
    al. 2020, arXiv 2006.16668, section 3.1: the experts sharded along their dimension; Switch
    Transformer, Fedus et al. 2021, arXiv 2101.03961, section 5.4, expert and data parallelism). The
    split must be even: Megatron-LM refuses to start otherwise (megatron/training/arguments.py: "Number
    of experts should be a multiple of expert model parallel_size"). The ranks are the data-parallel
    (and context-parallel) ones, borrowed rather than added (torchtitan's ParallelDims,
    torchtitan/distributed/parallel_dims.py: ep divides dp_shard x cp):
    a degree that does not divide the phase's data-parallel x context ranks cannot be laid out, and the
    plan then plans no expert parallelism at all (ep 1: every rank holds every expert, its memory and
    its optimizer states), so every figure built on it differs from what was asked for. An expert degree
    on a dense model (no model.moe) has nothing to split.

Flagged:
    model: {moe: {experts: 64, top_k: 8, ...}}
    hardware: {nodes: 2, devices_per_node: 8}
    parallelism: {expert: 12}        # 64 experts over 12 ranks; 12 does not divide 16 data-parallel ranks

Preferred:
    parallelism: {expert: 16}        # 4 experts per rank, over all 16 data-parallel ranks

How to fix:
    Use an expert degree that divides both model.moe.experts and the phase's data-parallel x context
    ranks (the finding names the nearest ones), or omit parallelism.expert on a dense model.
"""

import math
from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import build_layout, divisors_above_one
from runlib.spec.models import ParallelismSpec

CODE = "MOE001"
NAME = "experts-not-divisible-by-expert-parallel"
SEVERITY = "error"


def _nearest(expert: int, valid: list[int]) -> tuple[int | None, int | None]:
    """The largest valid degree below `expert` and the smallest above it."""
    below = [d for d in valid if d < expert]
    above = [d for d in valid if d > expert]
    return (below[-1] if below else None), (above[0] if above else None)


def _problem(
    expert: int, experts: int | None, parallelism: ParallelismSpec, nodes: int, per_node: int
) -> tuple[str, str, int] | None:
    """(message, fix, corrected degree) of one layout, or None when the degree is sound."""
    if expert <= 1:
        return None
    if experts is None:
        return (
            f"expert {expert} without model.moe: a dense model has no experts to split over the expert ranks",
            "set parallelism.expert: 1 (or omit it), or give the model model.moe",
            1,
        )
    layout = build_layout(parallelism, nodes=nodes, devices_per_node=per_node)
    ranks = layout.data_parallel * layout.cp
    reasons = []
    if experts % expert:
        reasons.append(f"{experts} experts do not split evenly over expert {expert} ({experts / expert:.3g} per rank)")
    if ranks % expert:
        split = f"data parallel {layout.data_parallel}" + (f" x context {layout.cp}" if layout.cp > 1 else "")
        reasons.append(
            f"expert {expert} does not divide the {ranks} ranks it borrows ({split}): the plan planned no expert "
            f"parallelism (ep 1), every rank holding all {experts} experts of each MoE layer"
        )
    if not reasons:
        return None
    valid = [1, *divisors_above_one(math.gcd(experts, ranks))]
    below, above = _nearest(expert, valid)
    options = [d for d in (below, above) if d is not None]
    nearest = min(options, key=lambda d: (abs(d - expert), d))
    fix = (
        f"use expert {' or '.join(str(d) for d in options)} (the nearest degree{'s' if len(options) > 1 else ''} "
        f"dividing both the {experts} experts and the {ranks} data-parallel x context ranks)"
    )
    if nearest == 1:
        fix += ", or choose a layout whose data-parallel ranks share a factor with the experts"
    return "; ".join(reasons), fix, nearest


def check(ctx: Context) -> Iterator[Finding]:
    moe = ctx.spec.model.moe
    experts = moe.experts if moe is not None else None
    phases = ctx.plan.phases
    own, global_names = split_by_override(ctx, overrides_parallelism("expert"))
    for p in own:
        s = p.settings
        problem = _problem(s.parallelism.expert, experts, s.parallelism, s.nodes, s.devices_per_node)
        if problem:
            yield ctx.finding(
                f"phases[{s.index}].parallelism.expert",
                f"phase {p.name!r}: {problem[0]}",
                problem[1],
                value=problem[2],
            )
    # the global degree, once per distinct problem (a phase that overrides its machines or its other degrees
    # may borrow other ranks)
    grouped: dict[tuple[str, str, int], list[str]] = {}
    for p in phases:
        if p.name not in global_names:
            continue
        s = p.settings
        problem = _problem(s.parallelism.expert, experts, s.parallelism, s.nodes, s.devices_per_node)
        if problem:
            grouped.setdefault(problem, []).append(p.name)
    if not phases:
        hw = ctx.spec.hardware
        problem = _problem(ctx.spec.parallelism.expert, experts, ctx.spec.parallelism, hw.nodes, hw.devices_per_node)
        if problem:
            grouped[problem] = []
    for (message, fix, value), names in grouped.items():
        yield ctx.finding("parallelism.expert", f"{who(names, len(phases))}: {message}", fix, value=value)


_MOE = {"experts": 64, "top_k": 8, "expert_d_ff": 256, "aux_loss": 0.01, "z_loss": 0.001}
PASS = [
    {},
    {"model.moe": _MOE},
    {"model.moe": _MOE, "parallelism.expert": 8},
    {"model.moe": _MOE, "hardware.nodes": 2, "parallelism.expert": 16},
    # context-parallel ranks count: 4 data x 2 context ranks take expert 8
    {"model.moe": _MOE, "parallelism.context": 2, "parallelism.expert": 8},
    # a phase on fewer ranks with its own degree
    {"model.moe": _MOE, "parallelism.expert": 8, "phases[2].parallelism": {"tensor": 2, "expert": 4}},
]
FAIL = [
    # 64 experts over 12 ranks, and 12 does not divide 16 data-parallel ranks
    case({"model.moe": _MOE, "hardware.nodes": 2, "parallelism.expert": 12}, "error"),
    # 6 experts over 4 ranks
    case({"model.moe": {**_MOE, "experts": 6, "top_k": 2}, "parallelism.expert": 4}, "error"),
    # expert 8 does not divide the 4 data-parallel ranks left by tensor 2: the plan planned ep 1
    case({"model.moe": _MOE, "parallelism.tensor": 2, "parallelism.expert": 8}, "error"),
    # the run's expert 8 fits, but not the ranks of the phase that takes tensor 2
    case({"model.moe": _MOE, "parallelism.expert": 8, "phases[2].parallelism": {"tensor": 2}}, "error"),
    # a phase's own degree above its experts
    case({"model.moe": _MOE, "phases[1].parallelism": {"expert": 128}}, "error"),
    # an expert degree on a dense model
    case({"parallelism.expert": 4}, "error"),
]
