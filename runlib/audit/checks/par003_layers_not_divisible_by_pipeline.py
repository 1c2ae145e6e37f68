"""PAR003: layers not divisible by the pipeline-parallel degree.

Why it matters:
    A pipeline gives each stage layers / pipeline transformer blocks. With a remainder some stages
    carry an extra block: Megatron-LM refuses it (arguments.py validate_args, num_layers %
    pipeline_model_parallel_size == 0, unless a custom layout is given) and where it runs, the
    slowest stage sets the pace of every stage and the memory estimate of the first stage is off.
    An uneven split is normal practice when it is stated: the first and last stages also hold the
    embedding and the output head, so they get fewer layers (Megatron-LM
    --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers; BLOOM: 70 layers over
    12 stages, 5 on the first and last; Llama 3.1 405B: 126 over 16, 7 on the first and last).
    parallelism.pipeline_first_stage_layers / pipeline_last_stage_layers state it, and the other
    stages must then share the rest evenly.

Flagged:
    model: {layers: 12}
    parallelism: {pipeline: 5}

Preferred:
    model: {layers: 12}
    parallelism: {pipeline: 4}        # 3 layers per stage

    # or, uneven on purpose:
    model: {layers: 70}
    parallelism: {pipeline: 12, pipeline_first_stage_layers: 5, pipeline_last_stage_layers: 5}

How to fix:
    Use a pipeline degree that divides the number of layers (the finding lists them), change the
    number of layers, or state the first/last stages' layers so that the middle stages split the
    rest evenly (the finding proposes a split when one exists).
"""

from collections.abc import Iterator

from runlib.audit.checks._shared import overrides_parallelism, split_by_override, who
from runlib.audit.registry import Context, Finding, case
from runlib.plan.layout import pipeline_stage_layers
from runlib.spec.models import ParallelismSpec

CODE = "PAR003"
NAME = "layers-not-divisible-by-pipeline"
SEVERITY = "error"


def _even_split(layers: int, pipeline: int) -> tuple[int, int] | None:
    """(first, last) stage layers, one short or one long of the middle stages' share, that split evenly."""
    if pipeline < 3:
        return None
    for delta in (-1, 1, -2, 2):
        for middle_share in (layers // pipeline, layers // pipeline + 1):
            edge = middle_share + delta
            if edge >= 1 and layers - 2 * edge == middle_share * (pipeline - 2):
                return edge, edge
    return None


def _problem(layers: int, par: ParallelismSpec) -> tuple[str, str] | None:
    pipeline = par.pipeline
    first, last = par.pipeline_first_stage_layers, par.pipeline_last_stage_layers
    if pipeline <= 1:
        return None
    stated = first is not None or last is not None
    if pipeline_stage_layers(layers, pipeline, first, last) is not None and (stated or layers % pipeline == 0):
        return None
    working = [p for p in range(2, min(layers, 4096) + 1) if layers % p == 0][:8]
    if stated:
        given = ", ".join(f"{n} on the {w} stage" for n, w in ((first, "first"), (last, "last")) if n is not None)
        message = (
            f"{layers} layers over pipeline {pipeline} with {given}: the other stages cannot share the rest evenly"
        )
    elif layers >= pipeline:
        message = (
            f"{layers} layers do not split over pipeline {pipeline}: stages would hold "
            f"{layers // pipeline} or {layers // pipeline + 1} layers"
        )
    else:
        message = f"{layers} layers cannot fill pipeline {pipeline} (fewer layers than stages)"
    fix = f"use a pipeline degree that divides {layers} ({', '.join(map(str, working)) if working else 'only 1'})"
    split = _even_split(layers, pipeline)
    if split:
        fix += (
            f", or state an uneven split: pipeline_first_stage_layers: {split[0]} and "
            f"pipeline_last_stage_layers: {split[1]} ({(layers - sum(split)) // (pipeline - 2)} on each other stage)"
        )
    return message, fix


def check(ctx: Context) -> Iterator[Finding]:
    layers = ctx.spec.model.layers
    phases = ctx.plan.phases
    own, global_names = split_by_override(ctx, overrides_parallelism("pipeline"))
    for p in own:
        problem = _problem(layers, p.settings.parallelism)
        if problem:
            yield ctx.finding(
                f"phases[{p.settings.index}].parallelism.pipeline", f"phase {p.name!r}: {problem[0]}", problem[1]
            )
    if global_names or not phases:
        problem = _problem(layers, ctx.spec.parallelism)
        if problem:
            yield ctx.finding("parallelism.pipeline", f"{who(global_names, len(phases))}: {problem[0]}", problem[1])


_STATED = {"parallelism.pipeline_first_stage_layers": 3, "parallelism.pipeline_last_stage_layers": 3}
PASS = [
    {},
    {"parallelism.pipeline": 4},
    {"hardware.nodes": 3, "parallelism.pipeline": 3},
    {"parallelism.pipeline": 5, **_STATED},  # 3 + 2 + 2 + 2 + 3 (BLOOM's and Llama 3.1 405B's shape)
    {"parallelism.pipeline": 2, "parallelism.pipeline_first_stage_layers": 5},  # 5 + 7
]
FAIL = [
    case({"parallelism.pipeline": 5}, "error"),  # 12 over 5 unstated
    case({"parallelism.pipeline": 5, **_STATED, "parallelism.pipeline_last_stage_layers": 4}, "error"),  # 5 over 3
    case(
        {
            "parallelism.pipeline": 4,
            "parallelism.pipeline_first_stage_layers": 6,
            "parallelism.pipeline_last_stage_layers": 6,
        },
        "error",
    ),  # empty middle
    case({"parallelism.pipeline": 8}, "error"),
    case({"phases[2].parallelism": {"pipeline": 8}}, "error"),
    case({"model.layers": 2, "parallelism.pipeline": 4}, "error"),
]
