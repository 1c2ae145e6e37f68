"""`runlib shrink`'s timeline: the phases in whole steps at their published shares (each at least
MIN_PHASE_STEPS), the batch ramp's shape at the same percent of the run (its thresholds placed by
fit_ramp), and the schedule's warmup, decay and levels in percent of the shrunk run."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from runlib.plan import Plan, derive
from runlib.plan.timeline import ramp_points
from runlib.review.shrinking.shape import DEVICES, MICRO_BATCH, TRAIN_SHARE, parallelism_section
from runlib.spec import RunSpec, validate_data
from runlib.spec.models import PhaseBranch, PhaseSpec

MIN_PHASE_STEPS = 4
MAX_SEQ_LEN = 1024
RAMP_ACCUM = 4  # micro-batches per rank of a ramp's largest batch: a ramp keeps ratios down to 1/4
FIT_ITERATIONS = 64  # bound of the bisection that places a ramp's thresholds (fit_ramp): each is one derive
CONSTANT = {"kind": "constant", "warmup": "0%"}  # the schedule while the timeline is measured


def pct(part: float, whole: float) -> str:
    """A percentage for a Duration field, with enough digits to land on the same token."""
    return f"{100.0 * part / whole:.12g}%" if whole else "0%"


def base_grad_accum(spec: RunSpec) -> int:
    """The shrunk run's micro-batches per rank: 2 if the published run accumulates, else 1."""
    return 2 if spec.batch.grad_accum > 1 else 1


@dataclass(frozen=True)
class ShrunkPhases:
    entries: list[dict[str, Any]]  # the shrunk spec's `phases`
    steps: list[int]  # steps per phase
    tokens_per_step: list[int]  # per phase, at the largest batch of a ramp
    note: str  # the header's line

    @property
    def estimate(self) -> int:
        """The run's tokens before the ramp's thresholds are placed (a first estimate for the sources)."""
        return sum(s * tps for s, tps in zip(self.steps, self.tokens_per_step, strict=True))

    @property
    def total_steps(self) -> int:
        return sum(self.steps)


def seq_len_exponent(spec: RunSpec, seq0: int) -> float:
    """The power the phases' context ratios are raised to: 1 (the published ratios) unless the longest phase
    would pass MAX_SEQ_LEN, then less, so that it lands on MAX_SEQ_LEN and every longer phase stays longer
    (SmolLM3's 4k -> 32k -> 64k stages: 256 -> 724 -> 1024, where a cap alone made the last two equal)."""
    longest = max([p.seq_len or spec.model.seq_len for p in spec.phases] + [spec.model.seq_len])
    ratio = longest / spec.model.seq_len
    if ratio <= 1 or seq0 * ratio <= MAX_SEQ_LEN or seq0 >= MAX_SEQ_LEN:
        return 1.0
    return math.log(MAX_SEQ_LEN / seq0) / math.log(ratio)


def branch_entry(spec: RunSpec, branch: PhaseBranch, seq0: int) -> dict[str, Any]:
    """One branch of the last phase: its mixture and seed; its seq_len as a phase's (its tokens and decay are
    set once the phase's steps are known: branch_steps)."""
    entry: dict[str, Any] = branch.model_dump(mode="json", exclude_none=True, include={"name", "mixture", "seed"})
    if branch.seq_len is not None:
        ratio = (branch.seq_len / spec.model.seq_len) ** seq_len_exponent(spec, seq0)
        entry["seq_len"] = min(MAX_SEQ_LEN, max(16, round(seq0 * ratio)))
    return entry


def branch_steps(plan: Plan, branches: list[PhaseBranch], entries: list[dict[str, Any]], phase_steps: int) -> None:
    """Each branch's tokens and decay in the shrunk run's steps, in their published ratio to the branched
    phase's tokens; a decay never longer than its branch (as published: the branch's run checks it)."""
    published = plan.phases[-1].span.tokens
    for branch, entry in zip(branches, entries, strict=True):
        length = phase_steps
        if branch.tokens is not None:
            length = max(1, round(phase_steps * plan.duration_tokens(branch.tokens) / published))
            entry["tokens"] = f"{length} steps"
        if branch.decay is not None:
            decay = max(1, round(phase_steps * plan.duration_tokens(branch.decay) / published))
            entry["decay"] = f"{min(decay, length)} steps"


def phase_entry(spec: RunSpec, plan: Plan, phase: PhaseSpec, seq0: int, grad_accum: int) -> dict[str, Any]:
    """One phase: the published kind and mixture; seq_len in the published ratio to the first phase's (raised
    to seq_len_exponent when the longest would pass MAX_SEQ_LEN)."""
    entry: dict[str, Any] = {"name": phase.name, "kind": phase.kind}
    entry["mixture"] = dict(phase.mixture)
    if phase.seq_len is not None:
        ratio = (phase.seq_len / spec.model.seq_len) ** seq_len_exponent(spec, seq0)
        entry["seq_len"] = min(MAX_SEQ_LEN, max(16, round(seq0 * ratio)))
    if phase.rope_theta is not None:
        entry["rope_theta"] = phase.rope_theta
    if phase.optimizer is not None:  # a phase's optimizer changes (LR, clip) are structure
        entry["optimizer"] = phase.optimizer.model_dump(mode="json", exclude_none=True)
    if phase.parallelism is not None:
        override = parallelism_section(phase.parallelism, override=True)
        if override:
            entry["parallelism"] = override
    if phase.batch is not None and (phase.batch.micro_batch or phase.batch.grad_accum):
        batch: dict[str, Any] = {}
        if phase.batch.micro_batch:
            batch["micro_batch"] = max(1, round(MICRO_BATCH * phase.batch.micro_batch / spec.batch.micro_batch))
        if phase.batch.grad_accum:
            batch["grad_accum"] = max(1, round(grad_accum * phase.batch.grad_accum / spec.batch.grad_accum))
        entry["batch"] = batch
    if phase.seed is not None:
        entry["seed"] = phase.seed
    if phase.branches:  # structure: each branch's data, and its length and decay as shares of the run
        entry["branches"] = [branch_entry(spec, b, seq0) for b in phase.branches]
    if phase.soup is not None:
        entry["soup"] = phase.soup.model_dump(mode="json", exclude_none=True)
    return entry


def shrunk_phases(spec: RunSpec, plan: Plan, shape: dict[str, int], minutes: float) -> ShrunkPhases:
    """The phases at their published shares of the tokens the minutes allow for training (TRAIN_SHARE)."""
    seq0 = shape["seq_len"]
    grad_accum = base_grad_accum(spec)
    # a ramp's largest stage accumulates RAMP_ACCUM micro-batches (ramp, linear_ramp): budget the steps at it
    ramped = bool(spec.batch.ramp) or spec.batch.linear_ramp is not None
    tokens_per_step = DEVICES * MICRO_BATCH * (RAMP_ACCUM if ramped else grad_accum) * seq0
    budget_tokens = shape["tokens_per_s"] * minutes * 60 * TRAIN_SHARE
    phases = []
    phase_tps = []
    for phase in spec.phases:
        entry = phase_entry(spec, plan, phase, seq0, grad_accum)
        phases.append(entry)
        batch_now = entry.get("batch", {})
        phase_tps.append(
            tokens_per_step
            * entry.get("seq_len", seq0)
            // seq0
            * batch_now.get("micro_batch", MICRO_BATCH)
            // MICRO_BATCH
            * batch_now.get("grad_accum", grad_accum)
            // grad_accum
        )
    phase_steps = steps(plan, budget_tokens, phase_tps)
    if spec.phases and spec.phases[-1].branches:
        branch_steps(plan, spec.phases[-1].branches, phases[-1]["branches"], phase_steps[-1])
    for entry, n in zip(phases, phase_steps, strict=True):
        entry["tokens"] = f"{n} steps"
        entry["mixture"] = entry.pop("mixture")  # keep the key order of a phase: name, kind, tokens, mixture
    note = "phases: " + ", ".join(
        f"{p.name} {p.steps:,} -> {s} steps" for p, s in zip(plan.phases, phase_steps, strict=True)
    )
    return ShrunkPhases(phases, phase_steps, phase_tps, note)


def steps(plan: Plan, budget_tokens: float, tokens_per_step: list[int]) -> list[int]:
    """Steps per phase: the published share of the run's tokens at the phase's shrunk tokens per step,
    each at least MIN_PHASE_STEPS."""
    shares = [p.tokens / plan.tokens_total for p in plan.phases]
    return [
        max(MIN_PHASE_STEPS, round(s * budget_tokens / tps)) for s, tps in zip(shares, tokens_per_step, strict=True)
    ]


def batch_section(spec: RunSpec, plan: Plan) -> tuple[dict[str, Any], list[float], list[str]]:
    """The shrunk batch (MICRO_BATCH on each of DEVICES ranks), a ramp's stages or a linear ramp with their
    thresholds still to place, where each threshold falls as a fraction of the run, and the header's line."""
    batch: dict[str, Any] = {"micro_batch": MICRO_BATCH, "grad_accum": base_grad_accum(spec)}
    ramp_fractions: list[float] = []  # where each ramp threshold falls, as a fraction of the run's tokens
    notes = []
    if spec.batch.ramp:
        stages, base_accum, ramp_fractions = ramp(spec, plan)
        batch["grad_accum"] = base_accum
        batch["ramp"] = stages
        notes.append("batch ramp: each stage's batch relative to the largest and its start in percent of the run, kept")
    elif spec.batch.linear_ramp is not None:
        batch["grad_accum"] = RAMP_ACCUM
        batch["linear_ramp"], over_fraction, note = linear_ramp(spec, plan)
        ramp_fractions = [over_fraction]
        notes.append(note)
    return batch, ramp_fractions, notes


def ramp(spec: RunSpec, plan: Plan) -> tuple[list[dict[str, Any]], int, list[float]]:
    """The ramp's stages, each batch in the published ratio to the largest as whole micro-batches (grad_accum
    of the largest stage: RAMP_ACCUM), their `after` filled in by fit_ramp; and where each stage starts, as
    a fraction of the run's tokens (the thresholds as the plan reads them: runlib.plan.timeline.ramp_points)."""
    seq = spec.model.seq_len
    points = ramp_points(spec)
    sizes = [batch.tokens(seq) for _, batch in points]
    base_tokens = spec.batch.micro_batch * spec.batch.grad_accum * plan.data_parallel * seq
    largest = max(sizes + [base_tokens])
    per_accum = DEVICES * MICRO_BATCH
    stages = []
    for tokens in sizes:
        accum = max(1, round(RAMP_ACCUM * tokens / largest))
        stages.append({"after": None, "global_batch": f"{per_accum * accum} sequences"})
    fractions = [min(1.0, threshold / plan.tokens_total) for threshold, _ in points]
    return stages, max(1, round(RAMP_ACCUM * base_tokens / largest)), fractions


def linear_ramp(spec: RunSpec, plan: Plan) -> tuple[dict[str, Any], float, str]:
    """Megatron's --rampup-batch-size (batch.linear_ramp) at the shrunk scale: start and increment in the
    published ratio to the steady batch, in whole micro-batches of the 2 ranks (so every level keeps a whole
    grad_accum: BATCH002), over the same fraction of the run (`over` filled in by fit_ramp)."""
    lr = spec.batch.linear_ramp
    assert lr is not None
    seq = spec.model.seq_len
    steady_tokens = spec.batch.micro_batch * spec.batch.grad_accum * plan.data_parallel * seq
    per_accum = DEVICES * MICRO_BATCH  # sequences of one micro-step on every rank
    steady = per_accum * RAMP_ACCUM
    increment = per_accum * max(1, round(steady * lr.increment.tokens(seq) / steady_tokens / per_accum))
    start = per_accum * max(1, round(steady * lr.start.tokens(seq) / steady_tokens / per_accum))
    start = min(start, steady - increment)  # at least one increment, as the published ramp has
    over_tokens = plan.duration_tokens(lr.over)
    out = {"start": f"{start} sequences", "increment": f"{increment} sequences", "over": None}
    note = (
        f"batch linear_ramp: {lr.start} + {lr.increment} -> {steady_tokens // seq:,} sequences over {lr.over} -> "
        f"{start} + {increment} -> {steady} sequences over the same share of the run (whole micro-batches)"
    )
    return out, min(1.0, over_tokens / plan.tokens_total), note


def with_thresholds(data: dict[str, Any], afters: list[str]) -> dict[str, Any]:
    """The spec data with the ramp's thresholds (batch.ramp[].after, or batch.linear_ramp.over) set."""
    batch = dict(data["batch"])
    if "ramp" in batch:
        batch["ramp"] = [{**stage, "after": a} for stage, a in zip(batch["ramp"], afters, strict=True)]
    else:
        batch["linear_ramp"] = {**batch["linear_ramp"], "over": afters[0]}
    return {**data, "batch": batch}


def derived_tokens(data: dict[str, Any]) -> int:
    """The run's tokens: the phases (in whole steps) on the shrunk timeline."""
    data = {**data, "schedule": dict(CONSTANT)}
    return derive(validate_data(data).spec).tokens_total


def run_tokens(data: dict[str, Any], ramp_fractions: list[float]) -> int:
    """The shrunk run's exact tokens, a ramp's thresholds placed first (fit_ramp)."""
    return fit_ramp(data, ramp_fractions) if ramp_fractions else derived_tokens(data)


def fit_ramp(data: dict[str, Any], fractions: list[float]) -> int:
    """Place the ramp's thresholds at their published fractions of the shrunk run; the run's tokens.

    The phases are whole steps, and a step's size depends on the ramp, whose thresholds in percent depend
    on the run's tokens: the run's tokens T must be a fixed point of T -> tokens of the phases with the
    thresholds at fraction x T (else PHASE001). That map falls as T grows (later thresholds: more small
    steps), so T is found by bisection. When no whole-step fixed point exists (a threshold lands between
    two steps either way), the thresholds are placed in tokens at their fractions of the bisection's T
    and written in percent of the resulting run, so the phases' tokens and the run's tokens match
    exactly; the shares then differ from the published ones by under a step's tokens."""

    def percent(f: float) -> str:
        return f"{100.0 * f:.10g}%"

    def total(tokens: int, afters: list[str]) -> int:
        return derived_tokens({**with_thresholds(data, afters), "tokens": max(1, tokens)})

    def at(tokens: int) -> int:
        return total(tokens, [percent(f) for f in fractions])

    lo = 1
    hi = at(lo)
    for _ in range(FIT_ITERATIONS):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        if at(mid) >= mid:
            lo = mid
        else:
            hi = mid
    for tokens in (lo, hi, at(lo), at(hi)):
        if at(tokens) == tokens:  # an exact fixed point: the published percentages as they are
            data.update(with_thresholds(data, [percent(f) for f in fractions]))
            return tokens
    thresholds = [
        max(1 if i == 0 and "linear_ramp" in data["batch"] else 0, round(f * hi)) for i, f in enumerate(fractions)
    ]
    run = total(hi, [f"{t} tokens" for t in thresholds])
    afters = [percent(t / run) for t in thresholds]
    if total(run, afters) != run:  # a percentage that does not round-trip: the thresholds in tokens
        afters = [f"{t} tokens" for t in thresholds]
    data.update(with_thresholds(data, afters))
    return run


def schedule_section(spec: RunSpec, plan: Plan, data: dict[str, Any]) -> dict[str, Any]:
    """Warmup and decay in percent of the run: the published shares; a decay that ended exactly on phase
    boundaries covers the same phases of the shrunk run."""
    s = spec.schedule
    out: dict[str, Any] = {"kind": s.kind, "warmup": pct(plan.warmup_tokens, plan.tokens_total)}
    if s.kind == "multistep":
        # the levels at the same share of the run (DeepSeek LLM: 80% and 90%, arXiv 2401.02954 section 2.3);
        # a level given in tokens or steps becomes its percent of the published run. multistep reads no
        # decay and no min_lr_ratio (ScheduleSpec): the last level is the floor
        out["lr_steps"] = [
            {
                "after": f"{x.after.amount:g}%"
                if x.after.unit == "percent"
                else pct(plan.duration_tokens(x.after), plan.tokens_total),
                "lr_ratio": x.lr_ratio,
            }
            for x in s.lr_steps or []
        ]
        return out
    if s.decay is not None:
        decay_tokens = plan.decay_tokens if s.kind == "wsd" else plan.duration_tokens(s.decay)
        out["decay"] = pct(decay_tokens or 0.0, plan.tokens_total)
        if s.kind == "wsd":
            new_plan = derive(validate_data({**data, "schedule": dict(CONSTANT)}).spec)
            tail_old, tail_new = 0.0, 0.0
            for old, new in zip(reversed(plan.phases), reversed(new_plan.phases), strict=True):
                tail_old += old.tokens
                tail_new += new.tokens
                if math.isclose(tail_old, decay_tokens or 0.0, rel_tol=1e-3):
                    out["decay"] = pct(tail_new, new_plan.tokens_total)
                    break
    out["min_lr_ratio"] = s.min_lr_ratio
    return out
