"""What the runlib trainer enacts: one pure rule set for the audit's RUN checks and the trainer's last guard.

The trainer enacts (see the README, "What the trainer enacts"): sharding none (DDP), zero1 and
zero2 (both FSDP2 without resharding after forward), fsdp (FSDP2) and hsdp (FSDP2 on a 2-D mesh,
replicated across nodes, sharded within one); tensor > 1 with heads, kv_heads, d_ff and the sequence
length divisible by it and no QK-norm; activation checkpointing none, selective, full; offload on an
accelerator, under a sharded layout with data parallelism; optimizers adamw, adam, adafactor, muon;
compute fp32, bf16, fp16 (where the device has it: PREC004), master weights fp32 or none, gradients
fp32 or bf16, optimizer states in the dtype of the parameters the optimizer updates. Every other
value is a refusal here, with the reason and the fix. These mirror the checks of
runlib.model.parallelize and runlib.train.optim, made before any job starts. The curation stage reads
data.sources.*.input.format jsonl, parquet, text and builtin; warc is refused (RUN011) until runlib reads
WARC. The rules read plain values (no RunSpec), so the trainer can call `refusals` with its stage config's fields; nothing here
imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SHARDED = ("zero1", "zero2", "fsdp", "hsdp")  # layouts built with FSDP2's fully_shard


@dataclass(frozen=True, slots=True)
class Refusal:
    """A spec value the trainer cannot enact on the run's hardware."""

    code: str  # the audit check that reports it (RUN001...)
    field: str  # the spec field, relative to the run: "parallelism.context", "precision.compute"
    value: Any  # the refused value
    reason: str  # why the trainer cannot enact it here
    fix: str  # what to write instead

    def describe(self) -> str:
        return f"{self.code} {self.field}: {self.value}: {self.reason}; fix: {self.fix}"


def _divisors_above_one(g: int) -> list[int]:
    """The divisors of g above 1, ascending, by trial division up to sqrt(g): the tensor degrees that
    divide heads, kv_heads, d_ff and seq_len are those of their gcd (a loop up to heads would run a
    million times for heads: 1048576, the schema's bound)."""
    low = [d for d in range(1, math.isqrt(g) + 1) if g % d == 0]
    return sorted({x for d in low for x in (d, g // d) if x > 1})


def parameter_dtype(compute: str, master_weights: str) -> str:
    """The dtype of the parameters the optimizer updates: the fp32 master copy, or the compute dtype."""
    return "fp32" if compute == "fp32" or master_weights == "fp32" else compute


def parallelism_refusals(
    *,
    accelerator: str,
    nodes: int,
    devices_per_node: int,
    tensor: int,
    pipeline: int,
    context: int,
    sharding: str,
    offload: bool,
    heads: int,
    kv_heads: int | None,
    d_ff: int,
    qk_norm: bool,
    seq_len: int,
) -> list[Refusal]:
    """Refusals of one phase's layout (the mirror of runlib.model.parallelize's own checks)."""
    out: list[Refusal] = []
    model_parallel = tensor * pipeline * context
    data_parallel = max(1, nodes * devices_per_node // model_parallel)
    if context > 1:
        why = (
            "on cpu the gloo backend has no ring attention to exchange keys and values between ranks"
            if accelerator == "cpu"
            else "runlib's document-masked attention has no context-parallel path yet"
        )
        out.append(
            Refusal(
                "RUN001",
                "parallelism.context",
                context,
                f"context parallelism {context} is not enacted: {why}",
                "use context: 1; for memory, use activation_checkpointing: full, a smaller micro_batch "
                "with a larger grad_accum, fsdp sharding, or tensor parallelism",
            )
        )
    if pipeline > 1:
        out.append(
            Refusal(
                "RUN002",
                "parallelism.pipeline",
                pipeline,
                f"pipeline parallelism {pipeline} is not enacted: runlib's trainer has no pipeline schedule yet",
                "use pipeline: 1, with sharding: fsdp (or hsdp across nodes) and, if one layer's weights "
                "are too large, tensor parallelism",
            )
        )
    kv = kv_heads or heads
    if tensor > 1:
        sizes = (("heads", heads), ("kv_heads", kv), ("d_ff", d_ff), ("seq_len", seq_len))
        bad = [f"{name} {n}" for name, n in sizes if n % tensor]
        if bad:
            working = _divisors_above_one(math.gcd(*(n for _, n in sizes)))
            out.append(
                Refusal(
                    "RUN003",
                    "parallelism.tensor",
                    tensor,
                    f"tensor parallelism {tensor} splits q/k/v by whole heads, the MLP by hidden units and the "
                    f"sequence between blocks (sequence parallelism), and {', '.join(bad)} "
                    f"{'is' if len(bad) == 1 else 'are'} not divisible by {tensor}"
                    + (" (replicating key/value heads is not enacted)" if kv % tensor else ""),
                    "use a tensor degree dividing heads, kv_heads, d_ff and seq_len"
                    + (f" ({', '.join(map(str, working))})" if working else " (only 1 does)"),
                )
            )
        if qk_norm:
            out.append(
                Refusal(
                    "RUN003",
                    "parallelism.tensor",
                    tensor,
                    f"tensor parallelism {tensor} with model.qk_norm is not enacted: runlib's QK-norm normalizes "
                    "the whole q and k projections, across heads that tensor parallelism puts on different ranks",
                    "use tensor: 1 with qk_norm (shard with fsdp instead), or qk_norm: false",
                )
            )
    if sharding == "hsdp" and nodes > 1 and devices_per_node % model_parallel:
        out.append(
            Refusal(
                "RUN004",
                "parallelism.sharding",
                sharding,
                f"hsdp shards within a node and replicates across nodes, but tensor x pipeline x context = "
                f"{model_parallel} does not divide devices_per_node {devices_per_node}, so no shard group "
                "fits in one node",
                "use sharding: fsdp, or a tensor degree dividing devices_per_node",
            )
        )
    elif sharding == "hsdp" and nodes > 1 and devices_per_node // model_parallel == 1:
        out.append(
            Refusal(
                "RUN004",
                "parallelism.sharding",
                sharding,
                "hsdp shards within a node and replicates across nodes, but each node holds one data-parallel "
                "rank, so there is nothing to shard within a node",
                "use sharding: none (DDP across the nodes) or fsdp (sharded across the nodes)",
            )
        )
    if offload and accelerator == "cpu":
        out.append(
            Refusal(
                "RUN005",
                "parallelism.offload",
                True,
                "offload moves states to host memory, and on cpu the device memory is host memory already",
                "use offload: false",
            )
        )
    elif offload and data_parallel == 1:
        out.append(
            Refusal(
                "RUN005",
                "parallelism.offload",
                True,
                "offload is enacted through FSDP2's CPU offload policy on the data-parallel ranks, and this "
                "layout has a data-parallel degree of 1 (nothing is wrapped by FSDP2)",
                "use offload: false, or more devices than tensor x pipeline x context with sharding: fsdp",
            )
        )
    elif offload and sharding not in SHARDED:
        out.append(
            Refusal(
                "RUN005",
                "parallelism.offload",
                True,
                f"offload is enacted through FSDP2's CPU offload policy, which needs a sharded layout, "
                f"and sharding: {sharding} trains with DDP",
                "use sharding: zero2 or fsdp with offload, or offload: false",
            )
        )
    return out


def precision_refusals(*, compute: str, master_weights: str, optimizer_states: str) -> list[Refusal]:
    out: list[Refusal] = []
    if compute == "fp8":
        out.append(
            Refusal(
                "RUN006",
                "precision.compute",
                compute,
                "fp8 compute is not enacted: runlib's trainer has no fp8 matmul path (autocast stops at 16 bits)",
                "use compute: bf16 (fp16 with loss_scaling: dynamic on an accelerator without bf16)",
            )
        )
    params = parameter_dtype(compute if compute != "fp8" else "bf16", master_weights)
    if optimizer_states != params:
        out.append(
            Refusal(
                "RUN007",
                "precision.optimizer_states",
                optimizer_states,
                f"torch optimizers keep their states in the dtype of the parameters they update, which is "
                f"{params} here (compute {compute}, master_weights {master_weights}), not {optimizer_states}",
                f"use optimizer_states: {params}"
                if params in ("fp32", "bf16")
                else "use master_weights: fp32 and optimizer_states: fp32",
            )
        )
    return out


# ------------------------------------------------------------------- model and precision fields

# fields of model.* that runlib's tensor-parallel plan (runlib.model.parallelize) has no layout for: the
# plan shards q/k/v by heads and keeps the two pre-norms of a sequential block sequence-parallel; ALiBi's
# per-head slopes, a parallel block's single norm, an embedding norm and dropout under sequence
# parallelism (dropout needs the same mask on every TP rank: Megatron's CUDA RNG tracker) are not there
_NOT_UNDER_TENSOR = ("position alibi", "parallel_block", "embedding_norm", "dropout")


def model_refusals(model: Any, tensor: int) -> list[Refusal]:
    """What runlib's model or its tensor-parallel plan cannot build of model.* (pure; RUN008)."""
    out: list[Refusal] = []
    if model.position == "relative":
        out.append(
            Refusal(
                "RUN008",
                "model.position",
                "relative",
                "Transformer-XL relative positions (Dai et al. 2019) are planned (parameters and FLOPs) but "
                "runlib's model has no relative-position attention",
                "use position: alibi (no parameters, also relative; Press et al. 2022) or rope to train it here",
            )
        )
    if tensor > 1:
        used = {
            "position alibi": model.position == "alibi",
            "parallel_block": model.parallel_block,
            "embedding_norm": model.embedding_norm,
            "dropout": model.dropout > 0,
        }
        names = [name for name in _NOT_UNDER_TENSOR if used[name]]
        if names:
            field = "model.position" if names[0] == "position alibi" else f"model.{names[0]}"
            out.append(
                Refusal(
                    "RUN008",
                    field,
                    names,
                    f"tensor parallelism {tensor} with {', '.join(names)} is not enacted: runlib's tensor-parallel "
                    "plan has no layout for "
                    + ("them" if len(names) > 1 else "it")
                    + " (per-head ALiBi slopes, one norm per parallel block, an embedding norm, dropout on "
                    "sequence-parallel activations)",
                    "use tensor: 1 with fsdp sharding (the model shards by parameters instead)",
                )
            )
    return out


def precision_field_refusals(precision: Any) -> list[Refusal]:
    """Precision values the trainer cannot enact beyond runlib.audit.enact's (pure; RUN009)."""
    if precision.grads != "fp16":
        return []
    return [
        Refusal(
            "RUN009",
            "precision.grads",
            "fp16",
            "fp16 gradients are not enacted: runlib reduces gradients in fp32, or in bf16 for grads: bf16 "
            "(runlib.model.parallelize), so an fp16 reduction would silently be another dtype",
            "use grads: fp32 (with fp16 compute too: Megatron's --accumulate-allreduce-grads-in-fp32)",
        )
    ]


def batch_refusals(batch: Any) -> list[Refusal]:
    """Batch values the trainer cannot enact (pure; RUN010): a ramp stage's own micro-batch."""
    return [
        Refusal(
            "RUN010",
            f"batch.ramp[{i}].micro_batch",
            stage.micro_batch,
            f"ramp stage {i}'s micro_batch {stage.micro_batch} is not enacted: runlib's trainer splits every "
            f"step into micro-batches of batch.micro_batch ({batch.micro_batch}) and lets the ramp change only "
            "how many it accumulates (runlib.train.loop), so the run would hold other activations than planned",
            f"drop it (a ramp stage's global batch must then be a multiple of micro_batch {batch.micro_batch} x dp), "
            "or train that stretch as a phase of its own with phases[].batch.micro_batch",
        )
        for i, stage in enumerate(batch.ramp or [])
        if stage.micro_batch is not None and stage.micro_batch != batch.micro_batch
    ]


def train_config_refusals(config: Any) -> list[Refusal]:
    """The refusals of one training phase's stage config (runlib.train.config.TrainPhaseConfig, read
    duck-typed: accelerator, seq_len, model, parallel, precision, optimizer): the trainer's last guard."""
    par, model, precision = config.parallel, config.model, config.precision
    return (
        parallelism_refusals(
            accelerator=config.accelerator,
            nodes=par.nodes,
            devices_per_node=par.processes_per_node,
            tensor=par.tp,
            pipeline=par.pp,
            context=par.cp,
            sharding=par.sharding,
            offload=par.offload,
            heads=model.heads,
            kv_heads=model.kv_heads,
            d_ff=model.d_ff,
            qk_norm=model.qk_norm,
            seq_len=config.seq_len,
        )
        + precision_refusals(
            compute=precision.compute,
            master_weights=precision.master_weights,
            optimizer_states=precision.optimizer_states,
        )
        + model_refusals(model, par.tp)
        + precision_field_refusals(precision)
    )


# ----------------------------------------------------------------- input formats

# input.format values the schema accepts (a spec may plan a web crawl) that runlib.curate.readers cannot
# read: value -> (reason, fix)
FORMATS_NOT_ENACTED: dict[str, tuple[str, str]] = {
    "warc": (
        "the curation stage has no WARC reader (nor HTML text extraction) yet, "
        "so its first job would fail",
        'extract the pages\' text with a WARC tool and convert it to jsonl (one {"text": ...} object per line): '
        "runlib reads no WARC yet",
    ),
}


def input_refusals(sources: dict[str, Any]) -> list[Refusal]:
    """Sources whose input format the curation stage cannot read (pure; RUN011): `sources` maps a source
    name to its data.sources entry (read duck-typed: input.format)."""
    out = []
    for name, source in sources.items():
        fmt = source.input.format
        if fmt in FORMATS_NOT_ENACTED:
            reason, fix = FORMATS_NOT_ENACTED[fmt]
            out.append(Refusal("RUN011", f"data.sources.{name}.input.format", fmt, f"format {fmt}: {reason}", fix))
    return out
