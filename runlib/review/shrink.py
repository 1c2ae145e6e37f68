"""`runlib shrink SPEC`: the same run, scaled down until its whole DAG runs on this machine in ~N minutes.

Kept (the run's structure): the sources with their domains and curation, every phase with its kind and
mixture, the packing and boundary policy, the loss normalization, FIM, the tokenizer's options (digit
splitting, reserved, domain and dropped tokens), the schedule's kind and shape in percent of the run,
the floor, a multistep schedule's levels (at the same percent of the run), the batch ramp's shape (each
stage's batch relative to the largest, at the same percent of the run; a linear ramp's start and increment
relative to the steady batch, over the same share), the block's structure (activation, norm and its bias,
parallel block, embedding norm, dropout), each phase's optimizer changes, the optimizer, the sharding kind
and the recomputation, the checkpoint and spike policies, the evaluation tasks that run offline, and a
scaling ladder (its widths in the same ratio to d_model).

Scaled down: the model (2 x 64 below 10 minutes, the demo's 4 x 128 from 10), the vocabulary (1,024 ids),
the context (128 tokens for the first phase, later phases in the same ratio), the tokens (from the
minutes and a measured CPU rate, below), the batch (micro-batch 4 on each of 2 processes), the hardware
(one CPU node, 2 devices), the held-out set, the evaluation and the checkpoint cadence (in steps).

Replaced: a file source whose files are not here by a builtin stand-in of the same domain (code: the
standard library's code; math and synthetic text: seeded arithmetic; prose: Python's documentation), a
pretrained tokenizer by a trained one, a precision the CPU cannot run by fp32, tensor/pipeline/context
parallelism by 1 (runlib cannot enact them on a CPU: RUN001-RUN003), offload by none (RUN005), fp16
gradients by fp32 (RUN009), Transformer-XL relative positions by ALiBi (RUN008), the planning-only layout
fields (eager attention, uneven pipeline stages, no sequence parallelism) by the defaults the trainer
enacts, an lm-eval task that downloads its data or whose task file is not here by runlib's shipped
held-out task (runlib's own multiple_choice if lm-eval cannot score the shrunk model). The shrunk spec
says each replacement in comments, and passes the workflow's gate (no RUN finding). `audit.ignore` keeps the entries that still silence a
finding of the shrunk spec (others would be stale: AUDIT001), and names shrink for the findings its own
choices raise (SHRINK_CHOICES: 20 held-out documents, the published LR and memory policy at a tiny scale);
a pretrained tokenizer's few special tokens become TOK004's minimum of reserved ones.

Declared: each source's tokens are what the documents the shrunk run curates hold (runlib.review.standins),
so the audit's epochs before the run are the ones tokenizing measures (MIX003 sees the repetition).
Stated: the wall time as a range with its basis (wall_minutes), and the Snakemake commands that run and
export the shrunk spec from the user's directory (runlib.store.command).

The phases' shares are the published ones, except that every phase gets at least MIN_PHASE_STEPS steps
(OLMo 2's 50B-token anneal is 1.3% of its run); the WSD decay stays aligned with the phases it covered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runlib.audit import audit
from runlib.errors import UserError
from runlib.plan import Plan, derive
from runlib.review.shrinking.data import data_section
from runlib.review.shrinking.evaluation import checkpoint_section, eval_section, ladder_section, monitor_section
from runlib.review.shrinking.ignores import SHRINK_CHOICES, ignores_section
from runlib.review.shrinking.output import Shrunk, to_yaml
from runlib.review.shrinking.shape import (
    DEVICES,
    FP32,
    choose_shape,
    machine_notes,
    model_section,
    parallelism_section,
    tokenizer_section,
)
from runlib.review.shrinking.timeline import (
    CONSTANT,
    MIN_PHASE_STEPS,
    batch_section,
    run_tokens,
    schedule_section,
    shrunk_phases,
)
from runlib.spec import LoadedSpec, RunSpec, load_spec, validate_data
from runlib.spec.units import Duration
from runlib.store.command import snakemake_command

MAX_MINUTES = 7 * 24 * 60
"""--minutes at most a week: the stand-in run is sized for this machine, a week of it is far past any test."""
# The wall time shrink states is a range, not the --minutes it sized the run for. Training: the run's tokens
# at the rates of its shape on 2 cores, slowest to fastest. SMALL: 2,150 tokens/s measured on a busy machine
# (runlib.review.shrinking.shape) to the assumed 6,000. DEMO: 3,500 (the foundation phase's earlier README
# figure) to 5,964, the training step alone (README, `python -m runlib.bench.train_step`; the demo's
# foundation phase ran at ~5,800 on 2 quiet cores, 2026-12-01). The other stages (curation, tokenizer,
# tokenizing, evaluation, report, each job's start): 0.5-4 minutes. Measured: the 10-minute shrink of OLMo 2
# 7B ran in 4 minutes in all (~1M tokens, so at most ~1 minute besides training); curation, the tokenizer
# and tokenizing of its nine stand-ins took 4.3 minutes on 2 cores shared with five other jobs.
RATES_TOKENS_PER_S = {"SMALL": (2_150, 6_000), "DEMO": (3_500, 5_964)}
OTHER_STAGES_MIN = (0.5, 4.0)


def _check_minutes(minutes: float) -> None:
    if not 0 < minutes <= MAX_MINUTES:  # inf was a traceback, 1e300 a spec of 10^300 tokens
        raise UserError(
            f"runlib shrink --minutes {minutes:g}: give a number of minutes above 0 and at most {MAX_MINUTES:,} "
            "(a week: shrink sizes a run for this machine)"
        )


def shrink(loaded: LoadedSpec, minutes: float = 10.0) -> Shrunk:
    """The shrunk spec's data and its comments (pure but for the glob of file sources), section by section
    in the spec's key order; the header's comments in the order the sections are shrunk."""
    _check_minutes(minutes)
    spec = loaded.spec
    plan = derive(spec)
    if not plan.phases or not plan.tokens_total:
        raise UserError(f"{loaded.source_map.file}: the spec has no training tokens to shrink")
    shape = choose_shape(minutes)
    header = [
        f"Shrunk by `runlib shrink {loaded.source_map.file} --minutes {minutes:g}` from {spec.name}: the run's "
        "structure, scaled to run end to end on 2 CPU cores.",
        f"hardware: {spec.hardware.nodes} x {spec.hardware.devices_per_node} {spec.hardware.accelerator} -> "
        f"1 x {DEVICES} cpu",
    ]
    model, notes = model_section(spec, shape)
    header += notes
    tokenizer, notes = tokenizer_section(spec, dict(spec.phases[0].mixture))
    header += notes
    phases = shrunk_phases(spec, plan, shape, minutes)
    header.append(phases.note)
    batch, ramp_fractions, notes = batch_section(spec, plan)
    header += notes
    data: dict[str, Any] = {
        "name": f"{spec.name}-shrunk"[:100],
        "description": f"{spec.name} shrunk to run on 2 CPU cores, sized for ~{minutes:g} minutes (runlib shrink)",
        "seed": spec.seed,
        "hardware": {"accelerator": "cpu", "nodes": 1, "devices_per_node": DEVICES, "mfu": 0.1},
        "model": model,
        "tokenizer": tokenizer,
    }
    # the run's tokens: derived below from the phases in steps; a first estimate for the sources' declared tokens
    data["data"], source_notes, notes = data_section(spec, plan, phases.estimate)
    header += notes
    data["parallelism"] = parallelism_section(spec.parallelism)
    header += machine_notes(spec)
    data["batch"] = batch
    data["optimizer"] = spec.optimizer.model_dump(mode="json")
    data["schedule"] = dict(CONSTANT)  # set from the shrunk timeline (_finish)
    data["precision"] = dict(FP32)
    data["tokens"] = phases.estimate
    data["phases"] = phases.entries
    data["checkpoint"] = checkpoint_section(spec, phases.total_steps)
    data["monitor"] = monitor_section(spec, phases.total_steps)
    data["eval"], task_notes = eval_section(spec, data["data"]["heldout_docs"], model)
    if spec.tracking.experiment:
        data["tracking"] = {"experiment": f"{spec.tracking.experiment}-shrunk"[:100]}
    header += _finish(spec, plan, data, ramp_fractions)
    return Shrunk(data, header, source_notes, task_notes)


def _finish(spec: RunSpec, plan: Plan, data: dict[str, Any], ramp_fractions: list[float]) -> list[str]:
    """What needs the whole shrunk timeline: the exact tokens (a ramp's thresholds placed), the schedule,
    the ladder and audit.ignore, set in `data`; the header's ladder comment."""
    data["tokens"] = run_tokens(data, ramp_fractions)
    data["schedule"] = schedule_section(spec, plan, data)
    notes: list[str] = []
    if spec.ladder is not None:
        ladder, notes = ladder_section(spec, plan, data)
        if ladder is not None:
            data["ladder"] = ladder
    ignore = ignores_section(spec, data)
    if ignore:
        data["audit"] = {"ignore": ignore}
    return notes


# ------------------------------------------------------------------------------------------ output


def _rates(minutes: float) -> tuple[int, int]:
    return RATES_TOKENS_PER_S["DEMO" if minutes >= 10 else "SMALL"]


def wall_minutes(tokens: int, minutes: float) -> tuple[float, float]:
    """The shrunk run's wall time on 2 CPU cores as a range (RATES_TOKENS_PER_S, OTHER_STAGES_MIN)."""
    slow, fast = _rates(minutes)
    return tokens / fast / 60 + OTHER_STAGES_MIN[0], tokens / slow / 60 + OTHER_STAGES_MIN[1]


def shrink_file(path: str | Path, minutes: float = 10.0, out: str = "SHRUNK.yaml") -> tuple[str, str]:
    """The shrunk spec's YAML text, and a summary for stderr: what it holds, its audit's counts, the time it
    takes, and the commands that run and export it from the current directory (`out`: where it is written)."""
    loaded = load_spec(path)
    shrunk = shrink(loaded, minutes)
    text = to_yaml(shrunk)
    check = validate_data(shrunk.data)
    result = audit(check.spec)
    plan = result.plan
    stand_ins = sum(note.startswith("stand-in:") for note in shrunk.source_notes.values())
    low, high = wall_minutes(plan.tokens_total, minutes)
    slow, fast = _rates(minutes)
    export = f"exports/{check.spec.name}/{check.spec.phases[-1].name}"
    summary = (
        f"wrote {out}: {plan.params.total:,} parameters, {plan.tokens_total:,} tokens in {plan.steps_total} steps over "
        f"{len(plan.phases)} phases, {stand_ins} stand-in source(s); audit: "
        f"{result.count('error')} error(s), {result.count('warning')} warning(s)\n"
        f"time: ~{low:.0f}-{high:.0f} min on 2 CPU cores (training at {slow:,}-{fast:,} tokens/s for this model size, "
        f"and {OTHER_STAGES_MIN[0]:g}-{OTHER_STAGES_MIN[1]:g} min for the data stages, evaluation and job starts; "
        "the basis: runlib/review/shrink.py RATES_TOKENS_PER_S)\n"
        f"run it:    {snakemake_command(out)}\n"
        f"export it: {snakemake_command(out, targets=[export])}"
    )
    return text, summary


__all__ = [
    "MAX_MINUTES",
    "MIN_PHASE_STEPS",
    "RATES_TOKENS_PER_S",
    "SHRINK_CHOICES",
    "Duration",
    "Shrunk",
    "shrink",
    "shrink_file",
    "to_yaml",
    "wall_minutes",
]
