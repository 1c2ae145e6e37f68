"""RUN008: a model field runlib's model or its tensor-parallel layout cannot build.

Why it matters:
    The spec can describe architectures the trainer does not build: Transformer-XL relative
    positions with their parameters (Dai et al. 2019, arXiv 1901.02860, section 3.3; Gopher, Rae et
    al. 2021) are counted in the plan's parameters and FLOPs, but runlib's attention has no
    relative-position term. And runlib's tensor-parallel plan (runlib.model.parallelize) shards
    q/k/v by heads and keeps the two pre-norms of a sequential block sequence-parallel: ALiBi's
    per-head slopes, a parallel block's single norm, an embedding norm, and dropout (the same mask on
    every tensor-parallel rank: Megatron's CUDA RNG tracker) have no layout there. Mixtures of experts,
    latent attention and MTP modules (model.moe, attention, mtp) are built and trained data-parallel
    (FSDP or DDP), not under tensor, pipeline or context parallelism, and parallelism.expert is planned
    (memory, all-to-all) but every rank keeps every expert. A run that
    trained something else would not be the run the audit planned, so the workflow gate refuses the
    spec before any job starts.

Flagged:
    model: {position: relative, ...}
    parallelism: {tensor: 4}  # with model: {position: alibi} or {parallel_block: true}
    parallelism: {expert: 8}  # with model: {moe: ...}

Preferred:
    model: {position: alibi, ...}
    parallelism: {tensor: 1, sharding: fsdp}

How to fix:
    Train relative-position models with position: alibi or rope; with ALiBi, parallel blocks, an
    embedding norm or dropout, use tensor: 1 and shard with fsdp. A warning in `runlib audit`; the
    workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import model_refusals

CODE = "RUN008"
NAME = "model-field-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    par = ctx.spec.parallelism
    degrees = {
        (
            p.settings.parallelism.tensor,
            p.settings.parallelism.pipeline,
            p.settings.parallelism.context,
            p.settings.parallelism.expert,
        )
        for p in ctx.plan.phases
    } or {(par.tensor, par.pipeline, par.context, par.expert)}
    seen = set()
    # the largest of each degree says it all
    tensor, pipeline, context, expert = (max(d[i] for d in degrees) for i in range(4))
    for r in model_refusals(ctx.spec.model, tensor, pipeline, context, expert):
        if (r.field, r.reason) not in seen:
            seen.add((r.field, r.reason))
            yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


PASS = [
    {},
    {"model.position": "alibi"},
    {"model.parallel_block": True, "model.norm": "layernorm", "model.norm_bias": True},
    {"model.embedding_norm": True, "model.dropout": 0.1},
    {"parallelism.tensor": 2, "hardware.devices_per_node": 8},
    {"model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01}},  # trained, data parallel
]
FAIL = [
    case({"model.position": "relative"}, "warning"),
    case({"model.position": "alibi", "parallelism.tensor": 2}, "warning"),
    case({"model.parallel_block": True, "phases[2].parallelism": {"tensor": 2}}, "warning"),
    case({"model.dropout": 0.1, "parallelism.tensor": 4}, "warning"),
    case(
        {"model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01}, "parallelism.tensor": 2},
        "warning",
    ),
    case(
        {"model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01}, "parallelism.expert": 2},
        "warning",
    ),
]
