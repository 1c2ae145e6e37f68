"""Trains a tiny transformer under several parallel layouts; run by tests/train/test_parallel.py.

    torchrun --standalone --nproc_per_node N tests/train/parallel_worker.py --set {2proc,4proc} --out R.pt --ckpt DIR

Every layout starts from the same seed-0 weights and trains on the same fixed batches (4 sequences of
32 tokens per step, split over the data-parallel ranks, 2 micro-batches each), with runlib's
parallelize, build_optimizer, clip_grad_norm_ and DCP checkpoints. Rank 0 writes {name: result} to
--out, a result being {"params": full state dict, "losses": [...]}; `train` with world size 1 (no
process group) is the reference the test computes in its own process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F

from runlib.model.parallelize import (
    build_mesh,
    clip_grad_norm_,
    data_parallel_rank_and_size,
    forward_context,
    gradient_group,
    no_sync,
    parallelize,
    pipeline_rank_and_group,
)
from runlib.model.pipeline import build_schedule, pipeline_stage, rank_stage_indices, rank_stage_parts, stage_chunks
from runlib.model.transformer import Transformer
from runlib.spec.models import ModelSpec
from runlib.train.dist_checkpoint import (
    full_model_state_dict,
    full_state_dicts,
    load_checkpoint,
    load_full_state_dicts,
    save_checkpoint,
)
from runlib.train.optim import build_optimizer

VOCAB, SEQ, BATCH, MICRO = 256, 32, 4, 2
LR = 1e-4  # Adam's update of a gradient within fp32 rounding of zero is up to ~lr: see test_parallel.py
STEPS, CKPT_STEP = 4, 2
MODELS = {
    "llama": dict(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128, seq_len=SEQ),
    # four blocks: two pipeline stages of two, or four virtual stages of one
    "llama4": dict(layers=4, d_model=64, heads=4, kv_heads=2, d_ff=128, seq_len=SEQ),
    # tied embeddings, learned positions, LayerNorm with biases, GELU: the other tensor-parallel paths
    "gpt2": dict(
        layers=2,
        d_model=64,
        heads=4,
        d_ff=128,
        seq_len=SEQ,
        activation="gelu",
        norm="layernorm",
        bias=True,
        position="learned",
        tie_embeddings=True,
    ),
}
FP32 = SimpleNamespace(compute="fp32", master_weights="fp32", grads="fp32", optimizer_states="fp32")
BF16 = SimpleNamespace(compute="bf16", master_weights="fp32", grads="fp32", optimizer_states="fp32")
BF16_PURE = SimpleNamespace(compute="bf16", master_weights="none", grads="bf16", optimizer_states="bf16")


def layout(dp_replicate=1, dp_shard=1, tp=1, sharding="none", recompute="none", cp=1, pp=1):
    return SimpleNamespace(
        dp_replicate=dp_replicate,
        dp_shard=dp_shard,
        tp=tp,
        cp=cp,
        pp=pp,
        sharding=sharding,
        activation_checkpointing=recompute,
        offload=False,
    )


def optimizer_cfg(kind="adamw"):
    return SimpleNamespace(kind=kind, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, decay_embeddings=True)


def tiny_model(name="llama") -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelSpec(**MODELS[name]), VOCAB, SEQ)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def documents(rows: int, first_row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """position_ids and doc_ids [rows, SEQ] of packed documents 11 tokens long, each row's first cut
    elsewhere (row r of the batch starts 5r tokens into a document): the masks differ per row."""
    index = torch.arange(SEQ)[None, :] + 5 * torch.arange(first_row, first_row + rows)[:, None]
    doc_ids = index // 11
    return index % 11, doc_ids


def local(model, rows: torch.Tensor) -> torch.Tensor:
    """This rank's tokens of rows under context parallelism (runlib.model.context_parallel)."""
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    return inner.context_parallel.local(rows) if inner.context_parallel is not None else rows


def build(parallel, precision=FP32, model_name="llama", kind="adamw"):
    mesh = build_mesh(parallel)
    model = parallelize(tiny_model(model_name), mesh, parallel, precision)
    return mesh, model, build_optimizer(model, optimizer_cfg(kind), precision)


def train(mesh, model, optimizer, steps: range, docs: bool = False) -> dict[str, list[float]]:
    """Token-mean cross-entropy over the whole step's batch; gradients clipped to norm 1. docs: rows packed
    with documents (`documents`), attention masked between them."""
    rank, size = data_parallel_rank_and_size(mesh)
    group = gradient_group(mesh)
    averaged = group.size() if group is not None else 1  # data-parallel x context-parallel ranks
    out = {"losses": [], "grad_norms": []}
    rows = BATCH // size
    micro = min(MICRO, rows)  # 2 micro-batches per step, 1 when a rank has 1 row (4-way data parallel)
    for step in steps:
        inputs, targets = batch(step)
        inputs, targets = inputs[rank * rows : (rank + 1) * rows], targets[rank * rows : (rank + 1) * rows]
        position_ids, doc_ids = documents(rows, rank * rows) if docs else (None, None)
        total = BATCH * SEQ  # every token is scored: the step's token count is known to every rank
        loss_sum = torch.zeros(())
        for m in range(micro):
            part = slice(m * rows // micro, (m + 1) * rows // micro)
            with no_sync(model) if m < micro - 1 else contextlib.nullcontext(), forward_context(model):
                if docs:
                    logits = model(inputs[part], position_ids[part], doc_ids[part])
                else:
                    logits = model(inputs[part])
                loss = F.cross_entropy(
                    logits.flatten(0, 1).float(), local(model, targets[part]).flatten(), reduction="sum"
                )
            # gradients are averaged over the ranks, so each contributes `averaged` / total
            (loss * (averaged / total)).backward()
            loss_sum += loss.detach()
        out["grad_norms"].append(clip_grad_norm_(model, 1.0))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if group is not None:
            dist.all_reduce(loss_sum, group=group)
        out["losses"].append(float(loss_sum) / total)
    return out


def build_pipeline(parallel, schedule: str, virtual: int = 1, model_name="llama4", precision=FP32):
    """This rank's stage modules (runlib.model.pipeline.rank_stage_parts), each parallelised like a model, their
    PipelineStages and one optimizer over them."""
    mesh = build_mesh(parallel)
    pp_rank, pp_group = pipeline_rank_and_group(mesh)
    chunks = stage_chunks(MODELS[model_name]["layers"], parallel.pp, virtual)
    ids = rank_stage_indices(pp_rank, parallel.pp, virtual)
    # as runlib's engine builds them: with several per rank, parts that share one model's modules
    modules, holder = rank_stage_parts(tiny_model(model_name), chunks, ids)
    for m in modules:
        parallelize(m, mesh, parallel, precision)
    stages = [
        pipeline_stage(m, i, len(chunks), torch.device("cpu"), pp_group) for m, i in zip(modules, ids, strict=True)
    ]
    # the optimizer over the holder: the parts' parameters under the model's own names
    optimizer = build_optimizer(holder, optimizer_cfg(), precision)
    return mesh, modules, stages, optimizer, schedule


def train_pipeline(
    mesh, modules, stages, optimizer, schedule_kind, steps: range, docs: bool = False, micro_batches: int = MICRO
) -> dict:
    """`train` through a pipeline schedule: the micro-batches are the schedule's, the loss (on the last stage)
    carries the step's normalization, and the gradient norm is summed over the stages."""
    rank, size = data_parallel_rank_and_size(mesh)
    _, pp_group = pipeline_rank_and_group(mesh)
    group = gradient_group(mesh)
    averaged = group.size() if group is not None else 1
    rows = BATCH // size
    micro = min(micro_batches, rows)
    total = BATCH * SEQ

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="sum")
        return loss * (averaged / total)

    schedule = build_schedule(schedule_kind, stages, micro, loss_fn)
    out = {"losses": [], "grad_norms": []}
    for step in steps:
        inputs, targets = batch(step)
        inputs, targets = inputs[rank * rows : (rank + 1) * rows], targets[rank * rows : (rank + 1) * rows]
        position_ids, doc_ids = documents(rows, rank * rows) if docs else (torch.arange(SEQ).expand(rows, SEQ), None)
        kwargs = {"position_ids": position_ids, **({"doc_ids": doc_ids} if docs else {})}
        # the micro-batches' losses as loss_fn returned them (its first step also calls it once to infer shapes)
        losses: list[torch.Tensor] = []
        schedule.step(inputs, target=targets, losses=losses, **kwargs)
        loss_sum = sum((x.detach() for x in losses), torch.zeros(())) * (total / averaged)
        out["grad_norms"].append(clip_grad_norm_(modules, 1.0, pp_group))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        summed = loss_sum.clone()
        dist.all_reduce(summed, group=pp_group)  # only the last stage computed it
        if group is not None:
            dist.all_reduce(summed, group=group)
        out["losses"].append(float(summed) / total)
    return out


def pipeline_result(mesh, modules, part: dict) -> dict:
    """The whole model's parameters on rank 0: every stage's full tensors, gathered over the pipeline group."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    _, pp_group = pipeline_rank_and_group(mesh)
    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    mine = {k: v.detach().cpu() for m in modules for k, v in get_model_state_dict(m, options=options).items()}
    dst = dist.get_global_rank(pp_group, 0)  # each pipeline group gathers on its first stage
    parts = [None] * dist.get_world_size(pp_group) if dist.get_rank() == dst else None
    dist.gather_object(mine, parts, dst=dst, group=pp_group)
    params = {k: v for p in parts for k, v in p.items()} if parts is not None and dist.get_rank() == 0 else {}
    return {"params": params, **part}


def run_pipeline(parallel, schedule: str, virtual: int = 1, docs: bool = False, micro_batches: int = MICRO) -> dict:
    mesh, modules, stages, optimizer, kind = build_pipeline(parallel, schedule, virtual)
    trained = train_pipeline(mesh, modules, stages, optimizer, kind, range(STEPS), docs, micro_batches)
    return pipeline_result(mesh, modules, trained)


def checkpointed_pipeline(parallel, ckpt: Path, schedule: str = "1f1b") -> tuple[dict, dict]:
    """`checkpointed` for one stage per rank: each stage saves its own blocks into one DCP checkpoint, and a
    fresh pipeline resumes from it."""
    mesh, modules, stages, optimizer, kind = build_pipeline(parallel, schedule)
    [stage] = modules
    first = train_pipeline(mesh, modules, stages, optimizer, kind, range(CKPT_STEP), docs=True)
    save_checkpoint(ckpt, stage, optimizer, {"step": CKPT_STEP, "rng": torch.get_rng_state()}, staged=True)
    rest = train_pipeline(mesh, modules, stages, optimizer, kind, range(CKPT_STEP, STEPS), docs=True)
    whole = pipeline_result(mesh, modules, {k: first[k] + rest[k] for k in first})
    mesh, modules, stages, optimizer, kind = build_pipeline(parallel, schedule)
    extra = load_checkpoint(ckpt, modules[0], optimizer, staged=True)
    torch.set_rng_state(extra["rng"])
    resumed = train_pipeline(mesh, modules, stages, optimizer, kind, range(extra["step"], STEPS), docs=True)
    return whole, pipeline_result(mesh, modules, resumed)


def result(model, *parts: dict) -> dict:
    out = {"params": full_model_state_dict(model), "losses": [], "grad_norms": []}
    for part in parts:
        out["losses"] += part["losses"]
        out["grad_norms"] += part["grad_norms"]
    return out


def run(parallel, steps=STEPS, docs=False, **kwargs) -> dict:
    mesh, model, optimizer = build(parallel, **kwargs)
    return result(model, train(mesh, model, optimizer, range(steps), docs=docs))


def resume(parallel, ckpt: Path, docs=False, **kwargs) -> dict:
    mesh, model, optimizer = build(parallel, **kwargs)
    extra = load_checkpoint(ckpt, model, optimizer)
    torch.set_rng_state(extra["rng"])
    return result(model, train(mesh, model, optimizer, range(extra["step"], STEPS), docs=docs))


def checkpointed(parallel, ckpt: Path, docs=False) -> tuple[dict, dict]:
    """Trained to CKPT_STEP, saved (DCP), trained on; and the run resumed from that save in a fresh model."""
    mesh, model, optimizer = build(parallel)
    first = train(mesh, model, optimizer, range(CKPT_STEP), docs=docs)
    save_checkpoint(ckpt, model, optimizer, {"step": CKPT_STEP, "rng": torch.get_rng_state()})
    whole = result(model, first, train(mesh, model, optimizer, range(CKPT_STEP, STEPS), docs=docs))
    return whole, resume(parallel, ckpt, docs=docs)


def resume_full(parallel, path: Path, **kwargs) -> dict:
    """Resume from full_state_dicts' file (whole tensors, optimizer keyed by name) at step CKPT_STEP."""
    if dist.is_initialized():
        dist.barrier()  # rank 0 wrote it
    mesh, model, optimizer = build(parallel, **kwargs)
    model_state, optim_state = torch.load(path, weights_only=True)
    load_full_state_dicts(model, optimizer, model_state, optim_state)
    return result(model, train(mesh, model, optimizer, range(CKPT_STEP, STEPS)))


def two_processes(ckpt: Path) -> dict:
    out = {}
    # FSDP with a checkpoint after step CKPT_STEP, then resumed from it in a fresh model
    mesh, model, optimizer = build(layout(dp_shard=2, sharding="fsdp"))
    first = train(mesh, model, optimizer, range(CKPT_STEP))
    save_checkpoint(ckpt, model, optimizer, {"step": CKPT_STEP, "rng": torch.get_rng_state()})
    full = full_state_dicts(model, optimizer)  # the one-file form, beside the sharded checkpoint
    if dist.get_rank() == 0:
        torch.save(full, ckpt.with_name("full.pt"))
    out["fsdp"] = result(model, first, train(mesh, model, optimizer, range(CKPT_STEP, STEPS)))
    out["fsdp_resumed"] = resume(layout(dp_shard=2, sharding="fsdp"), ckpt)
    out["fsdp_resumed_full"] = resume_full(layout(dp_shard=2, sharding="fsdp"), ckpt.with_name("full.pt"))

    out["zero2"] = run(layout(dp_shard=2, sharding="zero2"))
    out["ddp"] = run(layout(dp_replicate=2))
    out["hsdp_replicate_only"] = run(layout(dp_replicate=2, sharding="hsdp"))  # 2 nodes x 1 process
    out["tp"] = run(layout(tp=2))
    out["tp_gpt2"] = run(layout(tp=2), model_name="gpt2")
    out["fsdp_full"] = run(layout(dp_shard=2, sharding="fsdp", recompute="full"))
    out["fsdp_selective"] = run(layout(dp_shard=2, sharding="fsdp", recompute="selective"))
    for kind in ("adam", "adafactor", "muon"):
        out[f"fsdp_{kind}"] = run(layout(dp_shard=2, sharding="fsdp"), kind=kind)
    out["fsdp_bf16"] = run(layout(dp_shard=2, sharding="fsdp"), precision=BF16)
    out["fsdp_bf16_pure"] = run(layout(dp_shard=2, sharding="fsdp"), precision=BF16_PURE)
    out["ddp_bf16"] = run(layout(dp_replicate=2), precision=BF16)
    out["tp_bf16"] = run(layout(tp=2), precision=BF16)
    # context parallelism (runlib.model.context_parallel): DDP over the cp ranks, FSDP2 sharded over them
    out["cp"] = run(layout(cp=2))
    out["cp_docs"] = run(layout(cp=2), docs=True)
    out["cp_gpt2"] = run(layout(cp=2), model_name="gpt2")  # learned positions, tied embeddings
    out["cp_fsdp_docs"], out["cp_fsdp_docs_resumed"] = checkpointed(
        layout(cp=2, sharding="fsdp"), ckpt.with_name("cp-step-2"), docs=True
    )
    out["cp_fsdp_full"] = run(layout(cp=2, sharding="fsdp", recompute="full"), docs=True)
    # pipeline parallelism (runlib.model.pipeline): 4 blocks over 2 stages, or 4 virtual stages of 1
    out["pp_1f1b"] = run_pipeline(layout(pp=2), "1f1b")
    # one micro-batch, fewer than the stages (a batch ramp's first steps): torch's 1F1B refuses it, runlib runs GPipe
    out["pp_1f1b_one_micro_batch"] = run_pipeline(layout(pp=2), "1f1b", micro_batches=1)
    out["pp_gpipe_docs"] = run_pipeline(layout(pp=2), "gpipe", docs=True)
    out["pp_interleaved_docs"] = run_pipeline(layout(pp=2), "interleaved_1f1b", virtual=2, docs=True)
    return out


def four_processes(ckpt: Path) -> dict:
    out = {}
    out["fsdp_tp"] = run(layout(dp_shard=2, tp=2, sharding="fsdp"))
    out["hsdp"] = run(layout(dp_replicate=2, dp_shard=2, sharding="hsdp"))
    out["ddp_tp"] = run(layout(dp_replicate=2, tp=2))
    out["fsdp_tp_muon"] = run(layout(dp_shard=2, tp=2, sharding="fsdp"), kind="muon")
    out["fsdp_tp_adafactor"] = run(layout(dp_shard=2, tp=2, sharding="fsdp"), kind="adafactor")
    out["resumed_fsdp_tp"] = resume(layout(dp_shard=2, tp=2, sharding="fsdp"), ckpt)
    out["cp_fsdp2_docs"] = run(layout(dp_shard=2, cp=2, sharding="fsdp"), docs=True)  # states over dp_shard x cp
    out["cp_tp_docs"] = run(layout(cp=2, tp=2), docs=True)
    out["cp_ddp"] = run(layout(dp_replicate=2, cp=2))
    out["pp_ddp"] = run_pipeline(layout(pp=2, dp_replicate=2), "1f1b")  # FSDP2's replicate on each stage
    out["pp_tp_docs"] = run_pipeline(layout(pp=2, tp=2), "1f1b", docs=True)
    out["pp_fsdp_docs"], out["pp_fsdp_docs_resumed"] = checkpointed_pipeline(
        layout(pp=2, dp_shard=2, sharding="fsdp"), ckpt.with_name("pp-step-2")
    )
    return out


def eight_processes(ckpt: Path) -> dict:
    """3-D: tensor 2 x pipeline 2 x FSDP 2."""
    return {"pp_tp_fsdp_docs": run_pipeline(layout(pp=2, tp=2, dp_shard=2, sharding="fsdp"), "1f1b", docs=True)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", choices=["2proc", "4proc", "8proc"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ckpt", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    t0 = time.time()
    out = {"2proc": two_processes, "4proc": four_processes, "8proc": eight_processes}[args.set](args.ckpt)
    if dist.get_rank() == 0:
        out["seconds"] = time.time() - t0
        torch.save(out, args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
