"""What the runlib trainer enacts: one pure rule set for the audit's RUN checks and the trainer's last guard.

The trainer enacts (see the README, "What the trainer enacts"): sharding none (DDP), zero1 and
zero2 (both FSDP2 without resharding after forward), fsdp (FSDP2) and hsdp (FSDP2 on a 2-D mesh,
replicated across nodes, sharded within one); tensor > 1 with heads, kv_heads, d_ff and the sequence
length divisible by it and no QK-norm; activation checkpointing none, selective, full; offload on an
accelerator, under a sharded layout with data parallelism; optimizers adamw, adam, adafactor, muon;
compute fp32, bf16, fp16 (where the device has it: PREC004), master weights fp32 or none, gradients
fp32 or bf16, optimizer states in the dtype of the parameters the optimizer updates. Every other
value is a refusal here, with the reason and the fix. The parallel layout's rules (RUN001-RUN005) are
the layout's own (runlib.plan.layout.Layout.refusals), which runlib.model.parallelize reads as well;
runlib.train.optim checks the optimizer; all of it is checked before any job starts. The curation stage
reads every data.sources.*.input.format; what only a warc source can enact (input.extract, and
curate.url_filter, which needs the pages' URLs) is refused elsewhere (RUN011). The rules read spec sections and the layout (no RunSpec), so the trainer calls
`train_config_refusals` with its stage config; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from runlib.plan.layout import Layout, Refusal
from runlib.plan.layout import divisors_above_one as _divisors_above_one
from runlib.spec.models import BatchSpec, ModelSpec, PrecisionSpec, Sharding, SourceSpec

__all__ = [
    "Refusal",
    "accelerator_refusals",
    "_divisors_above_one",
    "batch_refusals",
    "input_refusals",
    "curate_refusals",
    "model_refusals",
    "parameter_dtype",
    "precision_field_refusals",
    "precision_refusals",
    "train_config_refusals",
]


def parameter_dtype(compute: str, master_weights: str) -> str:
    """The dtype of the parameters the optimizer updates: the fp32 master copy, or the compute dtype."""
    return "fp32" if compute == "fp32" or master_weights == "fp32" else compute


def precision_refusals(*, compute: str, master_weights: str, optimizer_states: str) -> list[Refusal]:
    """Precision values the trainer cannot enact (pure; RUN006, RUN007)."""
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


def model_refusals(
    model: ModelSpec,
    tensor: int,
    pipeline: int = 1,
    context: int = 1,
    expert: int = 1,
    sharding: Sharding = "none",
) -> list[Refusal]:
    """What runlib's model or its parallel layout cannot build of model.* (pure; RUN008)."""
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
    out += sparse_model_refusals(model, tensor, pipeline, context, expert, sharding)
    if tensor > 1:
        used: dict[str, bool] = {
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


def sparse_model_refusals(
    model: ModelSpec, tensor: int, pipeline: int, context: int, expert: int, sharding: Sharding = "none"
) -> list[Refusal]:
    """The layouts runlib's trainer does not build mixtures of experts, latent attention or MTP modules in
    (RUN008): the tensor-parallel plan shards Attention's and MLP's projections by name; pipeline stages
    would carry the auxiliary losses between them; MTP reads whole rows and MLA gathers no context-parallel
    keys. Expert parallelism (parallelism.expert > 1 with model.moe) is built with sharding none (FSDP2's
    replicate) and fsdp (the experts fully sharded over the ranks that hold the same ones): runlib.model.
    expert_parallel; not with zero1/zero2 or hsdp. Anything else of them is built (runlib.model.moe, mla, mtp,
    expert_parallel; runlib.train.experts). An expert degree on a dense model is MOE001's."""
    parts = [
        (name, what)
        for name, what, present in (
            ("moe", "mixture-of-experts layers", model.moe is not None),
            ("attention", "multi-head latent attention", model.attention is not None),
            ("mtp", "multi-token prediction", model.mtp is not None),
        )
        if present
    ]
    out: list[Refusal] = []
    if expert > 1 and model.moe is not None and sharding not in ("none", "fsdp"):
        out.append(
            Refusal(
                "RUN008",
                "parallelism.expert",
                expert,
                f"expert parallelism {expert} with sharding {sharding} is not enacted: runlib's trainer wraps the "
                "expert-parallel experts with FSDP2 on the ranks holding the same experts under sharding none "
                "(replicated) and fsdp (sharded) only"
                + (
                    " (hsdp's 2-D data-parallel mesh has no expert mesh beside it)"
                    if sharding == "hsdp"
                    else " (zero1/zero2 keep the gathered weights to the end of the backward: untested with experts)"
                ),
                "use sharding: fsdp (or none) with expert parallelism, or expert: 1",
            )
        )
    for degree, name, field in ((tensor, "tensor", "tensor"), (pipeline, "pipeline", "pipeline")):
        if degree > 1 and parts:
            out.append(
                Refusal(
                    "RUN008",
                    f"model.{parts[0][0]}",
                    f"{name} {degree}",
                    f"{' and '.join(w for _, w in parts)} under {name} parallelism {degree} are not enacted: "
                    f"runlib's {name}-parallel layout has no plan for them",
                    f"use parallelism.{field}: 1 with fsdp sharding",
                )
            )
    if context > 1 and parts:
        out.append(
            Refusal(
                "RUN008",
                f"model.{parts[0][0]}",
                f"context {context}",
                f"{' and '.join(w for _, w in parts)} under context parallelism {context} are not enacted "
                "(MTP reads whole rows, latent attention gathers no other rank's keys, and the experts' "
                "balancing is untested on a rank's share of a row)",
                "use parallelism.context: 1 (a shorter seq_len, or recompute to fit the longer one)",
            )
        )
    return out


def precision_field_refusals(precision: PrecisionSpec) -> list[Refusal]:
    """Precision values the trainer cannot enact beyond runlib.plan.enact's (pure; RUN009)."""
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


def batch_refusals(batch: BatchSpec) -> list[Refusal]:
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


class _Parallel(Protocol):
    @property
    def layout(self) -> Layout: ...


class TrainConfig(Protocol):
    """What the trainer's last guard reads of runlib.train.config.TrainPhaseConfig, structurally: plan
    sits below train in the layers (pyproject.toml), and import-linter counts TYPE_CHECKING imports too."""

    @property
    def accelerator(self) -> str: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def model(self) -> ModelSpec: ...
    @property
    def precision(self) -> PrecisionSpec: ...
    @property
    def parallel(self) -> _Parallel: ...
    @property
    def micro_batch_counts(self) -> set[int]: ...


def accelerator_refusals(accelerator: str) -> list[Refusal]:
    """An accelerator the trainer has no device for (pure; RUN014): PyTorch trains here on CUDA, ROCm or the
    CPU, and a TPU needs torch_xla or JAX, which runlib's trainer does not drive."""
    if not accelerator.lower().startswith("tpu"):
        return []
    return [
        Refusal(
            "RUN014",
            "hardware.accelerator",
            accelerator,
            f"{accelerator} is a TPU: runlib's trainer runs PyTorch on CUDA, ROCm or the CPU and has no XLA path, so "
            "a TPU spec is planned and audited, not trained",
            "keep it to plan and audit the run; to train it here, give a GPU accelerator (e.g. h100-sxm)",
        )
    ]


def train_config_refusals(config: TrainConfig) -> list[Refusal]:
    """The refusals of one training phase's stage config (runlib.train.config.TrainPhaseConfig): the
    trainer's last guard, the same rules as the audit's RUN checks."""
    layout, precision = config.parallel.layout, config.precision
    return (
        layout.refusals(config.accelerator, config.model, config.seq_len, micro_batches=config.micro_batch_counts)
        + precision_refusals(
            compute=precision.compute,
            master_weights=precision.master_weights,
            optimizer_states=precision.optimizer_states,
        )
        + model_refusals(config.model, layout.tp, layout.pp, layout.cp, layout.ep, layout.sharding)
        + precision_field_refusals(precision)
        + accelerator_refusals(config.accelerator)
    )


# ----------------------------------------------------------------- input formats


def input_refusals(sources: Mapping[str, SourceSpec]) -> list[Refusal]:
    """Source fields that only a warc source enacts, set on another format (pure; RUN011): `sources` maps a
    source name to its data.sources entry."""
    out = []
    for name, source in sources.items():
        fmt = source.input.format
        if fmt == "warc":
            continue
        if source.input.extract is not None:
            out.append(
                Refusal(
                    "RUN011",
                    f"data.sources.{name}.input.extract",
                    source.input.extract,
                    f"input.extract turns HTML into text, and a {fmt} source holds text already",
                    "remove input.extract, or use format warc for HTML pages",
                )
            )
        if source.curate.url_filter is not None:
            out.append(
                Refusal(
                    "RUN011",
                    f"data.sources.{name}.curate.url_filter",
                    "set",
                    f"curate.url_filter reads each document's URL, and a {fmt} source's documents carry none",
                    "remove curate.url_filter, or filter the URLs before the data reaches runlib",
                )
            )
    return out


def curate_refusals(sources: Mapping[str, SourceSpec]) -> list[Refusal]:
    """Curation values no stage enacts on this machine (pure; RUN013): `sources` maps a source name to its
    data.sources entry."""
    out = []
    for name, source in sources.items():
        curate = source.curate
        if curate.pii == "ner" and curate.ner is None:
            out.append(
                Refusal(
                    "RUN013",
                    f"data.sources.{name}.curate.pii",
                    "ner",
                    "pii: ner needs a named-entity model (names, places), and runlib ships none and downloads "
                    "nothing at run time",
                    "give one: curate.ner: {model: PATH} (a spaCy pipeline folder, e.g. an installed "
                    "en_core_web_sm's), or use pii: mask or drop (e-mail, IPv4, IPv6, phone and payment card "
                    "numbers, found by rules)",
                )
            )
        elif curate.ner is not None and curate.pii != "ner":
            out.append(
                Refusal(
                    "RUN013",
                    f"data.sources.{name}.curate.ner",
                    curate.ner.model,
                    f"curate.ner's model runs only under pii: ner, and this source has pii: {curate.pii}",
                    "set pii: ner to mask the entities it finds, or delete curate.ner",
                )
            )
    return out
