"""`runlib shrink SPEC`: the same run, scaled down until its whole DAG runs on this machine in ~N minutes.

Kept (the run's structure): the sources with their domains and curation, every phase with its kind and
mixture, the packing and boundary policy, the loss normalization, FIM, the tokenizer's options (digit
splitting, reserved, domain and dropped tokens), the schedule's kind and shape in percent of the run,
the floor, the batch ramp's shape (each stage's batch relative to the largest, at the same percent of
the run), the optimizer, the sharding kind and the recomputation, the checkpoint and spike policies.

Scaled down: the model (2 x 64 below 10 minutes, the demo's 4 x 128 from 10), the vocabulary (1,024 ids),
the context (128 tokens for the first phase, later phases in the same ratio), the tokens (from the
minutes and a measured CPU rate, below), the batch (micro-batch 4 on each of 2 processes), the hardware
(one CPU node, 2 devices), the held-out set, the evaluation and the checkpoint cadence (in steps).

Replaced: a file source whose files are not here by a builtin stand-in of the same domain (code: the
standard library's code; math and synthetic text: seeded arithmetic; prose: Python's documentation), a
pretrained tokenizer by a trained one, a precision the CPU cannot run by fp32, tensor/pipeline/context
parallelism by 1 (runlib cannot enact them on a CPU: RUN001-RUN003), offload by none (RUN005). The
shrunk spec says each replacement in comments. `audit.ignore` keeps the entries that still silence a
finding of the shrunk spec (others would be stale: AUDIT001).

The phases' shares are the published ones, except that every phase gets at least MIN_PHASE_STEPS steps
(OLMo 2's 50B-token anneal is 1.3% of its run); the WSD decay stays aligned with the phases it covered.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.plan import Plan, derive
from runlib.spec import LoadedSpec, load_spec, validate_data
from runlib.spec.units import Duration

DEVICES = 2  # one training process per core of a 2-core machine
MICRO_BATCH = 4
MIN_PHASE_STEPS = 4
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
MAX_SEQ_LEN = 1024

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
    model = {
        "layers": shape["layers"],
        "d_model": d_model,
        "heads": heads,
        "kv_heads": kv_heads,
        "d_ff": d_ff,
        "activation": m.activation,
        "norm": m.norm,
        "bias": m.bias,
        "position": m.position,
        "rope_theta": m.rope_theta,
        "qk_norm": m.qk_norm,
        "tie_embeddings": m.tie_embeddings,
        "vocab_size": VOCAB_IDS,
        "seq_len": shape["seq_len"],
    }
    note = (
        f"model: {m.layers} layers x {m.d_model} (d_ff {m.d_ff}, {m.heads}/{m.kv_heads or m.heads} heads) -> "
        f"{shape['layers']} x {d_model} (d_ff {d_ff}, {heads}/{kv_heads} heads), the same d_ff ratio and GQA ratio"
    )
    return model, [note]


def _tokenizer(spec: Any, first_mixture: dict[str, float]) -> tuple[dict[str, Any], list[str]]:
    t = spec.tokenizer
    reserved = min(t.reserved_tokens, 256)
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


def _sources(spec: Any, plan: Plan, run_tokens_new: float) -> tuple[dict[str, Any], dict[str, str], list[str]]:
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
        # declared tokens: the published number of epochs over the shrunk run (planning only; the audit
        # counts the real tokens once the source is tokenized)
        e = epochs.get(name)
        if src.tokens is not None:
            used = used_share.get(name, 0.0) * run_tokens_new
            if e and math.isfinite(e) and used > 0:
                entry["tokens"] = max(1, round(used / e))
            else:
                entry["tokens"] = max(1, round(run_tokens_new))
        curate = src.curate.model_dump(exclude_defaults=True)
        if curate:
            entry["curate"] = curate
        if src.fim is not None:
            entry["fim"] = src.fim.model_dump()
        sources[name] = entry
    stand_ins = len(notes)
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
    if not minutes > 0:
        raise UserError(f"runlib shrink --minutes {minutes}: give a positive number of minutes")
    spec = loaded.spec
    plan = derive(spec)
    if not plan.phases or not plan.tokens_total:
        raise UserError(f"{loaded.source_map.file}: the spec has no training tokens to shrink")
    shape = _shape(minutes)
    seq0 = shape["seq_len"]
    base_seq = spec.model.seq_len
    grad_accum = 2 if spec.batch.grad_accum > 1 else 1
    # a ramp's largest stage accumulates 4 micro-batches (_ramp): budget the steps at that batch
    tokens_per_step = DEVICES * MICRO_BATCH * (4 if spec.batch.ramp else grad_accum) * seq0
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
    if spec.batch.ramp:
        ramp, base_accum = _ramp(spec, plan)
        batch["grad_accum"] = base_accum
        batch["ramp"] = ramp
        header.append(
            "batch ramp: each stage's batch relative to the largest and its start in percent of the run, kept"
        )

    data: dict[str, Any] = {
        "name": f"{spec.name}-shrunk"[:100],
        "description": f"{spec.name} shrunk to run on 2 CPU cores in ~{minutes:g} minutes (runlib shrink)",
        "seed": spec.seed,
        "hardware": {"accelerator": "cpu", "nodes": 1, "devices_per_node": DEVICES, "mfu": 0.1},
        "model": model,
        "tokenizer": tokenizer,
    }
    # the run's tokens: derived below from the phases in steps; a first estimate for the sources' declared tokens
    estimate = sum(s * tps for s, tps in zip(phase_steps, phase_tps, strict=True))
    sources, source_notes, notes = _sources(spec, plan, estimate)
    header += notes
    d = spec.data
    data["data"] = {
        "sources": sources,
        "heldout_docs": min(d.heldout_docs, HELDOUT_DOCS),
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
    data["schedule"] = {"kind": spec.schedule.kind, "warmup": "0%", "min_lr_ratio": spec.schedule.min_lr_ratio}
    p = spec.precision
    if p.compute != "fp32" or p.master_weights != "fp32" or p.optimizer_states != "fp32" or p.grads != "fp32":
        header.append(f"precision: {p.compute} compute -> fp32 (what a CPU runs at full speed without autocast)")
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
    data["eval"] = _eval(spec, data["data"]["heldout_docs"])
    if spec.tracking.experiment:
        data["tracking"] = {"experiment": f"{spec.tracking.experiment}-shrunk"[:100]}

    # exact totals and the schedule from the shrunk timeline
    data["tokens"] = _derived_tokens(data)
    data["schedule"] = _schedule(spec, plan, data)
    data["audit"] = {"ignore": dict(spec.audit.ignore)}
    data["audit"]["ignore"] = _still_needed_ignores(data)
    if not data["audit"]["ignore"]:
        del data["audit"]
    return Shrunk(data, header, source_notes)


def _ramp(spec: Any, plan: Plan) -> tuple[list[dict[str, Any]], int]:
    """The ramp's stages at the same percent of the run, each batch in the published ratio to the largest,
    as whole micro-batches (grad_accum of the largest stage: 4)."""
    seq = spec.model.seq_len
    sizes = []
    for stage in spec.batch.ramp or []:
        gb = stage.global_batch
        tokens = gb.amount * (seq if gb.unit == "sequences" else 1)
        sizes.append(tokens)
    base_tokens = spec.batch.micro_batch * spec.batch.grad_accum * plan.data_parallel * seq
    largest = max(sizes + [base_tokens])
    per_accum = DEVICES * MICRO_BATCH
    ramp = []
    for stage, tokens in zip(spec.batch.ramp or [], sizes, strict=True):
        accum = max(1, round(4 * tokens / largest))
        after = stage.after
        after_pct = after.amount if after.unit == "percent" else 100.0 * plan.duration_tokens(after) / plan.tokens_total
        ramp.append({"after": f"{after_pct:.6g}%", "global_batch": f"{per_accum * accum} sequences"})
    return ramp, max(1, round(4 * base_tokens / largest))


def _monitor(spec: Any, total_steps: int) -> dict[str, Any]:
    m = spec.monitor
    out: dict[str, Any] = {}
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


def _eval(spec: Any, heldout_docs: int) -> dict[str, Any]:
    e = spec.eval
    out: dict[str, Any] = {"after_each_phase": e.after_each_phase, "heldout_tokens": 8192}
    tasks = []
    for task in e.tasks:
        t: dict[str, Any] = {"name": task.name, "kind": task.kind}
        if task.from_heldout is not None:
            t["from_heldout"] = task.from_heldout
        elif task.path and Path(task.path).is_file():
            t["path"] = task.path
        else:  # a task file that is not here: the same kind built from the first source's held-out documents
            t["from_heldout"] = next(iter(spec.phases[0].mixture))
        t["examples"] = max(1, min(task.examples, heldout_docs))
        tasks.append(t)
    if tasks:
        out["tasks"] = tasks
    return out


def _derived_tokens(data: dict[str, Any]) -> int:
    """The run's tokens: the phases (in whole steps) on the shrunk timeline."""
    data = {**data, "schedule": {"kind": "constant", "warmup": "0%"}}
    return derive(validate_data(data).spec).tokens_total


def _schedule(spec: Any, plan: Plan, data: dict[str, Any]) -> dict[str, Any]:
    """Warmup and decay in percent of the run: the published shares; a decay that ended exactly on phase
    boundaries covers the same phases of the shrunk run."""
    s = spec.schedule
    out: dict[str, Any] = {"kind": s.kind, "warmup": _pct(plan.warmup_tokens, plan.tokens_total)}
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


def _still_needed_ignores(data: dict[str, Any]) -> dict[str, str]:
    """The audit.ignore entries that silence a finding of the shrunk spec."""
    from runlib.audit import audit

    if not data.get("audit", {}).get("ignore"):
        return {}
    ignore = data["audit"]["ignore"]
    bare = {**data, "audit": {"ignore": {}}}
    codes = {f.code for f in audit(validate_data(bare).spec).findings}
    return {code: reason for code, reason in ignore.items() if code.upper() in codes}


# ------------------------------------------------------------------------------------------ output


def to_yaml(shrunk: Shrunk) -> str:
    """The shrunk spec as YAML: block style, leaf mappings and lists in flow style, the comments in place."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

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


def shrink_file(path: str | Path, minutes: float = 10.0) -> tuple[str, str]:
    """The shrunk spec's YAML text, and a one-paragraph summary for stderr (its audit's error count);
    '{out}' in the summary stands for the output path."""
    from runlib.audit import audit

    loaded = load_spec(path)
    shrunk = shrink(loaded, minutes)
    text = to_yaml(shrunk)
    check = validate_data(shrunk.data)
    result = audit(check.spec)
    plan = result.plan
    summary = (
        f"wrote {{out}}: {plan.params.total:,} parameters, {plan.tokens_total:,} tokens in {plan.steps_total} steps over "
        f"{len(plan.phases)} phases, {len(shrunk.source_notes)} stand-in source(s); audit: "
        f"{result.count('error')} error(s), {result.count('warning')} warning(s)\n"
        f"run it: snakemake --cores 2 --config spec={{out}}"
    )
    return text, summary


__all__ = ["Shrunk", "shrink", "shrink_file", "to_yaml", "Duration"]
