"""GPU check, prepared for a session with a device: attention parity, then FSDP2 training speed and memory.

    python -m runlib.bench.gpu_check --out DIR [--steps 8] [--warmup 3] [--budget-s 360] [--models 125M,1B]

One process, one GPU, one script, bounded in time: no part starts after --budget-s seconds, each part is
stopped after 120 s, and a part that fails or times out is recorded and the next one runs. DIR/gpu_check.json
is rewritten after every part, so a run killed from outside keeps what it measured; DIR/gpu_check.txt holds
the summary table. Worst case about budget + 120 s + start-up (about 8 minutes with the defaults).

  1. parity: the flex_attention document-mask path against SDPA with a boolean mask, in fp32:
     max |difference| of the logits and of a gradient (CPU: logits only, flex has no CPU backward).
  2. training: tokens/s, MFU and peak memory of training steps of a ~125M (GPT-2-small-shaped Llama:
     12 x 768, 12 heads, 4 kv heads, SwiGLU 2048) and a ~1B (18 x 2048, 16 heads, 8 kv heads, SwiGLU
     5632) model, vocabulary 32768, at seq 2048, laid out as runlib trains them: a process group of
     world 1 that this process starts itself (NCCL; gloo on CPU), a 1-D ("dp_shard",) mesh of size 1,
     runlib.model.parallelize.parallelize with sharding fsdp (FSDP2 fully_shard per block and root,
     MixedPrecisionPolicy: compute bf16, fp32 master weights, fp32 gradient reduction), activation
     checkpointing none / selective / full, AdamW from runlib.train.optim.build_optimizer, gradient
     clipping with runlib's clip_grad_norm_. Attention: flex with document masks (packed rows of
     documents averaging 512 tokens) against SDPA causal (no documents). Eager (flex_attention
     compiles itself), and the rows marked compiled with torch.compile per block
     (runlib.model.parallelize.compile_blocks; their first step holds the compilation), each beside
     its eager twin: compiled_vs_eager in the JSON is the ratio of their tokens/s. Goal: MFU >= 45% on
     the compiled 1B row. Each row: `--warmup` steps, then the median of `--steps` timed steps (each
     ended by torch.cuda.synchronize).
       tokens/s = micro_batch * seq / median step time
       MFU      = tokens/s * FLOPs per token / dense peak, both from runlib.plan.derive: PaLM's
                  6 N_matmul + 12 L d_attn s (runlib.plan.flops; attention counted in full, also
                  under document masks) and the catalog's bf16 peak of an h200 (989 TFLOP/s)
       memory   = torch.cuda.max_memory_allocated over the row (reset before the model is built)
                  against plan.phases[0].memory.total of a RunSpec of the same shape (accelerator
                  h200, 1 device, micro batch, seq 2048, bf16, sharding fsdp, the row's
                  recomputation); ratio = plan / measured (the plan's total includes its 1 GiB
                  runtime overhead, which the allocator does not see; max_memory_reserved is
                  recorded too)
Context and pipeline parallelism need two devices or more (NCCL takes one rank per GPU), so this
one-GPU check has no rows of them; on CPU their figures come from `runlib.bench.train_step --context 2`
and `--pipeline 2`, their correctness from tests/train/test_parallel.py.
Without CUDA the same code runs at toy size on the CPU (gloo, SDPA only, a few steps) so CI keeps it
working; memory there is the process's peak RSS (no ratio: it holds the interpreter and libraries).
If the process group cannot start, the rows run on one process without FSDP (recorded per row).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from runlib.bench.gpu_report import compiled_vs_eager, summary_table
from runlib.plan import Plan, derive
from runlib.spec.loader import validate_data
from runlib.spec.models import ModelSpec, Recompute, RunSpec, Sharding
from runlib.train.config import ParallelConfig
from runlib.util.deadline import deadline

if (
    TYPE_CHECKING
):  # torch and the runlib modules that import it load in main(): `--help` and the tests' plans do without
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from runlib.model.transformer import Transformer

GIB = 2**30
MEAN_DOC_TOKENS = 512

# model shapes (vocab 32768 rows, untied head, RoPE, RMSNorm, SwiGLU: runlib's defaults)
SHAPES: dict[str, dict[str, int]] = {
    # GPT-2 small's 12 x 768 / 12 heads as a Llama: 125.8M parameters
    "125M": {"layers": 12, "d_model": 768, "heads": 12, "kv_heads": 4, "d_ff": 2048},
    # TinyLlama-like width with 18 layers: 983.6M parameters
    "1B": {"layers": 18, "d_model": 2048, "heads": 16, "kv_heads": 8, "d_ff": 5632},
    "toy": {"layers": 2, "d_model": 64, "heads": 4, "kv_heads": 2, "d_ff": 128},
}


@dataclass(frozen=True)
class Row:
    model: str
    micro_batch: int
    backend: Literal["sdpa", "flex"]
    documents: bool
    recompute: Recompute
    compiled: bool = False  # torch.compile per block (runlib.model.parallelize.compile_blocks), else eager


@dataclass(frozen=True)
class Settings:
    """What differs between the GPU run and the CPU smoke run besides the rows."""

    seq_len: int
    vocab: int
    accelerator: str
    part_cap_s: float  # each part is stopped after this
    min_start_s: float  # no part starts with less of the budget left

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# in priority order: the rows after the first eight run only while the time budget lasts
GPU_ROWS = [
    Row("125M", 8, "sdpa", False, "none"),
    Row("125M", 8, "flex", True, "none"),
    Row("1B", 4, "sdpa", False, "none"),
    Row("1B", 4, "sdpa", False, "none", compiled=True),  # the MFU goal's row: ~1B, seq 2048, compiled blocks
    Row("1B", 4, "flex", True, "none"),
    Row("1B", 4, "flex", True, "none", compiled=True),
    Row("125M", 8, "sdpa", False, "full"),
    Row("125M", 8, "flex", True, "full"),
    Row("1B", 4, "flex", True, "selective"),
    Row("1B", 4, "flex", True, "full"),
    Row("1B", 4, "sdpa", False, "full"),
    Row("125M", 8, "sdpa", False, "none", compiled=True),
    Row("125M", 8, "flex", False, "none"),  # flex's causal kernel alone, without the documents' sparsity
    Row("125M", 8, "sdpa", True, "none"),  # SDPA with a boolean document mask (no fused kernel)
]
CPU_ROWS = [
    Row("toy", 2, "sdpa", False, "none"),
    Row("toy", 2, "sdpa", False, "none", compiled=True),  # the same steps through compiled blocks: the same losses
    Row("toy", 2, "sdpa", True, "full"),
    Row("toy", 2, "sdpa", True, "selective"),
]
GPU_SETTINGS = Settings(seq_len=2048, vocab=32768, accelerator="h200", part_cap_s=120.0, min_start_s=30.0)
CPU_SETTINGS = Settings(seq_len=64, vocab=256, accelerator="cpu", part_cap_s=120.0, min_start_s=0.0)


# ----------------------------------------------------------------------------------------- helpers


def _model(layers: int, d_model: int, heads: int, seq_len: int, vocab: int) -> tuple[ModelSpec, Transformer]:
    """The parity model: kv_heads heads/3, SwiGLU width 8/3 d (rounded to 64)."""
    from runlib.model.transformer import Transformer  # imports torch

    spec = ModelSpec(
        layers=layers,
        d_model=d_model,
        heads=heads,
        kv_heads=heads // 3 or 1,
        d_ff=d_model * 8 // 3 // 64 * 64 or 64,
        seq_len=seq_len,
    )
    return spec, Transformer(spec, vocab, seq_len)


def _doc_ids(n: int, length: int, mean_doc: int, device: torch.device) -> torch.Tensor:
    import torch

    g = torch.Generator().manual_seed(0)
    starts = (torch.rand(n, length, generator=g) < 1.0 / mean_doc).long()
    starts[:, 0] = 0
    return starts.cumsum(1).to(device)


class PartTimeout(Exception):
    pass


def time_limit(seconds: float | None) -> contextlib.AbstractContextManager[None]:
    """Raise PartTimeout in this (main) thread after `seconds` (runlib.util.deadline: SIGALRM, Python code
    only: a blocking CUDA call returns first). It fires again each second after: an exception raised inside
    a finalizer or weakref callback is printed and dropped."""
    return deadline(seconds, lambda: PartTimeout(f"timed out after {seconds:g} s"), rearm_s=1.0)


def _error(exc: BaseException) -> str:
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:]
    return f"{type(exc).__name__}: {exc}"[:500] + " | " + "".join(tail)[-800:].replace("\n", " ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[tuple[DeviceMesh | None, dict[str, Any]]]:
    """A process group of world 1 (NCCL on CUDA, gloo on CPU) and the 1-D ("dp_shard",) mesh of size 1
    FSDP2 shards over; yields (mesh or None, info). Environment and group are restored on exit."""
    import torch.distributed as dist

    info: dict[str, Any] = {}
    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    saved = {k: os.environ.get(k) for k in names}
    created = False
    mesh = None
    try:
        if dist.is_initialized():
            info["backend"] = str(dist.get_backend())
            if dist.get_world_size() != 1:
                raise RuntimeError(f"a process group of world {dist.get_world_size()} is already running")
            info["reused"] = True
        else:
            os.environ.update(
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
            )
            backend = "nccl" if device.type == "cuda" else "gloo"
            if device.type == "cuda":
                dist.init_process_group(backend, device_id=device)
            else:
                dist.init_process_group(backend)
            created = True
            info["backend"] = backend
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("dp_shard",))
        info["mesh"] = {"dp_shard": 1}
    except Exception as exc:  # the rows then run without FSDP
        info["error"] = _error(exc)
        mesh = None
    try:
        yield mesh, info
    finally:
        if created and dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ----------------------------------------------------------------------------------------- parts


def parity(device: torch.device, length: int, grads: bool = True) -> dict[str, Any]:
    """Max |difference| of logits (and of a gradient) between flex and SDPA-mask backends, in fp32.
    flex_attention has no backward on CPU (torch 2.13), so the CPU smoke compares logits only."""
    import torch

    torch.manual_seed(0)
    _, model = _model(2, 192, 6, length, 512)
    model = model.to(device)
    ids = torch.randint(0, 512, (2, length), device=device)
    docs = _doc_ids(2, length, length // 4, device)
    out = {}
    for backend in ("sdpa", "flex"):
        model.zero_grad(set_to_none=True)
        model.attention_backend = backend
        with contextlib.nullcontext() if grads else torch.no_grad():
            logits = model(ids, None, docs)
            if grads:
                logits.float().square().mean().backward()
        grad = model.get_parameter("layers.0.attention.wq.weight").grad
        out[backend] = (logits.detach(), grad.detach().clone() if grad is not None else None)
    result: dict[str, Any] = {
        "seq_len": length,
        "logits_max_abs_diff": float((out["flex"][0] - out["sdpa"][0]).abs().max()),
    }
    if grads:
        flex_grad, sdpa_grad = out["flex"][1], out["sdpa"][1]
        assert flex_grad is not None and sdpa_grad is not None  # both backends ran backward
        result["grad_max_abs_diff"] = float((flex_grad - sdpa_grad).abs().max())
    return result


def bench_spec(
    shape: dict[str, int],
    vocab: int,
    seq_len: int,
    micro_batch: int,
    recompute: Recompute,
    accelerator: str,
    sharding: Sharding,
) -> RunSpec:
    """The RunSpec of one row: one device, one phase, the row's shape, batch and layout."""
    data = {
        "name": "gpu-check",
        "hardware": {"accelerator": accelerator, "nodes": 1, "devices_per_node": 1},
        "model": {**shape, "vocab_size": vocab, "seq_len": seq_len},
        "tokenizer": {"vocab_size": vocab},
        "data": {"sources": {"bench": {"domain": "synthetic", "input": {"format": "builtin", "name": "arithmetic"}}}},
        "parallelism": {"sharding": sharding, "activation_checkpointing": recompute},
        "batch": {"micro_batch": micro_batch},
        "optimizer": {"kind": "adamw", "lr": 3e-4, "grad_clip": 1.0},
        "schedule": {"warmup": "1%"},
        "precision": {"compute": "bf16", "master_weights": "fp32", "grads": "fp32", "optimizer_states": "fp32"},
        "tokens": micro_batch * seq_len * 1000,
        "phases": [{"name": "bench", "kind": "foundation", "tokens": "100%", "mixture": {"bench": 1.0}}],
    }
    return validate_data(data).spec


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _cleanup(device: torch.device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _row_plan(row: Row, settings: Settings, sharding: Sharding, result: dict[str, Any]) -> tuple[RunSpec, Plan]:
    """The row's spec and plan; the plan's figures (parameters, FLOPs per token, memory) go into `result`."""
    spec = bench_spec(
        SHAPES[row.model],
        settings.vocab,
        settings.seq_len,
        row.micro_batch,
        row.recompute,
        settings.accelerator,
        sharding,
    )
    plan = derive(spec)
    phase = plan.phases[0]
    result.update(
        params=plan.params.total,
        seq_len=settings.seq_len,
        vocab=plan.vocab_rows,
        parallel="fsdp2 (1-process mesh dp_shard=1)" if sharding == "fsdp" else "none (one process, autocast)",
        precision="bf16 compute, fp32 master weights, fp32 grads, fp32 AdamW states",
        flops_per_token=phase.flops_per_token,
        peak_tflops=plan.peak_flops() / 1e12,
        plan_gib=phase.memory.total / GIB,
        plan_breakdown_gib={k: round(v / GIB, 3) for k, v in phase.memory.as_dict().items()},
    )
    return spec, plan


def _row_model(
    device: torch.device, mesh: DeviceMesh | None, row: Row, spec: RunSpec, plan: Plan, result: dict[str, Any]
) -> torch.nn.Module:
    """The row's model, laid out as runlib trains it (runlib.model.parallelize: FSDP2 on the mesh)."""
    import torch

    from runlib.model.parallelize import apply_fsdp, parallelize, set_recompute  # import torch
    from runlib.model.transformer import Transformer

    sharding: Sharding = "fsdp" if mesh is not None else "none"
    seq = spec.model.seq_len
    torch.manual_seed(0)
    with torch.device(device):
        base = Transformer(spec.model, plan.vocab_rows, seq)
    base.attention_backend = row.backend
    parallel = ParallelConfig(
        nodes=1,
        processes_per_node=1,
        dp_replicate=1,
        dp_shard=1,
        tp=1,
        cp=1,
        pp=1,
        sharding=sharding,
        activation_checkpointing=row.recompute,
        offload=False,
    )
    try:
        model = parallelize(base, mesh, parallel, spec.precision)
    except Exception as exc:  # record it, and shard the way parallelize would (a fresh model)
        if mesh is None:
            raise
        result["parallelize_error"] = _error(exc)
        del base
        torch.manual_seed(0)
        with torch.device(device):
            base = Transformer(spec.model, plan.vocab_rows, seq)
        base.attention_backend = row.backend
        set_recompute(base, row.recompute)
        model = base
    if row.compiled:
        from runlib.model.parallelize import compile_blocks  # imports torch

        compile_blocks(base)
    if mesh is not None:
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(model, FSDPModule):  # a parallelize that drops size-1 mesh dims: shard here
            # under sharding fsdp, parallelize returns the model itself (no DDP wrapper)
            apply_fsdp(base, mesh, spec.precision, True, False)
            base.runlib_autocast = None
            model = base
            result["parallel"] += " via apply_fsdp"
    return model


def _train_steps(
    device: torch.device,
    model: torch.nn.Module,
    row: Row,
    spec: RunSpec,
    plan: Plan,
    warmup: int,
    steps: int,
    result: dict[str, Any],
) -> None:
    """`warmup` + `steps` training steps of the row on random tokens; their times and losses into `result`."""
    import torch
    import torch.nn.functional as F

    from runlib.model.parallelize import clip_grad_norm_, forward_context  # import torch
    from runlib.train.optim import build_optimizer

    seq, phase = spec.model.seq_len, plan.phases[0]
    grad_clip = spec.optimizer.grad_clip
    assert grad_clip is not None  # bench_spec sets it
    optimizer = build_optimizer(model, spec.optimizer, spec.precision)
    ids = torch.randint(0, plan.vocab_rows, (row.micro_batch, seq + 1), device=device)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    doc_ids = _doc_ids(row.micro_batch, seq, MEAN_DOC_TOKENS, device) if row.documents else None
    if doc_ids is not None:
        result["documents_per_row"] = float((doc_ids[:, -1] + 1).float().mean())
    times: list[float] = []
    losses: list[float] = []
    for step in range(warmup + steps):
        _sync(device)
        start = time.perf_counter()
        with forward_context(model):
            logits = model(inputs, None, doc_ids)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        del logits
        loss.backward()  # type: ignore[no-untyped-call]  # torch: Tensor.backward is unannotated
        clip_grad_norm_(model, grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        elapsed = time.perf_counter() - start
        losses.append(float(loss.detach()))
        if step == 0:
            result["first_step_s"] = elapsed  # includes flex_attention's compilation
        if step >= warmup:
            times.append(elapsed)
            seconds = statistics.median(times)
            tokens_per_s = row.micro_batch * seq / seconds
            result.update(
                timed_steps=len(times),
                step_ms=seconds * 1000,
                step_ms_all=[round(t * 1000, 2) for t in times],
                tokens_per_s=tokens_per_s,
                mfu=tokens_per_s * phase.flops_per_token / plan.peak_flops() if plan.peak_flops() else None,
            )
    result["loss_first"], result["loss_last"] = losses[0], losses[-1]
    result["loss_finite"] = all(map(lambda x: x == x and abs(x) != float("inf"), losses))
    del optimizer


def _record_memory(device: torch.device, result: dict[str, Any]) -> None:
    """The row's peak memory: the CUDA allocator's, against the plan's; on the CPU the process's peak RSS."""
    import torch

    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / GIB
        result.update(
            memory_basis="torch.cuda.max_memory_allocated",
            peak_gib=peak,
            peak_reserved_gib=torch.cuda.max_memory_reserved() / GIB,
            ratio=result["plan_gib"] / peak if peak else None,
        )
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # ru_maxrss: KiB on Linux
        result.update(
            memory_basis="process peak RSS (interpreter and libraries included; no ratio)", peak_gib=rss, ratio=None
        )


def train_row(
    device: torch.device,
    mesh: DeviceMesh | None,
    row: Row,
    settings: Settings,
    warmup: int,
    steps: int,
    result: dict[str, Any],
) -> None:
    """Fill `result` (also on failure: whatever was measured stays) with one row's measurements."""
    spec, plan = _row_plan(row, settings, "fsdp" if mesh is not None else "none", result)
    _cleanup(device)
    model = _row_model(device, mesh, row, spec, plan, result)
    _train_steps(device, model, row, spec, plan, warmup, steps, result)
    _record_memory(device, result)
    del model


# ----------------------------------------------------------------------------------------- output


def _write(results: dict[str, Any], out: Path | None) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(out / "gpu_check.json")


def _log(message: str) -> None:
    print(message, flush=True)


# ----------------------------------------------------------------------------------------- main


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="timed steps per row (default: 8 on CUDA, 2 on CPU)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps per row (default: 3 on CUDA, 1 on CPU)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=360.0,
        help="no part starts after this many seconds (each part: at most 120 s)",
    )
    parser.add_argument("--models", default=None, help="comma-separated subset of the rows' models (125M, 1B, toy)")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def _prepare_cuda(device: torch.device) -> None:
    import torch
    import torch._dynamo

    torch.cuda.set_device(device)
    # flex_attention recompiles per shape and mask (parity fp32, 125M and 1B in bf16, fwd and bwd)
    for name in ("recompile_limit", "cache_size_limit"):
        with contextlib.suppress(Exception):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))


def _run_parity(
    device: torch.device, cuda: bool, limit: float | None, results: dict[str, Any], out: Path | None
) -> None:
    """Part 1, parity, under its time limit (None: the budget is spent, the part skipped)."""
    start = time.perf_counter()
    if limit is None:
        results["parity"] = {"skipped": "time budget spent"}
    else:
        try:
            with time_limit(limit):
                results["parity"] = parity(device, 512 if cuda else 64, grads=cuda)
        except Exception as exc:
            results["parity"] = {"error": _error(exc)}
        results["parity"]["wall_s"] = time.perf_counter() - start
    _log(f"parity: {json.dumps(results['parity'])}")
    _cleanup(device)
    _write(results, out)


def _run_rows(
    device: torch.device,
    cuda: bool,
    rows: list[Row],
    settings: Settings,
    warmup: int,
    steps: int,
    args: argparse.Namespace,
    part_limit: Callable[[], float | None],
    results: dict[str, Any],
) -> None:
    """Part 2, the training rows, each under its time limit, in one process group; an entry per row."""
    results["training"] = []
    with process_group(device) as (mesh, pg_info):
        results["process_group"] = pg_info
        _log(f"process group: {json.dumps(pg_info)}")
        for row in rows:
            entry: dict[str, Any] = {
                "model": row.model,
                **SHAPES[row.model],
                "micro_batch": row.micro_batch,
                "backend": row.backend,
                "documents": row.documents,
                "recompute": row.recompute,
                "compiled": row.compiled,
            }
            results["training"].append(entry)
            if row.backend == "flex" and not cuda:
                entry["skipped"] = "flex_attention has no backward on CPU (torch 2.13)"
                continue
            limit = part_limit()
            if limit is None:
                entry["skipped"] = f"time budget of {args.budget_s:.0f} s spent"
                _log(f"skip {row}: {entry['skipped']}")
                _write(results, args.out)
                continue
            start = time.perf_counter()
            try:
                with time_limit(limit):
                    train_row(device, mesh, row, settings, warmup, steps, entry)
            except Exception as exc:  # OOM, timeout, compile failure: recorded, the next row runs
                entry["error"] = _error(exc)
            finally:
                entry["wall_s"] = time.perf_counter() - start
                with contextlib.suppress(Exception):
                    _cleanup(device)
            shown = ("tokens_per_s", "mfu", "peak_gib", "plan_gib", "ratio", "wall_s", "error")
            _log(
                f"{row.model} {row.backend} docs={row.documents} recompute={row.recompute} compiled={row.compiled}: "
                + json.dumps({k: entry.get(k) for k in shown})
            )
            _write(results, args.out)


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    import torch

    args = _arguments(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    settings = GPU_SETTINGS if cuda else CPU_SETTINGS
    rows = GPU_ROWS if cuda else CPU_ROWS
    if args.models:
        wanted = {m.strip() for m in args.models.split(",")}
        rows = [r for r in rows if r.model in wanted]
    steps: int = args.steps if args.steps is not None else (8 if cuda else 2)
    warmup: int = args.warmup if args.warmup is not None else (3 if cuda else 1)
    if cuda:
        _prepare_cuda(device)
    else:
        _log("no CUDA device: toy-sized CPU smoke run of the same code (gloo, SDPA only)")
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "settings": {**settings.as_dict(), "warmup_steps": warmup, "timed_steps": steps, "budget_s": args.budget_s},
        "complete": False,
    }

    budget_s: float = args.budget_s

    def part_limit() -> float | None:
        left = budget_s - (time.perf_counter() - t0)
        if left < settings.min_start_s or left <= 0:
            return None
        return min(settings.part_cap_s, max(left, settings.min_start_s))

    _run_parity(device, cuda, part_limit(), results, args.out)
    _run_rows(device, cuda, rows, settings, warmup, steps, args, part_limit, results)
    results["compiled_vs_eager"] = compiled_vs_eager(results["training"])
    results["elapsed_s"] = time.perf_counter() - t0
    results["complete"] = True
    _write(results, args.out)
    table = summary_table(results["training"])
    _log("\n" + table)
    _log(f"parity: {json.dumps(results['parity'])}")
    _log(f"compiled / eager tokens/s: {json.dumps(results['compiled_vs_eager'])}")
    _log(f"total {results['elapsed_s']:.0f} s")
    if args.out:
        (args.out / "gpu_check.txt").write_text(table + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
