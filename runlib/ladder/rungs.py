"""The rungs of a scaling ladder: the target spec at smaller widths and token counts (spec `ladder`).

Shape rule (LadderSpec's docstring): a rung of width w keeps the target's aspect ratio d_model / layers,
its head_dim, its query-to-key/value head ratio and its d_ff / d_model:

    heads = w / head_dim,  kv_heads = heads / (target heads / target kv_heads),
    layers = max(1, round(w / (target d_model / target layers))),  d_ff = round(w * target d_ff / target d_model)

Tokens: tokens_per_param k gives D = k * N (N: non-embedding parameters, Kaplan et al. 2020's N);
compute_flops C gives D = C / (the rung's training FLOPs per token, runlib.plan.flops). Every phase keeps
its fraction of the target's tokens (whole optimizer steps of the target's batch, at least one), so a
rung runs the target's phases, mixtures and schedule shape: the warmup and a decay end at the same
relative position of the same phase (their token positions are mapped phase by phase), and the
checkpoint, evaluation and logging intervals scale with the rung's tokens.

Pure: rung specs come from the target spec and its plan alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from runlib.errors import UserError
from runlib.plan import Plan, derive
from runlib.plan.params import head_dim, kv_heads
from runlib.spec.models import LadderSpec, ModelSpec, RunSpec
from runlib.spec.units import Duration


@dataclass(frozen=True)
class Rung:
    name: str  # e.g. "w64-tpp20" or "w64-c3e12": names its stages' instances
    width: int
    layers: int
    spec: RunSpec
    plan: Plan
    params: int  # non-embedding parameters: the fit's N
    params_total: int
    tokens: int  # the fit's D
    flops: float  # training FLOPs of the whole rung (the plan's, attention included)
    held_out: bool = False  # kept out of the fit: its measured loss tests the prediction


@dataclass(frozen=True)
class Ladder:
    rungs: list[Rung]
    skipped: list[str]  # rungs left out, each with its reason


def _field(name: str) -> str:
    return f"ladder.{name}"


def rung_model(model: ModelSpec, width: int) -> ModelSpec:
    """The target's block at d_model = width (the shape rule of the module docstring)."""
    hd = head_dim(model)
    if width % hd:
        raise UserError(
            f"{_field('widths')}: {width} is not a multiple of the target's head_dim {hd} (heads = width / head_dim); "
            f"use e.g. {max(hd, width // hd * hd)} or {(width // hd + 1) * hd}"
        )
    heads = width // hd
    group = model.heads // kv_heads(model)
    kv = max(1, heads // group)
    while heads % kv:  # the nearest smaller divisor keeps GQA's layout
        kv -= 1
    aspect = model.d_model / model.layers
    layers = max(1, round(width / aspect))
    d_ff = max(1, round(width * model.d_ff / model.d_model))
    update = {"d_model": width, "heads": heads, "kv_heads": kv if model.kv_heads is not None else None}
    update.update({"layers": layers, "d_ff": d_ff})
    return model.model_copy(update=update)


def _phase_map(target: Plan, rung_phase_tokens: list[int]) -> Callable[[float], float]:
    """A token position of the target's run -> the same relative position in the rung's phases."""
    starts = [0]
    for t in rung_phase_tokens:
        starts.append(starts[-1] + t)

    def mapped(position: float) -> float:
        for i, p in enumerate(target.phases):
            if position <= p.span.end_tokens or i == len(target.phases) - 1:
                fraction = (position - p.span.start_tokens) / p.span.tokens if p.span.tokens else 0.0
                return starts[i] + min(max(fraction, 0.0), 1.0) * rung_phase_tokens[i]
        return float(starts[-1])

    return mapped


def _tokens(amount: float) -> Duration:
    return Duration(float(max(1, round(amount))), "tokens")


def rung_spec(target: RunSpec, plan: Plan, model: ModelSpec, tokens: float) -> RunSpec:
    """The target spec with `model` trained for about `tokens` tokens, phase fractions kept."""
    total = plan.tokens_total or 1
    phase_tokens = []
    for p in plan.phases:
        step = p.tokens_per_step
        phase_tokens.append(max(1, round(tokens * p.tokens / total / step)) * step)
    run_tokens = sum(phase_tokens)
    mapped = _phase_map(plan, phase_tokens)
    scale = run_tokens / total

    def scaled(d: Duration | None) -> Duration | None:
        return None if d is None else _tokens(plan.duration_tokens(d) * scale)

    decay = None
    if plan.decay_tokens is not None and target.schedule.kind == "wsd":  # the run's last decay tokens
        decay = _tokens(run_tokens - mapped(plan.tokens_total - plan.decay_tokens))
    elif plan.decay_tokens is not None:  # cosine, linear: the decay after the warmup
        decay = _tokens(mapped(plan.warmup_tokens + plan.decay_tokens) - mapped(plan.warmup_tokens))
    schedule = target.schedule.model_copy(update={"warmup": _tokens(mapped(plan.warmup_tokens)), "decay": decay})
    phases = [
        ph.model_copy(update={"tokens": Duration(float(t), "tokens")})
        for ph, t in zip(target.phases, phase_tokens, strict=True)
    ]
    monitor = target.monitor.model_copy(
        update={"eval_every": scaled(target.monitor.eval_every), "log_every": scaled(target.monitor.log_every)}
    )
    if target.monitor.spike is not None and target.monitor.spike.rollback is not None:
        monitor = monitor.model_copy(
            update={
                "spike": target.monitor.spike.model_copy(update={"rollback": scaled(target.monitor.spike.rollback)})
            }
        )
    checkpoint = target.checkpoint.model_copy(update={"every": scaled(target.checkpoint.every)})
    # a rung needs its held-out loss only: no tasks, the last phase alone
    evaluation = target.eval.model_copy(update={"after_each_phase": False, "tasks": []})
    return target.model_copy(
        update={
            "model": model,
            "tokens": run_tokens,
            "phases": phases,
            "schedule": schedule,
            "monitor": monitor,
            "checkpoint": checkpoint,
            "eval": evaluation,
            "ladder": None,
            "budget": target.budget.model_copy(update={"gpu_hours": None, "days": None, "flops": None}),
        }
    )


def _label(value: float) -> str:
    """20 -> '20', 2.5 -> '2.5', 2e12 -> '2e12' (a rung's name: lowercase, no '+')."""
    return f"{value:.3g}".replace("+", "")


def ladder_rungs(target: RunSpec, plan: Plan | None = None) -> Ladder:
    """Every rung of the target's ladder (none without a ladder section), held-out rungs marked."""
    ladder: LadderSpec | None = target.ladder
    if ladder is None:
        return Ladder([], [])
    if target.batch.ramp:
        raise UserError(
            f"{_field('widths')}: a ladder scales each phase's tokens, which a batch ramp's thresholds do not follow; "
            "remove batch.ramp from the target while it has a ladder (or give the ramp's final batch)"
        )
    if (ladder.tokens_per_param is None) == (ladder.compute_flops is None):
        raise UserError(
            f"{_field('tokens_per_param')}: give tokens_per_param (e.g. [10, 20, 40]) or compute_flops "
            "(e.g. [1e12, 3e12, 1e13]), exactly one of them"
        )
    plan = plan or derive(target)
    rungs: list[Rung] = []
    skipped: list[str] = []
    for width in sorted(set(ladder.widths)):
        model = rung_model(target.model, width)
        provisional = derive(rung_spec(target, plan, model, plan.tokens_total))
        n = provisional.params.non_embedding
        per_token = provisional.flops_total / provisional.tokens_total if provisional.tokens_total else math.inf
        if ladder.tokens_per_param is not None:
            wanted = [(f"w{width}-tpp{_label(k)}", k * n) for k in ladder.tokens_per_param]
        else:
            wanted = [(f"w{width}-c{_label(c)}", c / per_token) for c in ladder.compute_flops or []]
        for name, tokens in wanted:
            spec = rung_spec(target, plan, model, tokens)
            rung_plan = derive(spec)
            if rung_plan.steps_total < ladder.min_steps:
                skipped.append(
                    f"{name}: {rung_plan.steps_total} steps of the target's batch, under ladder.min_steps "
                    f"{ladder.min_steps}"
                )
                continue
            rungs.append(
                Rung(
                    name,
                    width,
                    model.layers,
                    spec,
                    rung_plan,
                    rung_plan.params.non_embedding,
                    rung_plan.params.total,
                    rung_plan.tokens_total,
                    rung_plan.flops_total,
                )
            )
    by_compute = sorted(rungs, key=lambda r: (r.flops, r.name))
    held = {r.name for r in by_compute[len(by_compute) - ladder.holdout :]} if ladder.holdout else set()
    rungs = [Rung(**{**r.__dict__, "held_out": r.name in held}) for r in rungs]
    fitted = [r for r in rungs if not r.held_out]
    if len(fitted) < 5 or len({r.params for r in fitted}) < 2 or len({r.tokens / r.params for r in fitted}) < 2:
        raise UserError(
            f"{_field('widths')}: the fit of E, A, B, alpha and beta needs at least 5 fitted rungs over 2 or more "
            f"sizes and 2 or more tokens per parameter; this ladder has {len(fitted)} fitted "
            f"({len(rungs)} rungs, {ladder.holdout} held out, {len(skipped)} under min_steps); add widths or "
            "token multipliers"
        )
    return Ladder(rungs, skipped)
