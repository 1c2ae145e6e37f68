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
export the shrunk spec from the user's directory (runlib.workflow.command).

The phases' shares are the published ones, except that every phase gets at least MIN_PHASE_STEPS steps
(OLMo 2's 50B-token anneal is 1.3% of its run); the WSD decay stays aligned with the phases it covered.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlib.audit.checks.mix006_too_few_heldout_docs import MIN_DOCS as MIX006_DOCS
from runlib.audit.checks.tok004_reserved_tokens_out_of_range import LOW as RESERVED_LOW
from runlib.errors import UserError
from runlib.plan import Plan, derive
from runlib.review.standins import source_train_tokens
from runlib.spec import LoadedSpec, load_spec, validate_data
from runlib.spec.models import EvalTaskSpec
from runlib.spec.units import Duration

DEVICES = 2  # one training process per core of a 2-core machine
MICRO_BATCH = 4
MIN_PHASE_STEPS = 4
MAX_MINUTES = 7 * 24 * 60
"""--minutes at most a week: the stand-in run is sized for this machine, a week of it is far past any test."""
STAND_IN_DOCS = (
    150  # documents per stand-in source (measured: python_docs ~245K tokens, python_code ~880K, arithmetic ~46K)
)
HELDOUT_DOCS = 20
VOCAB_IDS = 1024
TRAIN_BYTES = 400_000
# Training tokens per second assumed for each shape on 2 cores with 2 gloo processes. DEMO: the README's
# measured rate of the demo's foundation phase (~3,500 tokens/s; runlib.bench.train_step measures ~5,900
# for the step alone). SMALL: an assumption, a fifth of the demo model's FLOPs per token; the one measured
# run (OLMo 2 7B shrunk for 2 minutes, on a 2-core machine shared with other jobs at load ~10) trained
# at ~2,150 tokens/s, so on a busy machine the run takes longer than asked. Half of the wall time is left
# to the data stages, the tokenizer, evaluation and each job's start.
SMALL = {"layers": 2, "d_model": 64, "heads": 4, "seq_len": 128, "tokens_per_s": 6_000}
DEMO = {"layers": 4, "d_model": 128, "heads": 4, "seq_len": 256, "tokens_per_s": 3_500}
TRAIN_SHARE = 0.5
# The wall time shrink states is a range, not the --minutes it sized the run for. Training: the run's tokens
# at the rates of its shape on 2 cores, slowest to fastest. SMALL: 2,150 tokens/s measured on a busy machine
# (above) to the assumed 6,000. DEMO: 3,500 (the foundation phase's earlier README figure) to 5,964, the
# training step alone (README, `python -m runlib.bench.train_step`; the demo's foundation phase ran at
# ~5,800 on 2 quiet cores, 2026-12-01). The other stages (curation, tokenizer, tokenizing, evaluation, report,
# each job's start): 0.5-4 minutes. Measured: the 10-minute shrink of OLMo 2 7B ran in 4 minutes in all
# (~1M tokens, so at most ~1 minute besides training); curation, the tokenizer and
# tokenizing of its nine stand-ins took 4.3 minutes on 2 cores shared with five other jobs.
RATES_TOKENS_PER_S = {"SMALL": (2_150, 6_000), "DEMO": (3_500, 5_964)}
OTHER_STAGES_MIN = (0.5, 4.0)
MAX_SEQ_LEN = 1024
RAMP_ACCUM = 4  # micro-batches per rank of a ramp's largest batch: a ramp keeps ratios down to 1/4
FIT_ITERATIONS = 64  # bound of the bisection that places a ramp's thresholds (_fit_ramp): each is one derive

STAND_INS = {  # domain -> builtin stand-in
    "code": "python_code",
    "math": "arithmetic",
    "synthetic": "arithmetic",
}
PROSE_STAND_IN = "python_docs"  # web, books, wiki, papers, dialogue, curated
STAND_IN_TEXT = {
    "python_code": "the standard library's own code",
    "python_docs": "Python's own documentation",
    "arithmetic": "seeded arithmetic",
}


@dataclass
class Shrunk:
    data: dict[str, Any]  # the shrunk spec as YAML data
    header: list[str]  # comment lines for the top of the file
    source_notes: dict[str, str] = field(default_factory=dict)  # source name -> comment above it
    task_notes: dict[int, str] = field(default_factory=dict)  # index in eval.tasks -> comment above it


def _pct(part: float, whole: float) -> str:
    """A percentage for a Duration field, with enough digits to land on the same token."""
    return f"{100.0 * part / whole:.6g}%" if whole else "0%"


def _files_present(pattern: str | None, field_name: str) -> bool:
    """Whether a file source's glob matches a file here (a bounded stat walk, no hashing)."""
    from runlib.curate.inputs import match_files

    if not pattern:
        return False
    if Path(pattern).is_dir():
        return True
    try:
        return bool(match_files(pattern, field_name))
    except UserError:
        return False


def _stand_in(domain: str) -> str:
    return STAND_INS.get(domain, PROSE_STAND_IN)


def _shape(minutes: float) -> dict[str, Any]:
    return dict(DEMO if minutes >= 10 else SMALL)


def _model(spec: Any, shape: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    m = spec.model
    heads = shape["heads"]
    kv_ratio = (m.kv_heads or m.heads) / m.heads
    kv_heads = max(1, round(heads * kv_ratio))
    while heads % kv_heads:
        kv_heads -= 1
    d_model = shape["d_model"]
    d_ff = max(8, round(d_model * m.d_ff / m.d_model / 8) * 8)  # the published d_ff / d_model ratio
    position = m.position
    notes = [
        f"model: {m.layers} layers x {m.d_model} (d_ff {m.d_ff}, {m.heads}/{m.kv_heads or m.heads} heads) -> "
        f"{shape['layers']} x {d_model} (d_ff {d_ff}, {heads}/{kv_heads} heads), the same d_ff ratio and GQA ratio"
    ]
    if position == "relative":
        # runlib's attention has no Transformer-XL relative term (Dai et al. 2019, section 3.3): the trainer
        # refuses it (RUN008). ALiBi (Press et al. 2022) is the relative scheme it builds: no position
        # parameters, a per-head penalty on the distance
        position = "alibi"
        notes.append("model: position relative -> alibi (the trainer has no Transformer-XL relative attention: RUN008)")
    model = {
        "layers": shape["layers"],
        "d_model": d_model,
        "heads": heads,
        "kv_heads": kv_heads,
        "d_ff": d_ff,
        "activation": m.activation,
        "norm": m.norm,
        "bias": m.bias,
        "position": position,
        "rope_theta": m.rope_theta,
        "qk_norm": m.qk_norm,
        "tie_embeddings": m.tie_embeddings,
        "vocab_size": VOCAB_IDS,
        "seq_len": shape["seq_len"],
    }
    # the block's structure, enacted by the trainer at tensor 1 (RUN008 refuses them only under tensor
    # parallelism): Falcon's biased LayerNorm and parallel block, BLOOM's embedding norm, OPT's dropout
    if m.norm_bias is not None:
        model["norm_bias"] = m.norm_bias
    for name in ("parallel_block", "embedding_norm"):
        if getattr(m, name):
            model[name] = True
    if m.dropout:
        model["dropout"] = m.dropout
    return model, notes


def _tokenizer(spec: Any, first_mixture: dict[str, float]) -> tuple[dict[str, Any], list[str]]:
    t = spec.tokenizer
    reserved = min(t.reserved_tokens, 256)
    if t.pretrained:  # a pretrained tokenizer's count of special tokens; the trained one reserves as TOK004 asks
        reserved = max(reserved, RESERVED_LOW)
    learned = VOCAB_IDS - reserved - len(set(t.domain_tokens))
    out: dict[str, Any] = {"vocab_size": learned, "reserved_tokens": reserved, "digits": t.digits}
    if t.domain_tokens:
        out["domain_tokens"] = list(t.domain_tokens)
    if t.drop_tokens:
        out["drop_tokens"] = list(t.drop_tokens)
    train_on = dict(t.train_on) or {k: w for k, w in first_mixture.items() if w > 0}
    out["train_on"] = train_on
    out["train_bytes"] = TRAIN_BYTES
    out["min_frequency"] = t.min_frequency
    notes = []
    if t.pretrained:
        notes.append(
            f"tokenizer: pretrained {t.pretrained} -> a {learned}-token BPE trained on the first phase's mixture "
            f"(+{reserved} reserved)"
        )
    else:
        notes.append(f"tokenizer: {t.vocab_size} learned tokens -> {learned} (+{reserved} reserved)")
    return out, notes


def _sources(
    spec: Any, plan: Plan, run_tokens_new: float, heldout_docs: int
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    sources: dict[str, Any] = {}
    notes: dict[str, str] = {}
    epochs = {s.name: s.epochs for s in plan.sources}
    used_share = {s.name: s.tokens_used / plan.tokens_total if plan.tokens_total else 0.0 for s in plan.sources}
    header = []
    for i, (name, src) in enumerate(spec.data.sources.items()):
        inp = src.input
        entry: dict[str, Any] = {"domain": src.domain}
        if inp.format == "builtin":
            new_input = {
                "format": "builtin",
                "name": inp.name,
                "max_docs": min(inp.max_docs or STAND_IN_DOCS, STAND_IN_DOCS + i),
            }
            if inp.shards:
                new_input["shards"] = min(inp.shards, 2)
        elif _files_present(inp.path, f"data.sources.{name}.input.path"):
            new_input = inp.model_dump(exclude_none=True)
            new_input["max_docs"] = min(inp.max_docs or STAND_IN_DOCS, STAND_IN_DOCS)
            new_input["shards"] = 1
        else:
            builtin = _stand_in(src.domain)
            # a distinct document count per source keeps each source its own artifacts and held-out set
            new_input = {"format": "builtin", "name": builtin, "max_docs": STAND_IN_DOCS + i, "shards": 1}
            notes[name] = (
                f"stand-in: {inp.format} files {inp.path!r} are not here; {src.domain} text -> builtin {builtin} "
                f"({STAND_IN_TEXT[builtin]}, {STAND_IN_DOCS + i} documents)"
            )
        entry["input"] = new_input
        # declared tokens: what the documents the shrunk run curates hold (runlib.review.standins), so the
        # audit's epochs before the run are the ones tokenizing measures; a file source that cannot be read
        # here keeps the published number of epochs over the shrunk run
        try:
            entry["tokens"] = source_train_tokens(name, src, new_input, heldout_docs)
        except UserError as exc:
            e = epochs.get(name)
            used = used_share.get(name, 0.0) * run_tokens_new
            fits = e and math.isfinite(e) and used > 0
            entry["tokens"] = max(1, round(used / e)) if fits else max(1, round(run_tokens_new))
            notes[name] = f"tokens: the published epochs over the shrunk run (its documents were not read: {exc})"
        curate = src.curate.model_dump(exclude_defaults=True)
        if curate:
            entry["curate"] = curate
        if src.fim is not None:
            entry["fim"] = src.fim.model_dump()
        sources[name] = entry
    stand_ins = sum(note.startswith("stand-in:") for note in notes.values())
    if stand_ins:
        header.append(f"data: {stand_ins} of {len(spec.data.sources)} sources are builtin stand-ins (see each)")
    return sources, notes, header


def _parallelism(p: Any, override: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sharding = p.sharding
    if sharding == "hsdp":
        sharding = "fsdp"  # one node: hsdp is fsdp
    if sharding is not None:
        out["sharding"] = sharding
    if p.activation_checkpointing is not None:
        out["activation_checkpointing"] = p.activation_checkpointing
    if not override:
        out.update({"tensor": 1, "pipeline": 1, "context": 1})
    return out


def _steps(plan: Plan, budget_tokens: float, tokens_per_step: list[int]) -> list[int]:
    """Steps per phase: the published share of the run's tokens at the phase's shrunk tokens per step,
    each at least MIN_PHASE_STEPS."""
    shares = [p.tokens / plan.tokens_total for p in plan.phases]
    return [
        max(MIN_PHASE_STEPS, round(s * budget_tokens / tps)) for s, tps in zip(shares, tokens_per_step, strict=True)
    ]


def shrink(loaded: LoadedSpec, minutes: float = 10.0) -> Shrunk:
    """The shrunk spec's data and its comments (pure but for the glob of file sources)."""
    if not 0 < minutes <= MAX_MINUTES:  # inf was a traceback, 1e300 a spec of 10^300 tokens
        raise UserError(
            f"runlib shrink --minutes {minutes:g}: give a number of minutes above 0 and at most {MAX_MINUTES:,} "
            "(a week: shrink sizes a run for this machine)"
        )
    spec = loaded.spec
    plan = derive(spec)
    if not plan.phases or not plan.tokens_total:
        raise UserError(f"{loaded.source_map.file}: the spec has no training tokens to shrink")
    shape = _shape(minutes)
    seq0 = shape["seq_len"]
    base_seq = spec.model.seq_len
    grad_accum = 2 if spec.batch.grad_accum > 1 else 1
    # a ramp's largest stage accumulates RAMP_ACCUM micro-batches (_ramp, _linear_ramp): budget the steps at it
    ramped = bool(spec.batch.ramp) or spec.batch.linear_ramp is not None
    tokens_per_step = DEVICES * MICRO_BATCH * (RAMP_ACCUM if ramped else grad_accum) * seq0
    budget_tokens = shape["tokens_per_s"] * minutes * 60 * TRAIN_SHARE
    first_mixture = dict(spec.phases[0].mixture)

    header = [
        f"Shrunk by `runlib shrink {loaded.source_map.file} --minutes {minutes:g}` from {spec.name}: the run's "
        "structure, scaled to run end to end on 2 CPU cores.",
        f"hardware: {spec.hardware.nodes} x {spec.hardware.devices_per_node} {spec.hardware.accelerator} -> "
        f"1 x {DEVICES} cpu",
    ]
    model, notes = _model(spec, shape)
    header += notes
    tokenizer, notes = _tokenizer(spec, first_mixture)
    header += notes

    # phases: the published kinds, mixtures and shares; seq_len in the published ratio to the first phase's
    phases = []
    phase_tps = []
    for phase in spec.phases:
        entry: dict[str, Any] = {"name": phase.name, "kind": phase.kind}
        entry["mixture"] = dict(phase.mixture)
        if phase.seq_len is not None:
            entry["seq_len"] = min(MAX_SEQ_LEN, max(16, round(seq0 * phase.seq_len / base_seq)))
        if phase.rope_theta is not None:
            entry["rope_theta"] = phase.rope_theta
        if getattr(phase, "optimizer", None) is not None:  # a phase's optimizer changes (LR, clip) are structure
            entry["optimizer"] = phase.optimizer.model_dump(mode="json", exclude_none=True)
        if phase.parallelism is not None:
            override = _parallelism(phase.parallelism, override=True)
            if override:
                entry["parallelism"] = override
        if phase.batch is not None and (phase.batch.micro_batch or phase.batch.grad_accum):
            batch: dict[str, Any] = {}
            if phase.batch.micro_batch:
                batch["micro_batch"] = max(1, round(MICRO_BATCH * phase.batch.micro_batch / spec.batch.micro_batch))
            if phase.batch.grad_accum:
                batch["grad_accum"] = max(1, round(grad_accum * phase.batch.grad_accum / spec.batch.grad_accum))
            entry["batch"] = batch
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
    phase_steps = _steps(plan, budget_tokens, phase_tps)
    for entry, steps in zip(phases, phase_steps, strict=True):
        entry["tokens"] = f"{steps} steps"
        entry["mixture"] = entry.pop("mixture")  # keep the key order of a phase: name, kind, tokens, mixture
    header.append(
        "phases: "
        + ", ".join(f"{p.name} {p.steps:,} -> {s} steps" for p, s in zip(plan.phases, phase_steps, strict=True))
    )

    batch: dict[str, Any] = {"micro_batch": MICRO_BATCH, "grad_accum": grad_accum}
    ramp_fractions: list[float] = []  # where each ramp threshold falls, as a fraction of the run's tokens
    if spec.batch.ramp:
        ramp, base_accum, ramp_fractions = _ramp(spec, plan)
        batch["grad_accum"] = base_accum
        batch["ramp"] = ramp
        header.append(
            "batch ramp: each stage's batch relative to the largest and its start in percent of the run, kept"
        )
    elif spec.batch.linear_ramp is not None:
        batch["grad_accum"] = RAMP_ACCUM
        batch["linear_ramp"], over_fraction, note = _linear_ramp(spec, plan)
        ramp_fractions = [over_fraction]
        header.append(note)

    data: dict[str, Any] = {
        "name": f"{spec.name}-shrunk"[:100],
        "description": f"{spec.name} shrunk to run on 2 CPU cores, sized for ~{minutes:g} minutes (runlib shrink)",
        "seed": spec.seed,
        "hardware": {"accelerator": "cpu", "nodes": 1, "devices_per_node": DEVICES, "mfu": 0.1},
        "model": model,
        "tokenizer": tokenizer,
    }
    # the run's tokens: derived below from the phases in steps; a first estimate for the sources' declared tokens
    estimate = sum(s * tps for s, tps in zip(phase_steps, phase_tps, strict=True))
    d = spec.data
    heldout_docs = min(d.heldout_docs, HELDOUT_DOCS)
    sources, source_notes, notes = _sources(spec, plan, estimate, heldout_docs)
    header += notes
    data["data"] = {
        "sources": sources,
        "heldout_docs": heldout_docs,
        "packing": d.packing,
        "boundary_targets": d.boundary_targets,
        "loss_normalization": d.loss_normalization,
        "token_dtype": d.token_dtype,
    }
    data["parallelism"] = _parallelism(spec.parallelism)
    if spec.parallelism.tensor * spec.parallelism.pipeline * spec.parallelism.context > 1 or spec.parallelism.offload:
        header.append("parallelism: tensor, pipeline, context 1 and no offload (a CPU run enacts none of them)")
    data["batch"] = batch
    data["optimizer"] = spec.optimizer.model_dump(mode="json")
    data["schedule"] = {"kind": "constant", "warmup": "0%"}  # set from the shrunk timeline below (_schedule)
    p = spec.precision
    if p.compute != "fp32" or p.master_weights != "fp32" or p.optimizer_states != "fp32" or p.grads != "fp32":
        header.append(f"precision: {p.compute} compute -> fp32 (what a CPU runs at full speed without autocast)")
    if p.grads == "fp16":
        header.append("precision: grads fp16 -> fp32 (the trainer reduces gradients in fp32 or bf16 only: RUN009)")
    header += _parallelism_notes(spec)
    data["precision"] = {"compute": "fp32", "master_weights": "fp32", "grads": "fp32", "optimizer_states": "fp32"}
    data["tokens"] = estimate
    data["phases"] = phases
    total = sum(phase_steps)
    ck = spec.checkpoint
    checkpoint: dict[str, Any] = {"keep": min(ck.keep, 2), "state": list(ck.state)}
    if ck.every is not None:
        checkpoint["every"] = f"{max(MIN_PHASE_STEPS, total // 4)} steps"
    data["checkpoint"] = checkpoint
    data["monitor"] = _monitor(spec, total)
    data["eval"], task_notes = _eval(spec, data["data"]["heldout_docs"], model)
    if spec.tracking.experiment:
        data["tracking"] = {"experiment": f"{spec.tracking.experiment}-shrunk"[:100]}

    # exact totals and the schedule from the shrunk timeline
    data["tokens"] = _fit_ramp(data, ramp_fractions) if ramp_fractions else _derived_tokens(data)
    data["schedule"] = _schedule(spec, plan, data)
    if spec.ladder is not None:
        ladder, notes = _ladder(spec, plan, data)
        header += notes
        if ladder is not None:
            data["ladder"] = ladder
    ignore = _ignores(spec, data)
    if ignore:
        data["audit"] = {"ignore": ignore}
    return Shrunk(data, header, source_notes, task_notes)


def _ramp(spec: Any, plan: Plan) -> tuple[list[dict[str, Any]], int, list[float]]:
    """The ramp's stages, each batch in the published ratio to the largest as whole micro-batches (grad_accum
    of the largest stage: RAMP_ACCUM), their `after` filled in by _fit_ramp; and where each stage starts, as
    a fraction of the run's tokens (the thresholds as the plan reads them: runlib.plan.timeline.ramp_points)."""
    from runlib.plan.timeline import ramp_points

    seq = spec.model.seq_len
    points = ramp_points(spec)
    sizes = [batch.tokens(seq) for _, batch in points]
    base_tokens = spec.batch.micro_batch * spec.batch.grad_accum * plan.data_parallel * seq
    largest = max(sizes + [base_tokens])
    per_accum = DEVICES * MICRO_BATCH
    ramp = []
    for tokens in sizes:
        accum = max(1, round(RAMP_ACCUM * tokens / largest))
        ramp.append({"after": None, "global_batch": f"{per_accum * accum} sequences"})
    fractions = [min(1.0, threshold / plan.tokens_total) for threshold, _ in points]
    return ramp, max(1, round(RAMP_ACCUM * base_tokens / largest)), fractions


def _linear_ramp(spec: Any, plan: Plan) -> tuple[dict[str, Any], float, str]:
    """Megatron's --rampup-batch-size (batch.linear_ramp) at the shrunk scale: start and increment in the
    published ratio to the steady batch, in whole micro-batches of the 2 ranks (so every level keeps a whole
    grad_accum: BATCH002), over the same fraction of the run (`over` filled in by _fit_ramp)."""
    lr = spec.batch.linear_ramp
    seq = spec.model.seq_len
    steady_tokens = spec.batch.micro_batch * spec.batch.grad_accum * plan.data_parallel * seq
    per_accum = DEVICES * MICRO_BATCH  # sequences of one micro-step on every rank
    steady = per_accum * RAMP_ACCUM
    increment = per_accum * max(1, round(steady * lr.increment.tokens(seq) / steady_tokens / per_accum))
    start = per_accum * max(1, round(steady * lr.start.tokens(seq) / steady_tokens / per_accum))
    start = min(start, steady - increment)  # at least one increment, as the published ramp has
    over_tokens = plan.duration_tokens(lr.over)
    ramp = {"start": f"{start} sequences", "increment": f"{increment} sequences", "over": None}
    note = (
        f"batch linear_ramp: {lr.start} + {lr.increment} -> {steady_tokens // seq:,} sequences over {lr.over} -> "
        f"{start} + {increment} -> {steady} sequences over the same share of the run (whole micro-batches)"
    )
    return ramp, min(1.0, over_tokens / plan.tokens_total), note


def _with_thresholds(data: dict[str, Any], afters: list[str]) -> dict[str, Any]:
    """The spec data with the ramp's thresholds (batch.ramp[].after, or batch.linear_ramp.over) set."""
    batch = dict(data["batch"])
    if "ramp" in batch:
        batch["ramp"] = [{**stage, "after": a} for stage, a in zip(batch["ramp"], afters, strict=True)]
    else:
        batch["linear_ramp"] = {**batch["linear_ramp"], "over": afters[0]}
    return {**data, "batch": batch}


def _fit_ramp(data: dict[str, Any], fractions: list[float]) -> int:
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
        return _derived_tokens({**_with_thresholds(data, afters), "tokens": max(1, tokens)})

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
            data.update(_with_thresholds(data, [percent(f) for f in fractions]))
            return tokens
    thresholds = [
        max(1 if i == 0 and "linear_ramp" in data["batch"] else 0, round(f * hi)) for i, f in enumerate(fractions)
    ]
    run = total(hi, [f"{t} tokens" for t in thresholds])
    afters = [percent(t / run) for t in thresholds]
    if total(run, afters) != run:  # a percentage that does not round-trip: the thresholds in tokens
        afters = [f"{t} tokens" for t in thresholds]
    data.update(_with_thresholds(data, afters))
    return run


def _parallelism_notes(spec: Any) -> list[str]:
    """Comments for the parallelism fields the shrunk spec leaves at their defaults (planning only; they
    describe the memory of a layout that tensor, pipeline and context 1 on a CPU do not have)."""
    par = spec.parallelism
    layouts = [par] + [ph.parallelism for ph in spec.phases if ph.parallelism is not None]
    notes = []
    if any(p.attention_kernel == "eager" for p in layouts):
        notes.append(
            "parallelism: attention_kernel eager -> fused (planning only: the trainer runs torch's "
            "scaled_dot_product_attention, which stores no s x s scores)"
        )
    if any(p.pipeline_first_stage_layers or p.pipeline_last_stage_layers for p in layouts):
        notes.append("parallelism: pipeline_first/last_stage_layers dropped (pipeline 1: one stage holds every layer)")
    if any(p.sequence_parallel is False for p in layouts):
        notes.append("parallelism: sequence_parallel false dropped (tensor 1: nothing to split along the sequence)")
    return notes


def _monitor(spec: Any, total_steps: int) -> dict[str, Any]:
    m = spec.monitor
    # the held-out loss during training at the size of the evaluation after each phase (_eval's heldout_tokens)
    out: dict[str, Any] = {"eval_tokens": 8192}
    if m.eval_every is not None:
        out["eval_every"] = f"{max(MIN_PHASE_STEPS, total_steps // 4)} steps"
    if m.spike is not None:
        spike = m.spike.model_dump(mode="json", exclude_none=True)
        spike["window"] = min(m.spike.window, 50)
        spike["max_skips_per_window"] = min(m.spike.max_skips_per_window, spike["window"])
        if m.spike.rollback is not None:
            spike["rollback"] = "2 steps"
        out["spike"] = spike
    return out


def _exportable(model: dict[str, Any]) -> str | None:
    """None if lm-eval can score the shrunk model (exported as a Hugging Face checkpoint), else why not."""
    from runlib.export.hf import hf_architecture
    from runlib.spec.models import ModelSpec

    try:
        hf_architecture(ModelSpec.model_validate(model))
    except UserError as exc:
        return str(exc).removeprefix("runlib export: ")
    return None


def _eval(spec: Any, heldout_docs: int, model: dict[str, Any]) -> tuple[dict[str, Any], dict[int, str]]:
    """The evaluation at the shrunk scale, and a comment for each task replaced by a stand-in.

    Tasks that run offline on this machine are kept: runlib's own tasks from held-out documents, task files
    that are here, and the lm-eval tasks runlib ships (runlib.eval.harness.taskfiles: runlib_arith_*,
    runlib_heldout_*). An lm-eval task that downloads its data from the Hugging Face Hub, or whose task file
    is not here, becomes the shipped runlib_heldout_mc on the first used source's held-out documents; when
    lm-eval cannot score the shrunk model at all (no Hugging Face architecture computes its block:
    runlib.export.hf.hf_architecture), every lm-eval task becomes runlib's own multiple_choice on them."""
    e = spec.eval
    out: dict[str, Any] = {"after_each_phase": e.after_each_phase, "heldout_tokens": 8192}
    first = spec.phases[0].mixture
    source = next((name for name, w in first.items() if w > 0), next(iter(first)))
    shipped = EvalTaskSpec.RUNLIB_LM_EVAL_TASKS
    unexportable = _exportable(model) if any(t.kind == "lm_eval" for t in e.tasks) else None
    tasks = []
    notes: dict[int, str] = {}
    for task in e.tasks:
        t: dict[str, Any] = {"name": task.name, "kind": task.kind}
        if task.kind == "lm_eval":
            local = task.path is not None and Path(task.path).exists()
            if unexportable:
                t = {"name": task.name, "kind": "multiple_choice", "from_heldout": source}
                notes[len(tasks)] = (
                    f"stand-in: lm-eval task {task.task} -> runlib's multiple_choice on {source}'s held-out "
                    f"documents: lm-eval scores a Hugging Face export, and {unexportable}"
                )
            elif shipped.get(task.task or "") == "heldout":
                t.update(task=task.task, from_heldout=task.from_heldout)
            elif shipped.get(task.task or "") == "arithmetic" or (local and not task.download):
                t["task"] = task.task
                if local:
                    t["path"] = task.path
            else:
                t.update(task="runlib_heldout_mc", from_heldout=source)
                why = (
                    "it downloads its data from the Hugging Face Hub, and the shrunk run runs offline"
                    if task.download
                    else f"its task file {task.path!r} is not here"
                )
                notes[len(tasks)] = (
                    f"stand-in: lm-eval task {task.task} -> runlib_heldout_mc (shipped with runlib) on {source}'s "
                    f"held-out documents, scored by lm-eval too: {why}"
                )
        elif task.from_heldout is not None:
            t["from_heldout"] = task.from_heldout
        elif task.path and Path(task.path).is_file():
            t["path"] = task.path
        else:  # a task file that is not here: the same kind built from the first source's held-out documents
            t["from_heldout"] = source
            notes[len(tasks)] = (
                f"stand-in: task file {task.path!r} is not here; built from {source}'s held-out documents"
            )
        t["examples"] = max(1, min(task.examples, heldout_docs))
        tasks.append(t)
    if tasks:
        out["tasks"] = tasks
    return out, notes


def _ladder(spec: Any, plan: Plan, data: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The scaling ladder at the shrunk scale: each rung width in the published ratio to the target's d_model,
    on whole heads of the shrunk model (runlib.ladder.rungs.rung_model keeps the target's head_dim), at least
    two distinct widths; tokens per parameter as published, compute budgets scaled with the run's FLOPs;
    min_steps no more than 2 x MIN_PHASE_STEPS (a shrunk rung trains a few dozen steps)."""
    lad = spec.ladder
    m = data["model"]
    head = m["d_model"] // m["heads"]
    scale = m["d_model"] / spec.model.d_model
    widths = sorted({min(m["d_model"], max(head, round(w * scale / head) * head)) for w in lad.widths})
    wanted = len(set(lad.widths))  # as many sizes as published: the fit needs them (runlib.ladder.rungs)
    for w in range(head, m["d_model"] + 1, head):  # widths that met on one multiple: the next free multiples
        if len(widths) >= wanted:
            break
        widths = sorted(set(widths) | {w})
    if len(widths) < min(wanted, 2):
        return None, [f"ladder: dropped (the shrunk d_model {m['d_model']} holds one head of {head}: no two widths)"]
    out = lad.model_dump(mode="json", exclude_none=True)
    out["widths"] = widths
    out["min_steps"] = min(lad.min_steps, 2 * MIN_PHASE_STEPS)
    if lad.compute_flops is not None:
        shrunk = derive(validate_data(data).spec)
        out["compute_flops"] = [float(f"{c * shrunk.flops_total / plan.flops_total:.3g}") for c in lad.compute_flops]
    from runlib.ladder.rungs import ladder_rungs

    try:  # the fit's needs (fitted rungs over sizes and multipliers), as the workflow's graph checks them
        ladder_rungs(validate_data({**data, "ladder": out}).spec)
    except UserError as exc:
        return None, [f"ladder: dropped (at the shrunk scale: {exc})"]
    note = (
        f"ladder: widths {list(lad.widths)} -> {widths} (the same ratio to d_model, whole heads of {head}); "
        f"min_steps {lad.min_steps} -> {out['min_steps']}"
    )
    return out, [note]


def _derived_tokens(data: dict[str, Any]) -> int:
    """The run's tokens: the phases (in whole steps) on the shrunk timeline."""
    data = {**data, "schedule": {"kind": "constant", "warmup": "0%"}}
    return derive(validate_data(data).spec).tokens_total


def _schedule(spec: Any, plan: Plan, data: dict[str, Any]) -> dict[str, Any]:
    """Warmup and decay in percent of the run: the published shares; a decay that ended exactly on phase
    boundaries covers the same phases of the shrunk run."""
    s = spec.schedule
    out: dict[str, Any] = {"kind": s.kind, "warmup": _pct(plan.warmup_tokens, plan.tokens_total)}
    if s.kind == "multistep":
        # the levels at the same share of the run (DeepSeek LLM: 80% and 90%, arXiv 2401.02954 section 2.3);
        # a level given in tokens or steps becomes its percent of the published run. multistep reads no
        # decay and no min_lr_ratio (ScheduleSpec): the last level is the floor
        out["lr_steps"] = [
            {
                "after": f"{x.after.amount:g}%"
                if x.after.unit == "percent"
                else _pct(plan.duration_tokens(x.after), plan.tokens_total),
                "lr_ratio": x.lr_ratio,
            }
            for x in s.lr_steps or []
        ]
        return out
    if s.decay is not None:
        decay_tokens = plan.decay_tokens if s.kind == "wsd" else plan.duration_tokens(s.decay)
        out["decay"] = _pct(decay_tokens or 0.0, plan.tokens_total)
        if s.kind == "wsd":
            new_plan = derive(validate_data({**data, "schedule": {"kind": "constant", "warmup": "0%"}}).spec)
            tail_old, tail_new = 0.0, 0.0
            for old, new in zip(reversed(plan.phases), reversed(new_plan.phases), strict=True):
                tail_old += old.tokens
                tail_new += new.tokens
                if math.isclose(tail_old, decay_tokens or 0.0, rel_tol=1e-3):
                    out["decay"] = _pct(tail_new, new_plan.tokens_total)
                    break
    out["min_lr_ratio"] = s.min_lr_ratio
    return out


def _ignores(spec: Any, data: dict[str, Any]) -> dict[str, str]:
    """The shrunk spec's audit.ignore: the published entries that still silence one of its findings (others
    would be stale: AUDIT001), and an entry naming shrink for each finding that shrink's own choices raise
    (SHRINK_CHOICES). MIX006 stays in view when the published spec has too few held-out documents itself;
    SCHED008 and PAR005 judge the published LR and memory policy at the shrunk scale, which is shrink's."""
    from runlib.audit import audit

    findings = audit(validate_data({k: v for k, v in data.items() if k != "audit"}).spec).findings
    codes = {f.code for f in findings}
    out = {key: reason for key, reason in spec.audit.ignore.items() if key.partition("@")[0].strip().upper() in codes}
    if "MIX006" in codes and spec.data.heldout_docs < MIX006_DOCS:
        codes.discard("MIX006")
    for f in findings:
        if f.code in SHRINK_CHOICES and f.code in codes and f.code not in out:
            out[f.code] = SHRINK_CHOICES[f.code](data, f)
    return out


SHRINK_CHOICES = {  # findings that shrink's own choices raise, and the reason it writes into audit.ignore
    "MIX006": lambda data, f: (
        f"runlib shrink: {data['data']['heldout_docs']} held-out documents per source, taken from sources of "
        f"~{STAND_IN_DOCS} documents ({f.value} would leave none to train on); the shrunk run's held-out loss "
        "shows that evaluation runs, not differences between sources"
    ),
    "SCHED008": lambda data, f: (
        f"runlib shrink keeps the published peak LR {data['optimizer']['lr']:g} (the optimizer is part of the "
        f"run's structure); the DeepSeek LLM fit at the shrunk run's compute would give {f.value:g}"
    ),
    "PAR005": lambda data, f: (
        "runlib shrink keeps the published sharding and recomputation (part of the run's structure); the shrunk "
        "model fits without them"
    ),
}


# ------------------------------------------------------------------------------------------ output


def to_yaml(shrunk: Shrunk) -> str:
    """The shrunk spec as YAML: block style, leaf mappings and lists in flow style, the comments in place."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    def commented(obj: Any) -> Any:
        if isinstance(obj, dict):
            cm = CommentedMap()
            for k, v in obj.items():
                cm[k] = commented(v)
            return cm
        if isinstance(obj, list):
            return [commented(v) for v in obj]
        return obj

    doc = commented(shrunk.data)
    doc.yaml_set_start_comment("\n".join(_wrap(shrunk.header)))
    sources = doc["data"]["sources"]
    for name, note in shrunk.source_notes.items():
        sources.yaml_set_comment_before_after_key(name, before=note, indent=4)
    if shrunk.task_notes:
        tasks = CommentedSeq(doc["eval"]["tasks"])
        doc["eval"]["tasks"] = tasks
        for i, note in shrunk.task_notes.items():
            tasks.yaml_set_comment_before_after_key(i, before="\n".join(_wrap([note], 104)), indent=4)
    yaml = YAML()
    yaml.default_flow_style = None
    yaml.width = 120
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _wrap(lines: list[str], width: int = 110) -> list[str]:
    import textwrap

    out = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ") or [""]
    return out


def wall_minutes(tokens: int, minutes: float) -> tuple[float, float]:
    """The shrunk run's wall time on 2 CPU cores as a range (RATES_TOKENS_PER_S, OTHER_STAGES_MIN)."""
    slow, fast = RATES_TOKENS_PER_S["DEMO" if minutes >= 10 else "SMALL"]
    return tokens / fast / 60 + OTHER_STAGES_MIN[0], tokens / slow / 60 + OTHER_STAGES_MIN[1]


def shrink_file(path: str | Path, minutes: float = 10.0, out: str = "SHRUNK.yaml") -> tuple[str, str]:
    """The shrunk spec's YAML text, and a summary for stderr: what it holds, its audit's counts, the time it
    takes, and the commands that run and export it from the current directory (`out`: where it is written)."""
    from runlib.audit import audit
    from runlib.workflow.command import snakemake_command

    loaded = load_spec(path)
    shrunk = shrink(loaded, minutes)
    text = to_yaml(shrunk)
    check = validate_data(shrunk.data)
    result = audit(check.spec)
    plan = result.plan
    stand_ins = sum(note.startswith("stand-in:") for note in shrunk.source_notes.values())
    low, high = wall_minutes(plan.tokens_total, minutes)
    slow, fast = RATES_TOKENS_PER_S["DEMO" if minutes >= 10 else "SMALL"]
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


__all__ = ["Shrunk", "shrink", "shrink_file", "to_yaml", "Duration"]
