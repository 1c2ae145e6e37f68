"""PAR005: model parallelism, offload or activation checkpointing on although the phase fits without it.

Why it matters:
    Tensor, pipeline and context parallelism, optimizer offload and activation recomputation all
    trade throughput for memory: tensor and context parallelism add collectives to every layer,
    a pipeline adds bubbles, offload moves optimizer states over PCIe each step, and full
    recomputation runs the forward pass twice (about a third more compute; Korthikanti et al.
    2022, arXiv 2205.05198). When the phase fits in device memory without them, that throughput
    is lost for nothing. The memory model is runlib.plan.memory (ZeRO states, Korthikanti
    activations, logits, runtime overhead) against 90% of device memory, the MEM002 margin.

Flagged:
    # a 100M model on 80 GiB A100s, about 9 GiB per device without recomputation
    parallelism: {tensor: 1, activation_checkpointing: full}

Preferred:
    parallelism: {tensor: 1, activation_checkpointing: none}
    # or enable it only in the phase that needs it:
    # phases: [..., {name: long, parallelism: {activation_checkpointing: full}}]

How to fix:
    Drop the knobs the finding names (tensor/pipeline/context back to 1, offload: false,
    activation_checkpointing: none) for that phase; if only some phases need one, set it in those
    phases' parallelism overrides instead of globally. Selective recomputation is not flagged: it
    costs a few percent of throughput and saves more than this memory model shows on kernels
    without fused attention.
"""

import dataclasses
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case
from runlib.plan.effective import PhaseSettings
from runlib.plan.layout import planned_degrees
from runlib.plan.memory import phase_memory
from runlib.spec.models import ParallelismSpec

CODE = "PAR005"
NAME = "memory-saving-not-needed"
SEVERITY = "warning"
MEMORY_FRACTION = 0.9  # the MEM002 margin
GIB = 2**30
KNOBS = ("tensor", "pipeline", "context", "offload", "activation_checkpointing")
OFF = {"tensor": 1, "pipeline": 1, "context": 1, "offload": False, "activation_checkpointing": "none"}


def _enabled(par: ParallelismSpec) -> list[str]:
    # selective recompute is exempt: it recomputes only the attention core, a few percent of the
    # step, and the memory model (fused attention) cannot show what it saves on unfused kernels
    return [k for k in KNOBS if getattr(par, k) not in (OFF[k], "selective")]


def _describe(par: ParallelismSpec, knobs: list[str]) -> str:
    return ", ".join(f"{k}: {str(getattr(par, k)).lower()}" for k in knobs)


def check(ctx: Context) -> Iterator[Finding]:
    """Each phase's knobs that can go (together, else one at a time), grouped by path and knobs.

    Over 80 lines: the grouping of phases and the global/override split share its caches."""
    plan = ctx.plan
    limit = plan.accelerator.memory_gib * GIB * MEMORY_FRACTION
    if limit <= 0:
        return
    cache: dict[tuple[object, ...], float] = {}

    def memory_without(settings: PhaseSettings, knobs: list[str]) -> float:
        par = settings.parallelism
        key = (
            tuple(knobs),
            par.tensor,
            par.pipeline,
            par.context,
            par.sharding,
            par.offload,
            par.activation_checkpointing,
            settings.seq_len,
            settings.micro_batch,
            settings.grad_accum,
        )
        if key not in cache:
            new_par = par.model_copy(update={k: OFF[k] for k in knobs})
            data_parallel, model_parallel = planned_degrees(new_par, settings.devices)
            reduced = dataclasses.replace(
                settings, parallelism=new_par, model_parallel=model_parallel, data_parallel=data_parallel
            )
            mem = phase_memory(
                ctx.spec.model,
                ctx.spec.precision,
                plan.params,
                plan.vocab_rows,
                reduced,
                plan.accelerator.runtime_overhead_gib,
                reduced.nodes,
                accelerator=ctx.spec.hardware.accelerator,
            )
            cache[key] = mem.total
        return cache[key]

    # (path, knobs) -> [(phase index, phase name, bytes without them, whether only this change alone was tried)]
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, str, float, bool]]] = {}
    needed_in: dict[str, list[str]] = {}  # global knob -> phases (using it from the global layout) that need it
    for p in plan.phases:
        s = p.settings
        enabled = _enabled(s.parallelism)
        if not enabled:
            continue
        override = s.phase.parallelism
        from_phase = [k for k in enabled if override is not None and getattr(override, k) is not None]
        total = memory_without(s, enabled)
        if total <= limit:
            droppable = [(tuple(enabled), total)]
        else:
            droppable = []  # knobs that can go one at a time (not necessarily together)
            for k in enabled:
                alone = memory_without(s, [k])
                if alone <= limit:
                    droppable.append(((k,), alone))
                elif k not in from_phase:
                    needed_in.setdefault(k, []).append(p.name)
        alone_note = len(droppable) > 1
        for knobs, mem in droppable:
            prefix = f"phases[{s.index}].parallelism" if any(k in from_phase for k in knobs) else "parallelism"
            path = prefix + (f".{knobs[0]}" if len(knobs) == 1 else "")
            groups.setdefault((path, knobs), []).append((s.index, p.name, mem, alone_note))

    limit_gib = limit / GIB
    n_phases = len(plan.phases)
    for (path, knobs), members in groups.items():
        names = [m[1] for m in members]
        worst = max(m[2] for m in members) / GIB
        par = plan.phases[members[0][0]].settings.parallelism
        if n_phases > 1 and len(names) == n_phases:
            who = "all phases"
        else:
            who = ("phase " if len(names) == 1 else "phases ") + ", ".join(repr(n) for n in names)
        settings = ", ".join(f"{k}: {str(OFF[k]).lower()}" for k in knobs)
        message = (
            f"{who} {'runs' if len(names) == 1 else 'run'} with {_describe(par, list(knobs))} but would fit with {settings}"
            + (" (this change alone)" if any(m[3] for m in members) else "")
            + f": at most {worst:.1f} GiB per device against a limit of {limit_gib:.1f} GiB "
            f"(90% of {plan.accelerator.memory_gib:g} GiB), so the setting only costs throughput"
        )
        fix = f"set {settings}" + ("" if path.startswith("phases") else " in parallelism")
        still = (
            sorted({n for k in knobs for n in needed_in.get(k, [])} - set(names))
            if path.startswith("parallelism")
            else []
        )
        if still:
            fix += f", and enable it only in the phases that need it ({', '.join(repr(n) for n in still)}) through their parallelism overrides"
        value = OFF[knobs[0]] if len(knobs) == 1 else None
        yield ctx.finding(path, message, fix, value=value)


# micro_batch 40: about 54 GiB at 2048 tokens without recomputation, about 105 GiB at 4096 (the long
# phase), 59 GiB there with full recomputation: under the 72 GiB limit of an 80 GiB device
_LONG_NEEDS_IT = {
    "batch.micro_batch": 40,
    "batch.grad_accum": 1,
    "batch.global_batch": "640Ki tokens",
    "phases[2].batch": "__delete__",
}
PASS = [
    {"parallelism.activation_checkpointing": "selective"},
    {},
    {"parallelism.activation_checkpointing": "full", "hardware.memory_gib": 9},
    {**_LONG_NEEDS_IT, "phases[2].parallelism": {"activation_checkpointing": "full"}},
    {"parallelism.sharding": "fsdp"},
]
FAIL = [
    case({"parallelism.activation_checkpointing": "full"}, "warning"),
    case({"parallelism.tensor": 2}, "warning"),
    case({"parallelism.pipeline": 2}, "warning"),
    case({"parallelism.context": 2}, "warning"),
    case({"parallelism.offload": True, "parallelism.sharding": "zero1"}, "warning"),
    case({**_LONG_NEEDS_IT, "parallelism.activation_checkpointing": "full"}, "warning"),
]
