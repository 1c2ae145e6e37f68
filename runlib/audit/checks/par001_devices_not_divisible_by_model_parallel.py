"""PAR001: devices not divisible by tensor * pipeline * context.

Why it matters:
    The data-parallel degree is devices / (tensor * pipeline * context). When that does not divide,
    frameworks refuse to start (Megatron-LM arguments.py validate_args: world_size % (tp*pp*cp) == 0;
    torchtitan parallel_dims.py checks that the degrees multiply to the world size) or, in
    hand-written launchers, the leftover devices sit idle while every plan number is off.

Flagged:
    hardware: {nodes: 1, devices_per_node: 8}
    parallelism: {tensor: 3}              # 8 devices / 3 = 2.67 data-parallel replicas

Preferred:
    hardware: {nodes: 1, devices_per_node: 8}
    parallelism: {tensor: 2}              # dp = 4

How to fix:
    Choose tensor, pipeline and context degrees whose product divides nodes * devices_per_node (the
    finding lists the products that do), or change the device count. Phases that override the
    parallel layout are checked with their own degrees.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import who
from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import build_layout
from runlib.spec.models import ParallelismSpec, PhaseSpec

CODE = "PAR001"
NAME = "devices-not-divisible-by-model-parallel"
SEVERITY = "error"
FIELDS = ("tensor", "pipeline", "context")


def _overridden(phase: PhaseSpec) -> list[str]:
    par = phase.parallelism
    return [f for f in FIELDS if par is not None and getattr(par, f) is not None]


def _nearby_divisors(n: int, around: int) -> list[int]:
    """Divisors of n (> 1) between around / 2 and 2 * around, at most 6."""
    low, high = max(2, around // 2), min(n, 2 * around, around // 2 + 100_000)
    return [d for d in range(low, high + 1) if n % d == 0][:6]


def _problem(machines: tuple[int, int], par: ParallelismSpec) -> tuple[str, str] | None:
    """machines: (nodes, devices_per_node) of the phase, or of the run."""
    layout = build_layout(par, nodes=machines[0], devices_per_node=machines[1])
    devices, product = layout.world_size, layout.model_parallel
    if devices % product == 0:
        return None
    idle = devices - layout.used_devices  # negative: not even one replica fits
    options = _nearby_divisors(devices, product)
    message = (
        f"{devices} devices are not divisible by tensor {layout.tp} x pipeline {layout.pp} x context {layout.cp} "
        f"= {product}: the data-parallel degree would be {devices / product:.3g}"
        + (f" ({idle} devices idle)" if idle >= 0 else " (fewer devices than one model replica needs)")
    )
    hint = f" (products that divide {devices}: {', '.join(map(str, options))})" if options else ""
    fix = f"choose tensor * pipeline * context dividing {devices}{hint}, or use a device count that is a multiple of {product}"
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    phases = ctx.plan.phases
    global_names = []
    run_machines = (spec.hardware.nodes, spec.hardware.devices_per_node)
    for p in phases:
        fields = _overridden(p.settings.phase)
        machines = (p.settings.nodes, p.settings.devices_per_node)
        if not fields and machines == run_machines:
            global_names.append(p.name)
            continue
        par = p.settings.parallelism
        problem = _problem(machines, par)
        if problem:
            path = f"phases[{p.settings.index}].parallelism" + (f".{fields[0]}" if len(fields) == 1 else "")
            if not fields:  # the phase's own machines
                path = f"phases[{p.settings.index}].hardware"
            yield ctx.finding(path, f"phase {p.name!r}: {problem[0]}", problem[1])
    if global_names or not phases:
        par = spec.parallelism
        problem = _problem(run_machines, par)
        if problem:
            above_one = [f for f in FIELDS if getattr(par, f) > 1]
            path = "parallelism" + (f".{above_one[0]}" if len(above_one) == 1 else "")
            yield ctx.finding(path, f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


PASS = [
    {},
    {"parallelism.tensor": 2, "parallelism.pipeline": 2, "parallelism.context": 2},
    {"hardware.nodes": 3, "parallelism.tensor": 8},
    {"parallelism.tensor": 3, **{f"phases[{i}].parallelism": {"tensor": 2} for i in range(4)}},
]
FAIL = [
    case({"parallelism.tensor": 3}, "error"),
    case({"hardware.nodes": 2, "parallelism.pipeline": 2, "parallelism.context": 3}, "error"),
    case({"phases[2].parallelism": {"context": 3}}, "error"),
    case({"hardware.devices_per_node": 2, "parallelism.tensor": 4}, "error"),
    # a phase on 12 devices of its own (phases[].hardware) with the run's tensor 8
    case(
        {
            "hardware.devices_per_node": 8,
            "parallelism.tensor": 8,
            "phases[2].hardware": {"nodes": 3, "devices_per_node": 4},
        },
        "error",
    ),
]
