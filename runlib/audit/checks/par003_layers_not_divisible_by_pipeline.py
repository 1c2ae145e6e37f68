"""PAR003: layers not divisible by the pipeline-parallel degree.

Why it matters:
    A pipeline gives each stage layers / pipeline transformer blocks. With a remainder some stages
    carry an extra block: Megatron-LM refuses it (arguments.py validate_args, num_layers %
    pipeline_model_parallel_size == 0, unless a custom layout is given) and where it runs, the
    slowest stage sets the pace of every stage and the memory estimate of the first stage is off.

Flagged:
    model: {layers: 12}
    parallelism: {pipeline: 5}

Preferred:
    model: {layers: 12}
    parallelism: {pipeline: 4}        # 3 layers per stage

How to fix:
    Use a pipeline degree that divides the number of layers (the finding lists them), or change
    the number of layers.
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case

CODE = "PAR003"
NAME = "layers-not-divisible-by-pipeline"
SEVERITY = "error"


def _problem(layers: int, pipeline: int) -> tuple[str, str] | None:
    if pipeline <= 1 or layers % pipeline == 0:
        return None
    working = [p for p in range(2, min(layers, 4096) + 1) if layers % p == 0][:8]
    message = (
        f"{layers} layers do not split over pipeline {pipeline}: stages would hold "
        f"{layers // pipeline} or {layers // pipeline + 1} layers"
        if layers >= pipeline
        else f"{layers} layers cannot fill pipeline {pipeline} (fewer layers than stages)"
    )
    fix = f"use a pipeline degree that divides {layers} ({', '.join(map(str, working)) if working else 'only 1'})"
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    layers = ctx.spec.model.layers
    phases = ctx.plan.phases
    own, global_names = split_by_override(ctx, overrides_parallelism("pipeline"))
    for p in own:
        problem = _problem(layers, p.settings.parallelism.pipeline)
        if problem:
            yield ctx.finding(
                f"phases[{p.settings.index}].parallelism.pipeline", f"phase {p.name!r}: {problem[0]}", problem[1]
            )
    if global_names or not phases:
        problem = _problem(layers, ctx.spec.parallelism.pipeline)
        if problem:
            yield ctx.finding("parallelism.pipeline", f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


PASS = [{}, {"parallelism.pipeline": 4}, {"hardware.nodes": 3, "parallelism.pipeline": 3}]
FAIL = [
    case({"parallelism.pipeline": 8}, "error"),
    case({"phases[2].parallelism": {"pipeline": 8}}, "error"),
    case({"model.layers": 2, "parallelism.pipeline": 4}, "error"),
]
