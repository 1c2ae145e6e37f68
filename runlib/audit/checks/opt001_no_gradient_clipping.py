"""OPT001: no gradient clipping.

Why it matters:
    Without a cap on the global gradient norm, one bad batch or an attention-logit blow-up turns
    into a huge update that can throw the weights into a region the run never recovers from (a loss
    spike that does not come back down). Clipping the global norm at 1.0 is the default in GPT-3
    (arXiv 2005.14165, App. B), Llama 2 (arXiv 2307.09288, §2.2), OLMo 2 (arXiv 2501.00656) and
    Megatron-LM (--clip-grad 1.0); it costs one norm per step.

    A phase that sets its own optimizer.grad_clip: 0 turns clipping off for that phase alone (OPT-175B
    lowered its clip mid-run, arXiv 2205.01068 §2.5; none turned it off).

Flagged:
    optimizer: {kind: adamw, lr: 3.0e-4, grad_clip: 0}     # or grad_clip: null
    phases: [{name: anneal, optimizer: {grad_clip: 0}}]     # one phase unclipped

Preferred:
    optimizer: {kind: adamw, lr: 3.0e-4, grad_clip: 1.0}

How to fix:
    Set optimizer.grad_clip to 1.0 (the common value); keep the clipped fraction of steps in the
    training log to see how often it acts.
"""

from collections.abc import Iterator

from runlib.audit.registry import DELETE, Context, Finding, case

CODE = "OPT001"
NAME = "no-gradient-clipping"
SEVERITY = "warning"
DEFAULT_CLIP = 1.0


def check(ctx: Context) -> Iterator[Finding]:
    clip = ctx.spec.optimizer.grad_clip
    if clip is None or clip == 0:
        stated = "is null" if clip is None else "is 0"
        yield ctx.finding(
            "optimizer.grad_clip",
            f"optimizer.grad_clip {stated}: the global gradient norm is never clipped, so a single bad batch can make an unbounded update",
            f"set optimizer.grad_clip: {DEFAULT_CLIP} (clip the global gradient norm to {DEFAULT_CLIP})",
            value=DEFAULT_CLIP,
        )
        return
    for p in ctx.plan.phases:
        own = p.settings.phase.optimizer
        if own is not None and own.grad_clip == 0:  # null: the run's value
            yield ctx.finding(
                f"{p.settings.path}.optimizer.grad_clip",
                f"phase {p.name!r}: optimizer.grad_clip 0 turns off the run's clipping at {clip:g} for "
                "this phase: a single bad batch in it can make an unbounded update",
                f"remove the phase's grad_clip, or set it to a value above 0 (the run's {clip:g}; OPT-175B lowered it to 0.3)",
                value=clip,
            )


PASS = [
    {},
    {"optimizer.grad_clip": DELETE},
    {"optimizer.grad_clip": 0.3},
    {"optimizer.grad_clip": 5.0},
    {"phases[3].optimizer": {"grad_clip": 0.3}},
    {"phases[3].optimizer": {"lr_scale": 0.5}},
]
FAIL = [
    case({"optimizer.grad_clip": 0}, "warning"),
    case({"optimizer.grad_clip": None}, "warning"),
    case({"phases[3].optimizer": {"grad_clip": 0}}, "warning"),
]
