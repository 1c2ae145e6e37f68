"""Benchmark the training step: runlib's real loop against a bare nanoGPT-style loop, interleaved.

    python -m runlib.bench.train_step [--pairs 6] [--steps 12] [--accum 2] [--processes 2] [--spec specs/demo.yaml]
        [--phase NAME] [--context C]

What it measures: tokens/s of training steps on --processes CPU processes (DDP over gloo, one process
group, torch.multiprocessing), the two loops taking turns in the same processes (bare, runlib, bare,
runlib, ...: --pairs of each, --steps optimizer steps per turn). A turn's tokens/s is a step's tokens
over its median step time, the first step left out (warm-up; a median, because other work on a shared
machine lands on a few steps). Beside it: tokens per CPU-second of one process (the median step's
process CPU time, rank 0: the figure other work on the machine moves least, though a process that
waits in more collectives loses wall time it does not show) and the whole turn's tokens/s (runlib's
from its run.json; model set-up and the final checkpoint outside both). It prints every pair, then for
tokens/s and tokens per CPU-second the median of each loop and the ratio runlib / bare (of the
medians, and the median of the per-pair ratios).

  runlib  runlib.train.loop.train_phase_loop with the spec's first phase's TrainPhaseConfig (the demo's
          foundation phase: 4 x 128 Llama-style, vocabulary 4096, seq 256, micro-batch 8), every
          training feature on: packed documents with document-causal attention masks, z-loss, the
          per-source loss, --accum micro-batches per step (DDP no_sync before the last), global-token
          loss normalization, gradient clipping, the spike detector. Changed from the spec only where a
          benchmark must: --steps per turn, no periodic checkpoints or held-out evaluation, a global
          batch of micro_batch * processes * accum sequences.
  bare    the peer, written here as nanoGPT's train.py writes it (karpathy/nanoGPT @ 3adf61e, train.py
          and model.py): a single-file model of the same shape (RMSNorm, RoPE, grouped-query SDPA with
          is_causal, SwiGLU, tied embeddings: the same parameter count, checked), random windows of the
          same tokens (no document masks), F.cross_entropy mean / accum per micro-batch, DDP
          require_backward_grad_sync on the last, torch's clip_grad_norm_, AdamW with weight decay on
          the matrices, loss.item() once per step.

  cp      with --context C: runlib's loop again, the same config with context parallelism C (each row's
          tokens over C processes, runlib.model.context_parallel; the data-parallel degree / C and the
          accumulation x C, so the same batch), a third turn in every pair; printed against runlib's DDP
          turn. --phase picks the spec's phase (the demo's `long`: seq 512). --pipeline P instead: the
          same with P pipeline stages (runlib.model.pipeline, 1F1B), the blocks split over the processes.
          --moe E instead: the same phase with every MLP a mixture of E experts of d_ff / 2 hidden units,
          top-2 (runlib.model.moe: router, grouped experts, balancing loss 0.01, z-loss 0.001): the dense
          model is its twin of the same active parameters (the router's d_model x E aside), so the ratio
          is what routing, sorting and the grouped matmul cost per token.

Tokens: synthetic (seeded, uniform ids below the vocabulary's last four rows, which serve as EOS and the
FIM ids; documents of a few hundred tokens ending in EOS; one shard per source of the phase's mixture), so it runs from a clean clone without the
data stages. Goal: runlib >= 1.0x bare.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runlib.data.shards import write_shard
from runlib.plan import derive
from runlib.plan.layout import Layout
from runlib.plan.params import head_dim, kv_heads
from runlib.spec import load_spec
from runlib.train.config import ParallelConfig, TrainPhaseConfig, build_train_phase_configs

if TYPE_CHECKING:  # torch, accelerate and the runlib modules that import torch load in the functions that train
    import torch
    from accelerate import Accelerator
    from torch import nn

SHARD_TOKENS = 300_000  # per source; the loader wraps around (epochs) when a turn reads more
MEAN_DOC_TOKENS = {"arithmetic": 24}  # other sources: 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def phase_config(spec_path: str, processes: int, accum: int, steps: int, phase: str | None = None) -> TrainPhaseConfig:
    """The spec's phase `phase` (default the first) TrainPhaseConfig, with the benchmark's changes (see the
    docstring): the data-parallel layout (DDP) on `processes`."""
    spec = load_spec(spec_path).spec
    configs = build_train_phase_configs(spec, derive(spec))
    cfg = next((c for c in configs if c.phase_name == phase), None) if phase else configs[0]
    if cfg is None:
        raise ValueError(f"no phase {phase!r} in {spec_path}: {', '.join(c.phase_name for c in configs)}")
    layout = Layout(1, processes, dp_replicate=processes, dp_shard=1)
    cfg = cfg.model_copy(update={"parallel": ParallelConfig.of(layout, cfg.parallel.activation_checkpointing)})
    batch = cfg.micro_batch * processes * accum
    loader = cfg.loader.model_copy(
        update={
            "segments": [
                cfg.loader.segments[0].model_copy(update={"start_step": 0, "steps": None, "batch_sequences": batch})
            ]
        }
    )
    span = cfg.span.model_copy(update={"start_step": 0, "end_step": steps, "start_tokens": 0})
    return cfg.model_copy(
        update={
            "loader": loader,
            "span": span,
            "checkpoint": cfg.checkpoint.model_copy(update={"every_steps": None}),
            "monitor": cfg.monitor.model_copy(update={"eval_every_steps": None, "log_every_tokens": 2**62}),  # end only
        }
    )


def model_parallel_config(cfg: TrainPhaseConfig, context: int = 1, pipeline: int = 1) -> TrainPhaseConfig:
    """cfg with context or pipeline parallelism on its processes: dp / (context x pipeline), the batch
    unchanged (the loop accumulates more micro-batches)."""
    ddp = cfg.parallel.layout
    layout = replace(ddp, dp_replicate=ddp.dp_replicate // (context * pipeline), cp=context, pp=pipeline)
    return cfg.model_copy(update={"parallel": ParallelConfig.of(layout, cfg.parallel.activation_checkpointing)})


def special_ids(cfg: TrainPhaseConfig) -> dict[str, int]:
    """EOS and the FIM ids: the vocabulary's last four rows; synthetic text uses the ids below them."""
    top = cfg.vocab_rows
    return {"eos": top - 4, "fim_prefix": top - 3, "fim_middle": top - 2, "fim_suffix": top - 1}


def write_shards(cfg: TrainPhaseConfig, root: Path, seed: int) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    dirs = {}
    for name in sorted(cfg.loader.mixture):
        mean = MEAN_DOC_TOKENS.get(name, 300)
        docs: list[list[int]] = []
        total = 0
        while total < SHARD_TOKENS:
            n = int(rng.geometric(1 / mean)) + 1
            doc = rng.integers(0, special_ids(cfg)["eos"], n, dtype=np.int64)
            doc[-1] = special_ids(cfg)["eos"]
            docs.append(doc.tolist())
            total += n
        write_shard(root / name, "train", docs, np.uint16)
        dirs[name] = root / name
    return dirs


# ------------------------------------------------------------------------------ the peer: nanoGPT style


def bare_model(cfg: TrainPhaseConfig) -> nn.Module:
    """A single-file Llama-style model of the config's shape (nanoGPT's model.py, Llama's parts)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    m = cfg.model
    d, heads, kv, hd = m.d_model, m.heads, kv_heads(m), head_dim(m)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
            self.q, self.k, self.v = (
                nn.Linear(d, heads * hd, False),
                nn.Linear(d, kv * hd, False),
                nn.Linear(d, kv * hd, False),
            )
            self.o = nn.Linear(heads * hd, d, False)
            self.w1, self.w3, self.w2 = (
                nn.Linear(d, m.d_ff, False),
                nn.Linear(d, m.d_ff, False),
                nn.Linear(m.d_ff, d, False),
            )

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            h = self.n1(x)
            q = self.q(h).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(h).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(h).view(b, t, kv, hd).transpose(1, 2)
            q, k = (z * cos + torch.cat([-z[..., hd // 2 :], z[..., : hd // 2]], -1) * sin for z in (q, k))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
            h = self.n2(x)
            out: torch.Tensor = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
            return out

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab_rows, d)
            self.blocks = nn.ModuleList(Block() for _ in range(m.layers))
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.head = nn.Linear(d, cfg.vocab_rows, False)
            self.head.weight = self.wte.weight  # weight tying
            freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
            angles = torch.outer(torch.arange(cfg.seq_len).float(), freq).repeat(1, 2)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx)
            for block in self.blocks:
                x = block(x, self.cos, self.sin)
            logits: torch.Tensor = self.head(self.norm(x))
            return logits

    return GPT()


def bare_turn(
    cfg: TrainPhaseConfig, tokens: np.ndarray, rank: int, world: int, accum: int, steps: int, turn: int
) -> list[tuple[float, float]]:
    """One turn of the nanoGPT-style loop; returns (wall clock, CPU clock) at its start and after every step."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(cfg.seed)
    model = DDP(bare_model(cfg))
    opt = cfg.optimizer
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=opt.lr,
        betas=opt.betas,
        eps=opt.eps,
    )
    rng = np.random.default_rng([cfg.seed, rank, turn])
    length, micro = cfg.seq_len, cfg.micro_batch

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ix = rng.integers(0, len(tokens) - length - 1, micro)
        x = torch.from_numpy(np.stack([tokens[i : i + length] for i in ix]).astype(np.int64))
        y = torch.from_numpy(np.stack([tokens[i + 1 : i + 1 + length] for i in ix]).astype(np.int64))
        return x, y

    model.train()  # type: ignore[no-untyped-call]  # torch: DistributedDataParallel.train is unannotated
    x, y = get_batch()
    marks = [(time.perf_counter(), time.process_time())]
    for _ in range(steps):
        for micro_step in range(accum):
            model.require_backward_grad_sync = micro_step == accum - 1
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)) / accum
            x, y = get_batch()
            loss.backward()  # type: ignore[no-untyped-call]  # torch: Tensor.backward is unannotated
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt.grad_clip or math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
        marks.append((time.perf_counter(), time.process_time()))
    return marks


def moe_config(cfg: TrainPhaseConfig, experts: int) -> TrainPhaseConfig:
    """cfg's model with every MLP a mixture of `experts` experts of d_ff / 2 hidden units, top-2: the same
    active MLP parameters per token as the dense model (its twin)."""
    from runlib.spec.models import MoeSpec

    moe = MoeSpec(experts=experts, top_k=2, expert_d_ff=cfg.model.d_ff // 2, aux_loss=0.01, z_loss=0.001)
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"moe": moe})})


def runlib_turn(
    cfg: TrainPhaseConfig, dirs: dict[str, Path], accelerator: Accelerator, work: Path, turn: int
) -> list[tuple[float, float]]:
    """One turn of runlib's loop; returns (wall clock, CPU clock) at its start and after every optimizer
    step (the loop's Engine, with its step() timed: the only change to what runs)."""
    from runlib.data.loader import PhaseLoader  # these import torch
    from runlib.train import loop
    from runlib.train.engine import Engine

    marks: list[tuple[float, float]] = []

    class TimedEngine(Engine):
        def step(self) -> None:
            super().step()
            marks.append((time.perf_counter(), time.process_time()))

    out, scratch = work / f"out-{turn}", work / f"scratch-{turn}"
    run = loop.PhaseRun(cfg, PhaseLoader(cfg.loader, dirs, special_ids(cfg)), out, scratch, None, {})
    out.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    # the loop builds the Engine it imported: swapped in its namespace for the turn
    setattr(loop, "Engine", TimedEngine)  # noqa: B010 (mypy: loop does not re-export Engine to assign)
    try:
        loop.train_phase_loop(run, accelerator)
    finally:
        setattr(loop, "Engine", Engine)  # noqa: B010
    if not accelerator.is_main_process:  # rank 0 writes run.json; the pairs are rank 0's figures
        return [marks[0], *marks]
    seconds = json.loads((out / "run.json").read_text())["seconds"]
    return [(marks[-1][0] - seconds, math.nan), *marks]  # run.json: the loop's clock from its first step


def turn_figures(marks: list[tuple[float, float]], tokens_per_step: int, processes: int) -> dict[str, float]:
    """A turn's tokens/s from its median step time after the first (the wall clock, and the CPU time of
    this process: tokens per CPU-second of one process, the figure least moved by other work on the
    machine), and over the whole turn (wall clock)."""
    wall = [b[0] - a[0] for a, b in zip(marks[1:], marks[2:], strict=False)] or [marks[-1][0] - marks[0][0]]
    cpu = [b[1] - a[1] for a, b in zip(marks[1:], marks[2:], strict=False)] or [math.nan]
    return {
        "tokens_per_s": tokens_per_step / max(statistics.median(wall), 1e-9),
        "tokens_per_cpu_s": tokens_per_step / processes / max(statistics.median(cpu), 1e-9),
        "whole_turn_tokens_per_s": tokens_per_step * (len(marks) - 1) / max(marks[-1][0] - marks[0][0], 1e-9),
    }


def worker(
    rank: int, args: argparse.Namespace, cfg_json: str, cp_json: str, dirs: dict[str, str], work_dir: str, port: int
) -> None:
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(args.processes),
            "LOCAL_WORLD_SIZE": str(args.processes),
            "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // args.processes)),
        }
    )
    import torch
    from accelerate import Accelerator

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # the cores' share, as runlib's worker
    cfg = TrainPhaseConfig.model_validate_json(cfg_json)
    work = Path(work_dir)
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == args.processes, accelerator.num_processes
    if not torch.distributed.is_initialized():  # one process: Accelerate starts no group, the peer's DDP needs one
        torch.distributed.init_process_group("gloo", rank=rank, world_size=args.processes)
    tokens = np.concatenate([np.fromfile(Path(d) / "train.bin", dtype=np.uint16) for _, d in sorted(dirs.items())])
    tokens_per_step = cfg.loader.segments[0].batch_sequences * cfg.seq_len
    rows = []
    for turn in range(args.pairs):
        accelerator.wait_for_everyone()
        bare = turn_figures(
            bare_turn(cfg, tokens, rank, args.processes, args.accum, args.steps, turn), tokens_per_step, args.processes
        )
        ours = turn_figures(
            runlib_turn(cfg, {k: Path(v) for k, v in dirs.items()}, accelerator, work / f"r{rank}", turn),
            tokens_per_step,
            args.processes,
        )
        row = {"pair": turn, **{f"bare_{k}": v for k, v in bare.items()}, **{f"runlib_{k}": v for k, v in ours.items()}}
        if cp_json:
            label = third_label(args)
            cp_cfg = TrainPhaseConfig.model_validate_json(cp_json)
            cp_marks = runlib_turn(cp_cfg, {k: Path(v) for k, v in dirs.items()}, accelerator, work / f"c{rank}", turn)
            row.update({f"cp_{k}": v for k, v in turn_figures(cp_marks, tokens_per_step, args.processes).items()})
            if rank == 0:
                print(
                    f"pair {turn}: runlib {label} {row['cp_tokens_per_s']:,.0f} tok/s against its DDP "
                    f"{ours['tokens_per_s']:,.0f}: ratio {row['cp_tokens_per_s'] / ours['tokens_per_s']:.3f}",
                    flush=True,
                )
        rows.append(row)
        if rank == 0:
            print(
                f"pair {turn}: bare {bare['tokens_per_s']:,.0f} tok/s, runlib {ours['tokens_per_s']:,.0f} tok/s, "
                f"ratio {ours['tokens_per_s'] / bare['tokens_per_s']:.3f}; per CPU-second of a process "
                f"{bare['tokens_per_cpu_s']:,.0f} and {ours['tokens_per_cpu_s']:,.0f}, ratio "
                f"{ours['tokens_per_cpu_s'] / bare['tokens_per_cpu_s']:.3f}; whole turns {bare['whole_turn_tokens_per_s']:,.0f} "
                f"and {ours['whole_turn_tokens_per_s']:,.0f}",
                flush=True,
            )
    if rank == 0:
        (work / "rows.json").write_text(json.dumps(rows))
    accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


def third_label(args: argparse.Namespace) -> str:
    """The third turn's name: the layout or the model it times against runlib's DDP turn."""
    if args.moe:
        return f"MoE {args.moe} experts top-2"
    return f"context {args.context}" if args.context > 1 else f"pipeline {args.pipeline}"


def summarise(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Per figure: each loop's median over the pairs, the ratio of the medians and the median pair ratio."""
    out: dict[str, Any] = {"pairs": len(rows)}
    for figure in ("tokens_per_s", "tokens_per_cpu_s", "whole_turn_tokens_per_s"):
        if f"bare_{figure}" not in rows[0]:
            continue
        bare = statistics.median(r[f"bare_{figure}"] for r in rows)
        ours = statistics.median(r[f"runlib_{figure}"] for r in rows)
        out[figure] = {
            "bare_median": bare,
            "runlib_median": ours,
            "ratio_of_medians": ours / bare,
            "median_pair_ratio": statistics.median(r[f"runlib_{figure}"] / r[f"bare_{figure}"] for r in rows),
        }
        if f"cp_{figure}" in rows[0]:
            cp = statistics.median(r[f"cp_{figure}"] for r in rows)
            out[figure].update(
                cp_median=cp,
                cp_over_runlib=cp / ours,
                cp_median_pair_ratio=statistics.median(r[f"cp_{figure}"] / r[f"runlib_{figure}"] for r in rows),
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(Path(__file__).resolve().parents[2] / "specs" / "demo.yaml"))
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per turn")
    parser.add_argument("--accum", type=int, default=2, help="micro-batches per step on each process")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--phase", default=None, help="the spec's phase to train (default: the first)")
    parser.add_argument("--context", type=int, default=1, help="also time runlib with this context parallelism")
    parser.add_argument("--pipeline", type=int, default=1, help="also time runlib with this many pipeline stages")
    parser.add_argument("--moe", type=int, default=0, help="also time the model as a mixture of this many experts")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows and summary here")
    args = parser.parse_args(argv)
    if min(args.pairs, args.steps, args.accum, args.processes, args.context, args.pipeline) < 1:
        print(
            "train_step: --pairs, --steps, --accum, --processes, --context and --pipeline must be >= 1", file=sys.stderr
        )
        return 2
    if args.context > 1 and args.pipeline > 1 or args.processes % (args.context * args.pipeline):
        print(f"train_step: one of --context and --pipeline, dividing --processes {args.processes}", file=sys.stderr)
        return 2
    from torch.multiprocessing.spawn import spawn

    from runlib.model.transformer import Transformer  # imports torch

    try:
        cfg = phase_config(args.spec, args.processes, args.accum, args.steps, args.phase)
    except ValueError as exc:
        print(f"train_step: {exc}", file=sys.stderr)
        return 2
    if args.moe and (args.moe < 2 or args.context > 1 or args.pipeline > 1):
        print("train_step: --moe takes 2 or more experts, without --context or --pipeline", file=sys.stderr)
        return 2
    other = args.context > 1 or args.pipeline > 1
    cp_json = model_parallel_config(cfg, args.context, args.pipeline).model_dump_json() if other else ""
    if args.moe:
        cp_json = moe_config(cfg, args.moe).model_dump_json()

    ours = sum(p.numel() for p in Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows).parameters())
    peer = sum(p.numel() for p in bare_model(cfg).parameters())
    if ours != peer:
        print(
            f"train_step: the bare model has {peer:,} parameters, runlib's {ours:,}: not the same shape",
            file=sys.stderr,
        )
        return 2
    print(
        f"train_step: phase {cfg.phase_name}, {cfg.model.layers} x {cfg.model.d_model}, vocab {cfg.vocab_rows}, "
        f"seq {cfg.seq_len}, micro-batch {cfg.micro_batch} x accum {args.accum} x {args.processes} processes, "
        f"z_loss {cfg.optimizer.z_loss}, {args.steps} steps per turn, {args.pairs} pairs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="runlib-train-step-") as tmp:
        work = Path(tmp)
        dirs = {k: str(v) for k, v in write_shards(cfg, work / "tokens", cfg.seed).items()}
        spawn_args = (args, cfg.model_dump_json(), cp_json, dirs, str(work), free_port())
        spawn(worker, args=spawn_args, nprocs=args.processes)  # type: ignore[no-untyped-call]  # torch: unannotated
        rows = json.loads((work / "rows.json").read_text())
    summary = summarise(rows)
    for figure, label in (("tokens_per_s", "tokens/s"), ("tokens_per_cpu_s", "tokens per CPU-second of a process")):
        f = summary[figure]
        print(
            f"median {label}: bare {f['bare_median']:,.0f}, runlib {f['runlib_median']:,.0f}; runlib / bare "
            f"{f['ratio_of_medians']:.3f} (median of pair ratios {f['median_pair_ratio']:.3f})"
        )
        if "cp_median" in f:
            layout = third_label(args)
            print(
                f"median {label}: runlib {layout} {f['cp_median']:,.0f} against runlib DDP "
                f"{f['runlib_median']:,.0f}: {f['cp_over_runlib']:.3f} (median of pair ratios "
                f"{f['cp_median_pair_ratio']:.3f})"
            )
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
