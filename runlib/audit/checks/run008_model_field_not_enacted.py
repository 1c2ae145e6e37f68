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
    (FSDP or DDP), not under tensor, pipeline or context parallelism. Expert parallelism
    (parallelism.expert, GShard, Lepikhin et al. 2020, arXiv 2006.16668: each of `expert` data-parallel
    ranks holds experts / expert of every MoE layer, tokens exchanged by all-to-all) is trained with
    sharding none and fsdp (runlib.model.expert_parallel: the experts are wrapped by FSDP2 over the ranks
    that hold the same ones, as torchtitan's parallelize does); zero1, zero2 and hsdp have no expert
    layout beside them. A run that trained something else would not be the run the audit planned, so the
    workflow gate refuses the spec before any job starts.

Flagged:
    model: {position: relative, ...}
    parallelism: {tensor: 4}  # with model: {position: alibi} or {parallel_block: true}
    parallelism: {expert: 8, sharding: hsdp}  # with model: {moe: ...}; zero1 and zero2 as well

Preferred:
    model: {position: alibi, ...}
    parallelism: {tensor: 1, sharding: fsdp}
    parallelism: {expert: 8, sharding: fsdp}  # with model: {moe: ...}

How to fix:
    Train relative-position models with position: alibi or rope; with ALiBi, parallel blocks, an
    embedding norm or dropout, use tensor: 1 and shard with fsdp; with expert parallelism, shard with
    fsdp or none. A warning in `runlib audit`; the workflow gate refuses it.
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
    settings = [p.settings.parallelism for p in ctx.plan.phases] or [par]
    degrees = {(s.tensor, s.pipeline, s.context, s.expert) for s in settings}
    seen = set()
    # the largest of each degree says it all; the expert layout is checked with each phase's sharding
    tensor, pipeline, context, expert = (max(d[i] for d in degrees) for i in range(4))
    shardings = sorted({s.sharding for s in settings if s.expert > 1}) or [par.sharding]
    for sharding in shardings:
        for r in model_refusals(ctx.spec.model, tensor, pipeline, context, expert, sharding):
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
    # expert parallelism, enacted under sharding none and fsdp
    {"model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01}, "parallelism.expert": 2},
    {
        "model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01},
        "parallelism": {"expert": 2, "sharding": "fsdp"},
    },
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
        {
            "model.moe": {"experts": 4, "top_k": 2, "expert_d_ff": 64, "aux_loss": 0.01},
            "parallelism": {"expert": 2, "sharding": "zero2"},
        },
        "warning",
    ),
]
