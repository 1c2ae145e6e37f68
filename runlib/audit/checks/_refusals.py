"""The RUN checks' common body: runlib.plan.enact's refusals of one code, as findings at the spec's paths.

A refusal of a parallelism value is checked on each phase's effective settings: reported at the
phase's path when the phase overrides the value, else once at the global path, naming the phases.
RUN findings are warnings in `runlib audit` (a published spec may name a layout the trainer does
not enact and still audit clean), and the workflow gate refuses a spec with any of them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from runlib.audit.checks._shared import overrides_parallelism, who
from runlib.audit.registry import Context, Finding
from runlib.plan.derive import PhasePlan
from runlib.plan.enact import Refusal, precision_refusals
from runlib.plan.layout import build_layout
from runlib.spec.models import ParallelismSpec

REFUSED = "; the runner refuses it: the workflow gate starts no job while this finding stands"


def _parallelism(
    ctx: Context,
    par: ParallelismSpec,
    seq_len: int,
    micro_batches: Collection[int] = (),
    machines: tuple[int, int] | None = None,
) -> list[Refusal]:
    """machines: the phase's (nodes, devices_per_node), by default the run's."""
    hw = ctx.spec.hardware
    nodes, per_node = machines or (hw.nodes, hw.devices_per_node)
    layout = build_layout(par, nodes=nodes, devices_per_node=per_node)
    return layout.refusals(hw.accelerator, ctx.spec.model, seq_len, micro_batches=micro_batches)


def _micro_batches(p: PhasePlan) -> set[int]:
    """The micro-batches per step a phase takes: its grad_accum, and under a batch ramp each segment's
    sequences over micro_batch x data-parallel (runlib.train.step: the loader's batch over the same)."""
    s = p.settings
    per = s.seq_len * s.micro_batch * s.data_parallel
    return {s.grad_accum} | {max(1, seg.tokens_per_step // per) for seg in p.span.segments}


# the refusals of the last plan audited, shared by the seven RUN checks (computed once, not seven times);
# holding the plan keeps its id from being reused while it is the key
_last: tuple[object, list[list[Refusal]]] = (None, [])


def _phase_refusals(ctx: Context) -> list[list[Refusal]]:
    global _last
    if _last[0] is not ctx.plan:
        _last = (
            ctx.plan,
            [
                _parallelism(
                    ctx,
                    p.settings.parallelism,
                    p.settings.seq_len,
                    _micro_batches(p),
                    (p.settings.nodes, p.settings.devices_per_node),
                )
                for p in ctx.plan.phases
            ],
        )
    return _last[1]


def refusal_findings(ctx: Context, code: str) -> Iterator[Finding]:
    spec = ctx.spec
    phases = ctx.plan.phases
    global_hits: dict[tuple[str, str, str], list[str]] = {}  # (field, reason, fix) -> phases using the global value
    for p, refusals in zip(phases, _phase_refusals(ctx), strict=True):
        for r in refusals:
            if r.code != code:
                continue
            name = r.field.split(".", 1)[1]
            if overrides_parallelism(name)(p.settings.phase) or p.settings.phase.hardware is not None:
                yield ctx.finding(f"{p.settings.path}.{r.field}", f"phase {p.name!r}: {r.reason}{REFUSED}", r.fix)
            else:
                global_hits.setdefault((r.field, r.reason, r.fix), []).append(p.name)
    if not phases:
        for r in _parallelism(ctx, spec.parallelism, spec.model.seq_len):
            if r.code == code:
                global_hits.setdefault((r.field, r.reason, r.fix), [])
    for (field, reason, fix), names in global_hits.items():
        yield ctx.finding(field, f"{who(names, len(phases))}: {reason}{REFUSED}", fix)
    precision = spec.precision
    others = precision_refusals(
        compute=precision.compute, master_weights=precision.master_weights, optimizer_states=precision.optimizer_states
    )
    for r in others:
        if r.code == code:
            yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)
