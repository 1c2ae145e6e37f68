"""`runlib propose`: a spec that spends a hardware budget (accelerator x devices x days) well.

Each number, and where it comes from (the proposal's header repeats this with its own values):
- Compute: devices x days x the accelerator's dense peak x the estimated MFU, of which PLAN_SHARE (95%)
  is planned for training; the rest is left for held-out evaluation, checkpoint writes and restarts.
- Parameters and tokens: the Besiroglu et al. 2024 refit of Chinchilla's approach 3 (arXiv 2404.10102;
  runlib.plan.scaling.refit_optimum), N_opt and D_opt at C = 6*N*D, the compute that fit counts. The
  plan also pays attention FLOPs (12*L*d*s per token, runlib.plan.flops), so tokens are the budget's
  FLOPs over the plan's FLOPs per token and the shape is the one whose N is N_opt at that C = 6*N*D:
  both N and D then sit on the fit's optimum up to the shape grid.
- Shape: head_dim 128 (64 below d_model 1024), d_model/layers between 64 (GPT-2, Pythia-160M) and 128
  (Llama 2 7B, Llama 3 8B, OLMo 2 7B: 4096/32), the aspect nearest 128 among shapes within 3% of
  N_opt; SwiGLU MLP of 8/3 d_model rounded up to 256 (Llama, arXiv 2302.13971 §2); RoPE, RMSNorm.
- Batch and LR: DeepSeek LLM (arXiv 2401.02954, eq. 1): B_opt = 0.292 C^0.3271 tokens and
  eta_opt = 0.3118 C^-0.125 with C = M*D, M the non-embedding FLOPs per token; the batch is rounded
  to whole sequences per data-parallel rank.
- Schedule: WSD (Hägele et al. 2024, arXiv 2405.18392) with warmup min(2000 steps, 1%) (DeepSeek LLM
  §2.3 warms up 2000 steps) and the decay over the anneal phase, the last 10% of the run (PHASE002's
  1-10% anneal range; the decay is that phase: SCHED006).
- Layout: data parallel only (runlib enacts no tensor, pipeline or context parallelism: RUN001-003),
  the (sharding, recomputation, micro-batch) that fits 90% of device memory (MEM002's margin) with the
  best estimated MFU: full recomputation costs a forward pass, MFU x 3/4 (Korthikanti et al. 2022,
  arXiv 2205.05198 §5), selective a few percent (x 0.97); among equals the least sharding, then the
  largest micro-batch.
- Checkpoints: Young's interval sqrt(2 x write time x job MTBF) (Young 1974, CACM 17(9)) with the per-GPU
  MTBF of Llama 3's log: 419 unexpected interruptions in 54 days on 16,384 GPUs (Dubey et al. 2024,
  arXiv 2407.21783, §3.3.4): 50,677 GPU-hours per failure.
Pure except for reading the --data spec; never imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from runlib.errors import UserError
from runlib.plan import Plan, derive
from runlib.plan.flops import flops_per_token
from runlib.plan.params import count_params
from runlib.plan.scaling import deepseek_optimal_batch_tokens, deepseek_optimal_lr, refit_optimum
from runlib.review.importers.draft import Draft, load_draft
from runlib.spec import LoadedSpec, load_spec, load_spec_text, validate_data
from runlib.spec.hardware import CATALOG
from runlib.spec.models import ModelSpec
from runlib.spec.units import parse_count

PLAN_SHARE = 0.95
BASE_MFU = 0.40  # Llama 3 405B: 38-43% BF16 MFU (arXiv 2407.21783, Table 4)
RECOMPUTE_MFU = {"none": 1.0, "selective": 0.97, "full": 0.75}
SHARDINGS = ("none", "zero1", "zero2", "fsdp")
MICRO_BATCHES = (16, 8, 4, 2, 1)
MEMORY_SHARE = 0.90
GPU_MTBF_HOURS = 16_384 * 54 * 24 / 419  # Llama 3 §3.3.4: 50,677 GPU-hours between unexpected interruptions
ANNEAL_SHARE = 0.10
MAX_WARMUP_STEPS = 2000
N_MATCH = 0.03  # shapes within 3% of N_opt compete on aspect ratio
PUBLISHED_ASPECT = 128  # d_model / layers of Llama 2 7B, Llama 3 8B, OLMo 2 7B


@dataclass(frozen=True)
class Shape:
    layers: int
    d_model: int
    heads: int
    d_ff: int

    @property
    def aspect(self) -> float:
        return self.d_model / self.layers


@dataclass(frozen=True)
class Proposal:
    text: str
    loaded: LoadedSpec
    summary: str  # the choices in a few lines, for the terminal
    params: int
    tokens: int
    optimal_params: float
    optimal_tokens: float

    def reload(self, file: str) -> LoadedSpec:
        return load_spec_text(self.text, file)


def _round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


def candidate_shapes() -> list[Shape]:
    shapes = []
    for layers in range(4, 161):
        for d in range(256, 32768 + 1, 128):
            if not 64 <= d / layers <= 128:
                continue
            head_dim = 128 if d >= 1024 else 64
            shapes.append(Shape(layers, d, d // head_dim, _round_up(8 * d / 3, 256)))
    return shapes


def _model_dict(shape: Shape, vocab_rows: int, seq_len: int) -> dict[str, Any]:
    return {
        "layers": shape.layers,
        "d_model": shape.d_model,
        "heads": shape.heads,
        "kv_heads": shape.heads,
        "d_ff": shape.d_ff,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "bias": False,
        "position": "rope",
        "rope_theta": 500000.0,
        "tie_embeddings": False,
        "vocab_size": vocab_rows,
        "seq_len": seq_len,
    }


def choose_shape(budget_flops: float, vocab_rows: int, seq_len: int) -> tuple[Shape, float, float, float]:
    """(shape, tokens, N_opt, D_opt): tokens = budget / plan FLOPs per token; N_opt at C = 6 N D."""
    scored = []
    for shape in candidate_shapes():
        # closed form of count_params for this family (checked below on the winner)
        d, f, L = shape.d_model, shape.d_ff, shape.layers
        total = L * (4 * d * d + 3 * d * f + 2 * d) + d + 2 * vocab_rows * d
        matmul = total - vocab_rows * d
        per_token = flops_per_token(matmul, L, d, seq_len)
        tokens = budget_flops / per_token
        n_opt, d_opt = refit_optimum(6.0 * total * tokens)
        scored.append((abs(math.log(total / n_opt)), shape, tokens, n_opt, d_opt, total))
    best_gap = min(s[0] for s in scored)
    if best_gap > math.log1p(0.10):
        n_opt = min(scored)[3]
        raise UserError(
            f"runlib propose: the budget's compute-optimal model has {n_opt:,.0f} parameters, outside the shapes "
            "proposed (4-160 layers, d_model 256-32768, 64-128 per layer); give a larger or smaller budget"
        )
    near = [s for s in scored if s[0] <= max(best_gap, math.log1p(N_MATCH))]
    gap, shape, tokens, n_opt, d_opt, total = min(
        near, key=lambda s: (abs(math.log(s[1].aspect / PUBLISHED_ASPECT)), s[0])
    )
    model = ModelSpec.model_validate(_model_dict(shape, vocab_rows, seq_len))
    assert count_params(model, vocab_rows, seq_len).total == total
    return shape, tokens, n_opt, d_opt


class Layout(NamedTuple):
    """A data-parallel layout that fits device memory, and what it costs."""

    sharding: str
    recompute: str
    micro_batch: int
    mfu_factor: float  # RECOMPUTE_MFU of the recomputation
    memory_share: float  # the plan's memory per device over the device's


def _layout(spec_data: dict[str, Any], per_rank_seqs: int) -> Layout:
    """The layout that fits MEMORY_SHARE of device memory with the best MFU; among equals the least
    sharding, then the largest micro-batch."""
    options = []
    for recompute in ("none", "selective", "full"):
        for level, sharding in enumerate(SHARDINGS):
            for micro in MICRO_BATCHES:
                if per_rank_seqs % micro:
                    continue
                options.append((RECOMPUTE_MFU[recompute], -level, micro, sharding, recompute))
    options.sort(reverse=True)
    for factor, _, micro, sharding, recompute in options:
        data = {**spec_data}
        data["parallelism"] = {"sharding": sharding, "activation_checkpointing": recompute}
        data["batch"] = {**data["batch"], "micro_batch": micro, "grad_accum": per_rank_seqs // micro}
        plan = derive(validate_data(data).spec)
        memory = max(p.memory.total for p in plan.phases)
        capacity = plan.accelerator.memory_gib * 2**30
        if memory <= MEMORY_SHARE * capacity:
            return Layout(sharding, recompute, micro, factor, memory / capacity)
    raise UserError(
        "runlib propose: no data-parallel layout fits the compute-optimal model in device memory "
        "(it searches sharding, micro-batch and recomputation only); give more memory per device (another --accelerator), or write tensor or context parallelism into the spec yourself"
    )


def _normalized(mixture: dict[str, float]) -> dict[str, float]:
    total = sum(w for w in mixture.values() if w > 0) or 1.0
    return {k: round(w / total, 6) for k, w in mixture.items() if w > 0}


def _sources(
    data: str | None, run_tokens: float
) -> tuple[dict[str, Any], dict[str, float], dict[str, float], list[str]]:
    """(data.sources, foundation mixture, anneal mixture, header notes)."""
    if data is None:
        return (
            {
                "web": {
                    "domain": "web",
                    "input": {"format": "jsonl", "path": "data/raw/web/*.jsonl"},
                    "tokens": int(run_tokens),
                }
            },
            {"web": 1.0},
            {"web": 1.0},
            [
                "Data: one placeholder source `web` (data/raw/web/*.jsonl) declared as one pass over the run's tokens;",
                "  give --data to plan on your sources (their declared tokens decide the epochs: MIX003).",
            ],
        )
    if Path(data).suffix in (".yaml", ".yml") or Path(data).is_file():
        loaded = load_spec(data)
        sources = {k: v for k, v in loaded.data["data"]["sources"].items()}
        phases = loaded.spec.phases
        mixture = _normalized(dict(phases[0].mixture) if phases else {k: 1.0 for k in sources})
        anneals = [p for p in phases if p.kind == "anneal"]
        anneal = _normalized(dict(anneals[-1].mixture)) if anneals else mixture
        used = set(mixture) | set(anneal)
        sources = {k: v for k, v in sources.items() if k in used}
        return (
            sources,
            mixture,
            anneal,
            [
                f"Data: the sources of {data}, its first phase's mixture for the foundation phase and "
                + ("its anneal phase's for the anneal." if anneals else "for the anneal.")
            ],
        )
    sources, weights = {}, {}
    for item in data.split(","):
        try:
            name, rest = item.split("=", 1)
            path, domain, tokens = rest.rsplit(":", 2)
            count = parse_count(tokens)
        except ValueError:
            raise UserError(
                f"runlib propose --data: {item!r} is not NAME=GLOB:DOMAIN:TOKENS "
                "(e.g. web=data/raw/web/*.jsonl:web:2T), nor a spec file"
            ) from None
        sources[name.strip()] = {"domain": domain, "input": {"format": "jsonl", "path": path}, "tokens": count}
        weights[name.strip()] = float(count)
    total = sum(weights.values()) or 1.0
    mixture = {k: round(w / total, 6) for k, w in weights.items()}
    drift = 1.0 - sum(mixture.values())
    first = next(iter(mixture))
    mixture[first] = round(mixture[first] + drift, 6)
    return sources, mixture, mixture, ["Data: the --data sources, weighted by their tokens (each seen about once)."]


# ------------------------------------------------------------------------------------- the budget


@dataclass(frozen=True)
class Budget:
    """The hardware budget asked for, checked: accelerator x devices x days at an MFU."""

    accelerator: str
    devices: int
    days: float
    base_mfu: float  # the planning MFU before the layout's recomputation
    compute: str  # bf16, or fp16 where the accelerator has no bf16
    peak: float  # the accelerator's dense FLOP/s at that precision
    nodes: int
    per_node: int

    @property
    def device_hours(self) -> float:
        return self.devices * self.days * 24


def _budget(accelerator: str, devices: int, days: float, mfu: float | None) -> Budget:
    """The budget, each argument checked (UserError naming the flag)."""
    if accelerator not in CATALOG:
        raise UserError(f"runlib propose: unknown accelerator {accelerator!r}; known: {', '.join(CATALOG)}")
    if devices < 1 or (devices > 8 and devices % 8):
        raise UserError(f"runlib propose: --devices {devices}: give 1-8, or a multiple of 8 (8 per node)")
    if not 0 < days <= 3650:
        raise UserError(f"runlib propose: --days {days}: give a duration in (0, 3650]")
    base_mfu = BASE_MFU if mfu is None else mfu
    if not 0.01 <= base_mfu <= 0.9:
        raise UserError(f"runlib propose: --mfu {mfu}: give a fraction in [0.01, 0.9] (0.40 is typical)")
    acc = CATALOG[accelerator]
    compute = "bf16" if acc.supports("bf16") else "fp16"
    nodes, per_node = (devices // 8, 8) if devices >= 8 else (1, devices)
    return Budget(accelerator, devices, days, base_mfu, compute, acc.peak_tflops[compute] * 1e12, nodes, per_node)


# ---------------------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class Fit:
    """The run that spends the budget's FLOPs at one MFU factor: the shape, the tokens and the fit's optimum
    (choose_shape), DeepSeek LLM's batch and LR, the schedule's steps."""

    vocab_rows: int
    seq_len: int
    shape: Shape
    tokens: float
    n_opt: float
    d_opt: float
    b_opt: float  # DeepSeek LLM's B_opt, tokens
    per_rank: int  # sequences per data-parallel rank per step
    step_tokens: int
    steps: int
    anneal_steps: int
    lr: float
    warmup_steps: int


@dataclass(frozen=True)
class DataPlan:
    """_sources: the spec's data.sources, the foundation and anneal mixtures, the header's notes."""

    sources: dict[str, Any]
    mixture: dict[str, float]
    anneal_mixture: dict[str, float]
    notes: list[str]


def _fit(budget: Budget, factor: float, data: str | None) -> tuple[Fit, DataPlan]:
    """The fit for the budget's FLOPs at `factor` x its MFU, and the data it trains on."""
    budget_flops = PLAN_SHARE * budget.device_hours * 3600 * budget.peak * budget.base_mfu * factor
    n_guess = (budget_flops / 6 / 20) ** 0.5  # ~20 tokens per parameter, only to pick vocab and context
    vocab_rows = 32768 if n_guess < 1e9 else 65536
    seq_len = 2048 if n_guess < 1e9 else 4096
    shape, tokens, n_opt, d_opt = choose_shape(budget_flops, vocab_rows, seq_len)
    data_plan = DataPlan(*_sources(data, tokens))
    non_embedding = shape.layers * (4 * shape.d_model**2 + 3 * shape.d_model * shape.d_ff + 2 * shape.d_model)
    m = 6.0 * non_embedding + 6.0 * shape.layers * shape.d_model * seq_len
    b_opt = deepseek_optimal_batch_tokens(m * tokens)
    dp = budget.devices
    per_rank = max(1, round(b_opt / seq_len / dp))
    step_tokens = per_rank * dp * seq_len
    steps = max(10, round(tokens / step_tokens))
    anneal_steps = max(1, math.floor(ANNEAL_SHARE * steps))  # floor: at most PHASE002's 10%
    lr = float(f"{deepseek_optimal_lr(m * tokens):.3g}")
    warmup_steps = max(1, min(MAX_WARMUP_STEPS, round(0.01 * steps)))
    fit = Fit(
        vocab_rows=vocab_rows,
        seq_len=seq_len,
        shape=shape,
        tokens=tokens,
        n_opt=n_opt,
        d_opt=d_opt,
        b_opt=b_opt,
        per_rank=per_rank,
        step_tokens=step_tokens,
        steps=steps,
        anneal_steps=anneal_steps,
        lr=lr,
        warmup_steps=warmup_steps,
    )
    return fit, data_plan


def _spec_data(budget: Budget, name: str, factor: float, fit: Fit, data_plan: DataPlan) -> dict[str, Any]:
    """The spec's YAML data for the fit, before the layout (data parallel, micro-batch 1)."""
    steps, step_tokens, anneal_steps = fit.steps, fit.step_tokens, fit.anneal_steps
    spec_data: dict[str, Any] = {
        "name": name,
        "hardware": {
            "accelerator": budget.accelerator,
            "nodes": budget.nodes,
            "devices_per_node": budget.per_node,
            "mfu": round(budget.base_mfu * factor, 4),
            "node_mtbf_hours": round(GPU_MTBF_HOURS / budget.per_node, 1),
        },
        "budget": {"gpu_hours": int(budget.device_hours), "days": budget.days},
        "model": _model_dict(fit.shape, fit.vocab_rows, fit.seq_len),
        "tokenizer": {
            "vocab_size": fit.vocab_rows - 256,
            "reserved_tokens": 256,
            "digits": "single",
            "train_on": data_plan.mixture,
        },
        "data": {"sources": data_plan.sources},
        "batch": {"micro_batch": 1, "grad_accum": fit.per_rank, "global_batch": f"{step_tokens} tokens"},
        "optimizer": {
            "kind": "adamw",
            "lr": fit.lr,
            "betas": [0.9, 0.95],
            "eps": 1e-8,
            "weight_decay": 0.1,
            "grad_clip": 1.0,
            "z_loss": 1e-4,
        },
        "schedule": {
            "kind": "wsd",
            "warmup": f"{fit.warmup_steps} steps",
            "decay": f"{anneal_steps * step_tokens} tokens",
            "min_lr_ratio": 0.0,
        },
        "precision": {"compute": budget.compute, "loss_scaling": "dynamic" if budget.compute == "fp16" else "none"},
        "tokens": steps * step_tokens,
        "phases": _phases(fit, data_plan),
        "checkpoint": {"every": "1000 steps"},
        "monitor": {
            "eval_every": f"{max(50, steps // 100)} steps",
            "spike": {"zscore": 5.0, "window": 200, "action": "log"},
        },
    }
    if budget.compute == "fp16":
        spec_data["checkpoint"]["state"] = ["model", "optimizer", "scheduler", "rng", "data", "scaler"]
    return spec_data


def _phases(fit: Fit, data_plan: DataPlan) -> list[dict[str, Any]]:
    """A foundation phase, then the anneal over the last ANNEAL_SHARE of the steps."""
    return [
        {
            "name": "foundation",
            "kind": "foundation",
            "tokens": f"{(fit.steps - fit.anneal_steps) * fit.step_tokens} tokens",
            "mixture": data_plan.mixture,
        },
        {
            "name": "anneal",
            "kind": "anneal",
            "tokens": f"{fit.anneal_steps * fit.step_tokens} tokens",
            "mixture": data_plan.anneal_mixture,
        },
    ]


def _fit_and_layout(budget: Budget, data: str | None, name: str) -> tuple[Fit, DataPlan, dict[str, Any], Layout]:
    """The fit and the layout that agree: the layout's MFU changes the budget's FLOPs, which may change the
    shape and the layout (at most 3 rounds)."""
    factor, layout = 1.0, None
    for _ in range(3):
        fit, data_plan = _fit(budget, factor, data)
        spec_data = _spec_data(budget, name, factor, fit, data_plan)
        new_layout = _layout(spec_data, fit.per_rank)
        if layout == new_layout:
            break
        layout = new_layout
        factor = new_layout.mfu_factor
    assert layout is not None
    return fit, data_plan, spec_data, layout


# ------------------------------------------------------------------------------- the comments


def _why(budget: Budget, fit: Fit, layout: Layout, plan: Plan, spec_data: dict[str, Any]) -> dict[str, str]:
    """Each chosen number's comment: where it comes from."""
    c_fit = 6.0 * plan.params.total * plan.tokens_total
    shape, sharding, recompute = fit.shape, layout.sharding, layout.recompute
    young = plan.checkpoint.young_optimum_hours or 1.0
    return {
        "hardware.mfu": f"{budget.base_mfu:g} planning MFU x {layout.mfu_factor:g} for {recompute} recomputation (Korthikanti et al. 2022)",
        "hardware.node_mtbf_hours": f"Llama 3 §3.3.4: 419 failures / (54 d x 16,384 GPUs) = {GPU_MTBF_HOURS:,.0f} GPU-h, / {budget.per_node} per node",
        "budget.gpu_hours": f"{budget.devices} devices x {budget.days:g} days x 24",
        "model.layers": f"shape nearest N_opt {fit.n_opt / 1e9:.3g}B (Besiroglu et al. 2024 refit at C = 6ND = {c_fit:.3g})",
        "model.d_model": f"d_model/layers {shape.aspect:.0f} (published 64-128; Llama 2 7B: 128)",
        "model.heads": f"head_dim {shape.d_model // shape.heads}",
        "model.d_ff": "8/3 d_model rounded up to 256 (SwiGLU, Llama)",
        "model.seq_len": "2048 below ~1B parameters, else 4096 (Pythia, GPT-3; Llama 2, OLMo 2)",
        "model.vocab_size": f"{fit.vocab_rows} rows: learned + 256 reserved, a multiple of 128",
        "batch.grad_accum": f"{fit.per_rank} sequences per rank per step: DeepSeek B_opt {fit.b_opt:,.0f} tokens (arXiv 2401.02954, eq. 1)",
        "batch.micro_batch": f"largest that fits with {sharding}/{recompute}: {layout.memory_share:.0%} of device memory",
        "optimizer.lr": "DeepSeek eta_opt = 0.3118 C^-0.125",
        "optimizer.z_loss": "PaLM's 1e-4 (arXiv 2204.02311)",
        "schedule.warmup": "min(2000 steps, 1% of the run) (DeepSeek LLM §2.3)",
        "schedule.decay": "the anneal phase (SCHED006), 10% of the run (Hägele et al. 2024)",
        "tokens": f"{fit.steps:,} steps: the budget's FLOPs / the plan's {plan.flops_per_token:.3g} FLOPs per token; D_opt {fit.d_opt / 1e9:.3g}B",
        "parallelism.sharding": f"best estimated MFU that fits: {sharding}, recompute {recompute}",
        "checkpoint.every": f"Young's optimum {young * 60:.0f} min (write {plan.checkpoint.write_seconds:.0f} s, job MTBF {plan.checkpoint.job_mtbf_hours or 0:,.0f} h)",
        "monitor.eval_every": "held-out loss per source every ~1% of the run",
        **{f"data.sources.{k}": "from --data" for k in spec_data["data"]["sources"]},
    }


def _header(budget: Budget, data: str | None, fit: Fit, plan: Plan, data_notes: list[str]) -> list[str]:
    """The proposal's header: the command, the budget's share planned, the fit and how near the spec is."""
    params = plan.params.total
    c_fit = 6.0 * params * plan.tokens_total
    n_ratio, d_ratio = params / fit.n_opt, plan.tokens_total / fit.d_opt
    device_hours = budget.device_hours
    return [
        f"Proposed by `runlib propose --accelerator {budget.accelerator} --devices {budget.devices} --days {budget.days:g}"
        + (f" --data {data}`" if data else "`")
        + " (runlib/review/propose.py documents the rules).",
        f"Budget: {device_hours:,.0f} device-hours; planned {plan.gpu_hours:,.0f} ({plan.gpu_hours / device_hours:.0%}; the rest for eval, checkpoints, restarts).",
        f"Compute-optimal fit: Besiroglu et al. 2024 refit (arXiv 2404.10102) at C = 6ND = {c_fit:.3g} FLOPs:",
        f"  N_opt {fit.n_opt:,.0f}, D_opt {fit.d_opt:,.0f}; this spec: N {params:,} ({n_ratio:.3f}x), D {plan.tokens_total:,} ({d_ratio:.3f}x).",
        *data_notes,
        "Each number's comment says why it was chosen.",
    ]


def _summary(budget: Budget, fit: Fit, layout: Layout, plan: Plan, every: int) -> str:
    """The choices in a few lines, for the terminal."""
    params = plan.params.total
    n_ratio, d_ratio = params / fit.n_opt, plan.tokens_total / fit.d_opt
    return (
        f"proposal: {params / 1e9:.3g}B parameters on {plan.tokens_total / 1e9:.3g}B tokens "
        f"(refit optimum {fit.n_opt / 1e9:.3g}B / {fit.d_opt / 1e9:.3g}B: {n_ratio:.2f}x / {d_ratio:.2f}x), "
        f"{plan.wall_days:.1f} of {budget.days:g} days, batch {fit.step_tokens:,} tokens, LR {fit.lr:g}, "
        f"{layout.sharding}/{layout.recompute}, micro-batch {layout.micro_batch}, checkpoint every {every} steps\n"
    )


# ----------------------------------------------------------------------------------------- the steps


def propose(
    accelerator: str,
    devices: int,
    days: float,
    data: str | None = None,
    mfu: float | None = None,
    name: str | None = None,
) -> Proposal:
    """Check the budget, fit the run and its layout, place the checkpoints at Young's interval, then write
    the spec with each number's comment and the header."""
    budget = _budget(accelerator, devices, days, mfu)
    name = name or f"proposal-{accelerator}-{devices}x{days:g}d"
    fit, data_plan, spec_data, layout = _fit_and_layout(budget, data, name)
    spec_data["parallelism"] = {"sharding": layout.sharding, "activation_checkpointing": layout.recompute}
    spec_data["batch"] = {
        **spec_data["batch"],
        "micro_batch": layout.micro_batch,
        "grad_accum": fit.per_rank // layout.micro_batch,
    }
    plan = derive(validate_data(spec_data).spec)
    young = plan.checkpoint.young_optimum_hours or 1.0
    hours_per_step = sum(p.hours for p in plan.phases) / max(plan.steps_total, 1)
    every = max(1, _two_digits(young / hours_per_step))
    spec_data["checkpoint"]["every"] = f"{every} steps"
    if data is None:  # the placeholder holds exactly the run's tokens: one epoch
        spec_data["data"]["sources"]["web"]["tokens"] = plan.tokens_total
    draft = Draft()
    _flatten(draft, spec_data, "", _why(budget, fit, layout, plan, spec_data))
    draft.header = _header(budget, data, fit, plan, data_plan.notes)
    text = draft.to_yaml()
    loaded = load_draft(text, "<proposal>", "runlib propose")
    summary = _summary(budget, fit, layout, plan, every)
    return Proposal(text, loaded, summary, plan.params.total, plan.tokens_total, fit.n_opt, fit.d_opt)


def _two_digits(x: float) -> int:
    if x < 10:
        return max(1, round(x))
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return int(round(x / scale) * scale)


def _flatten(draft: Draft, data: dict[str, Any], prefix: str, why: dict[str, str]) -> None:
    for key, value in data.items():
        path = f"{prefix}{key}"
        if (
            isinstance(value, dict)
            and key not in ("mixture", "train_on", "spike")
            and not path.startswith("data.sources.")
        ):
            _flatten(draft, value, path + ".", why)
        else:
            draft.set(path, value, why.get(path))
