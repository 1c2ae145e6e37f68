"""SCHED010: a phase's optimizer.lr_scale takes its learning rate above the run's peak.

Why it matters:
    optimizer.lr is the peak the schedule is tuned around; a phase's lr_scale multiplies the
    schedule within that phase. Published runs scale it down: OPT-175B lowered its LR after
    divergences (arXiv 2205.01068 §2.5), and a continued phase re-warms at most to the original
    peak (Ibrahim et al. 2024, arXiv 2403.08763, §5). A factor above 1 trains that phase above any LR
    the run was tuned at (the instability SCHED008 warns of); a factor of 10 is the typo for 0.1
    that an anneal phase, which should end the run at the smallest LR, makes most easily. Late in a
    cosine run the schedule is far below the peak, so the typo can stay under it (Llama 3's last
    40M tokens sit at ~1% of the peak, arXiv 2407.21783 §3.4.3); an anneal raising the LR the
    schedule gives it is a warning there.

Flagged:
    optimizer: {lr: 3.0e-4}
    phases: [..., {name: anneal, kind: anneal, optimizer: {lr_scale: 10}}]   # 3e-3 in the anneal

Preferred:
    phases: [..., {name: anneal, kind: anneal, optimizer: {lr_scale: 0.1}}]

How to fix:
    Set the phase's lr_scale at or below 1 (drop it to follow the run's schedule); to raise the LR
    of the whole run, raise optimizer.lr and re-check SCHED008.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "SCHED010"
NAME = "phase-lr-above-peak"
SEVERITY = "error"
ERROR_FACTOR = 2.0  # above this many times the peak: beyond any re-warming; up to it, a warning
TOLERANCE = 1.001  # float rounding of a scale of exactly 1


def check(ctx: Context) -> Iterator[Finding]:
    peak, schedule = ctx.spec.optimizer.lr, ctx.plan.schedule
    if not peak > 0:
        return  # SCHED003
    for p in ctx.plan.phases:
        scale = p.settings.lr_scale
        if scale <= 1:
            continue
        # after warmup the schedule never rises: the phase's highest LR is at the warmup's end or its start
        start, end = p.span.start_tokens, p.span.end_tokens
        highest = scale * schedule.lr_at(min(max(start, schedule.warmup_tokens), end))
        is_anneal = p.settings.phase.kind == "anneal"
        if highest <= peak * TOLERANCE and not is_anneal:
            continue
        anneal = " (an anneal phase should end the run at its smallest LR)" if is_anneal else ""
        where = (
            f"{highest / peak:.3g}x the run's peak optimizer.lr {peak:.3g}"
            if highest > peak * TOLERANCE
            else f"{scale:g}x what the schedule gives it there ({highest / scale:.3g})"
        )
        yield ctx.finding(
            f"{p.settings.path}.optimizer.lr_scale",
            f"phase {p.name!r}: optimizer.lr_scale {scale:g} takes its LR to {highest:.3g}, {where}{anneal}",
            f"set phases[{p.settings.index}].optimizer.lr_scale at or below 1 (was 0.1 meant?), or raise optimizer.lr "
            "for the whole run",
            value=1.0 / scale if scale >= 10 else 1.0,
            severity="error" if highest > ERROR_FACTOR * peak else "warning",
        )


PASS = [
    {},
    {"phases[3].optimizer": {"lr_scale": 0.1}},
    {"phases[3].optimizer": {"lr_scale": 1.0}},
    # a cosine schedule is at 0.1 of its peak by the last phase: 2x of that stays below the peak
    {"schedule.kind": "cosine", "schedule.decay": "__delete__", "phases[2].optimizer": {"lr_scale": 2.0}},
]
FAIL = [
    case({"phases[3].optimizer": {"lr_scale": 10}}, "error"),
    case({"phases[1].optimizer": {"lr_scale": 1.5}}, "warning"),  # the enrichment phase runs at the peak
    # an anneal late in a cosine run: 2x stays below the peak, but raises what an anneal should lower
    case(
        {"schedule.kind": "cosine", "schedule.decay": "__delete__", "phases[3].optimizer": {"lr_scale": 2.0}}, "warning"
    ),
]
