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
from typing import Any

from runlib.errors import UserError
from runlib.review.importers.draft import Draft, load_draft

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
    loaded: Any  # runlib.spec.LoadedSpec
    summary: str  # the choices in a few lines, for the terminal
    params: int
    tokens: int
    optimal_params: float
    optimal_tokens: float

    def reload(self, file: str):
        from runlib.spec import load_spec_text

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
    from runlib.plan.flops import flops_per_token
    from runlib.plan.params import count_params
    from runlib.plan.scaling import refit_optimum
    from runlib.spec.models import ModelSpec

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


def _layout(spec_data: dict[str, Any], per_rank_seqs: int) -> tuple[str, str, int, float, float]:
    """(sharding, recompute, micro_batch, estimated MFU factor, memory share) that fits, best MFU first."""
    from runlib.plan import derive
    from runlib.spec import validate_data

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
            return sharding, recompute, micro, factor, memory / capacity
    raise UserError(
        "runlib propose: no data-parallel layout fits the compute-optimal model in device memory "
        "(runlib enacts no tensor or pipeline parallelism); give more memory per device (another --accelerator)"
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
        from runlib.spec import load_spec

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
    from runlib.spec.units import parse_count

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


def propose(
    accelerator: str,
    devices: int,
    days: float,
    data: str | None = None,
    mfu: float | None = None,
    name: str | None = None,
) -> Proposal:
    from runlib.plan import derive
    from runlib.plan.hardware import CATALOG
    from runlib.plan.scaling import deepseek_optimal_batch_tokens, deepseek_optimal_lr
    from runlib.spec import validate_data

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
    peak = acc.peak_tflops[compute] * 1e12
    nodes, per_node = (devices // 8, 8) if devices >= 8 else (1, devices)
    device_hours = devices * days * 24
    name = name or f"proposal-{accelerator}-{devices}x{days:g}d"

    factor, layout = 1.0, None
    for _ in range(3):  # the layout's MFU changes the budget's FLOPs, which may change the shape and layout
        budget_flops = PLAN_SHARE * device_hours * 3600 * peak * base_mfu * factor
        n_guess = (budget_flops / 6 / 20) ** 0.5  # ~20 tokens per parameter, only to pick vocab and context
        vocab_rows = 32768 if n_guess < 1e9 else 65536
        seq_len = 2048 if n_guess < 1e9 else 4096
        shape, tokens, n_opt, d_opt = choose_shape(budget_flops, vocab_rows, seq_len)
        sources, mixture, anneal_mixture, data_notes = _sources(data, tokens)
        non_embedding = shape.layers * (4 * shape.d_model**2 + 3 * shape.d_model * shape.d_ff + 2 * shape.d_model)
        m = 6.0 * non_embedding + 6.0 * shape.layers * shape.d_model * seq_len
        b_opt = deepseek_optimal_batch_tokens(m * tokens)
        dp = devices
        per_rank = max(1, round(b_opt / seq_len / dp))
        step_tokens = per_rank * dp * seq_len
        steps = max(10, round(tokens / step_tokens))
        anneal_steps = max(1, math.floor(ANNEAL_SHARE * steps))  # floor: at most PHASE002's 10%
        lr = float(f"{deepseek_optimal_lr(m * tokens):.3g}")
        warmup_steps = max(1, min(MAX_WARMUP_STEPS, round(0.01 * steps)))
        spec_data: dict[str, Any] = {
            "name": name,
            "hardware": {
                "accelerator": accelerator,
                "nodes": nodes,
                "devices_per_node": per_node,
                "mfu": round(base_mfu * factor, 4),
                "node_mtbf_hours": round(GPU_MTBF_HOURS / per_node, 1),
            },
            "budget": {"gpu_hours": int(device_hours), "days": days},
            "model": _model_dict(shape, vocab_rows, seq_len),
            "tokenizer": {
                "vocab_size": vocab_rows - 256,
                "reserved_tokens": 256,
                "digits": "single",
                "train_on": mixture,
            },
            "data": {"sources": sources},
            "batch": {"micro_batch": 1, "grad_accum": per_rank, "global_batch": f"{step_tokens} tokens"},
            "optimizer": {
                "kind": "adamw",
                "lr": lr,
                "betas": [0.9, 0.95],
                "eps": 1e-8,
                "weight_decay": 0.1,
                "grad_clip": 1.0,
                "z_loss": 1e-4,
            },
            "schedule": {
                "kind": "wsd",
                "warmup": f"{warmup_steps} steps",
                "decay": f"{anneal_steps * step_tokens} tokens",
                "min_lr_ratio": 0.0,
            },
            "precision": {"compute": compute, "loss_scaling": "dynamic" if compute == "fp16" else "none"},
            "tokens": steps * step_tokens,
            "phases": [
                {
                    "name": "foundation",
                    "kind": "foundation",
                    "tokens": f"{(steps - anneal_steps) * step_tokens} tokens",
                    "mixture": mixture,
                },
                {
                    "name": "anneal",
                    "kind": "anneal",
                    "tokens": f"{anneal_steps * step_tokens} tokens",
                    "mixture": anneal_mixture,
                },
            ],
            "checkpoint": {"every": "1000 steps"},
            "monitor": {
                "eval_every": f"{max(50, steps // 100)} steps",
                "spike": {"zscore": 5.0, "window": 200, "action": "log"},
            },
        }
        if compute == "fp16":
            spec_data["checkpoint"]["state"] = ["model", "optimizer", "scheduler", "rng", "data", "scaler"]
        new_layout = _layout(spec_data, per_rank)
        if layout == new_layout:
            break
        layout = new_layout
        factor = new_layout[3]
    assert layout is not None
    sharding, recompute, micro, factor, memory_share = layout
    spec_data["parallelism"] = {"sharding": sharding, "activation_checkpointing": recompute}
    spec_data["batch"] = {**spec_data["batch"], "micro_batch": micro, "grad_accum": per_rank // micro}
    plan = derive(validate_data(spec_data).spec)
    young = plan.checkpoint.young_optimum_hours or 1.0
    hours_per_step = sum(p.hours for p in plan.phases) / max(plan.steps_total, 1)
    every = max(1, _two_digits(young / hours_per_step))
    spec_data["checkpoint"]["every"] = f"{every} steps"

    if data is None:  # the placeholder holds exactly the run's tokens: one epoch
        spec_data["data"]["sources"]["web"]["tokens"] = plan.tokens_total
    params = plan.params.total
    c_fit = 6.0 * params * plan.tokens_total
    why = {
        "hardware.mfu": f"{base_mfu:g} planning MFU x {factor:g} for {recompute} recomputation (Korthikanti et al. 2022)",
        "hardware.node_mtbf_hours": f"Llama 3 §3.3.4: 419 failures / (54 d x 16,384 GPUs) = {GPU_MTBF_HOURS:,.0f} GPU-h, / {per_node} per node",
        "budget.gpu_hours": f"{devices} devices x {days:g} days x 24",
        "model.layers": f"shape nearest N_opt {n_opt / 1e9:.3g}B (Besiroglu et al. 2024 refit at C = 6ND = {c_fit:.3g})",
        "model.d_model": f"d_model/layers {shape.aspect:.0f} (published 64-128; Llama 2 7B: 128)",
        "model.heads": f"head_dim {shape.d_model // shape.heads}",
        "model.d_ff": "8/3 d_model rounded up to 256 (SwiGLU, Llama)",
        "model.seq_len": "2048 below ~1B parameters, else 4096 (Pythia, GPT-3; Llama 2, OLMo 2)",
        "model.vocab_size": f"{vocab_rows} rows: learned + 256 reserved, a multiple of 128",
        "batch.grad_accum": f"{per_rank} sequences per rank per step: DeepSeek B_opt {b_opt:,.0f} tokens (arXiv 2401.02954, eq. 1)",
        "batch.micro_batch": f"largest that fits with {sharding}/{recompute}: {memory_share:.0%} of device memory",
        "optimizer.lr": "DeepSeek eta_opt = 0.3118 C^-0.125",
        "optimizer.z_loss": "PaLM's 1e-4 (arXiv 2204.02311)",
        "schedule.warmup": "min(2000 steps, 1% of the run) (DeepSeek LLM §2.3)",
        "schedule.decay": "the anneal phase (SCHED006), 10% of the run (Hägele et al. 2024)",
        "tokens": f"{steps:,} steps: the budget's FLOPs / the plan's {plan.flops_per_token:.3g} FLOPs per token; D_opt {d_opt / 1e9:.3g}B",
        "parallelism.sharding": f"best estimated MFU that fits: {sharding}, recompute {recompute}",
        "checkpoint.every": f"Young's optimum {young * 60:.0f} min (write {plan.checkpoint.write_seconds:.0f} s, job MTBF {plan.checkpoint.job_mtbf_hours or 0:,.0f} h)",
        "monitor.eval_every": "held-out loss per source every ~1% of the run",
        **{f"data.sources.{k}": "from --data" for k in spec_data["data"]["sources"]},
    }
    draft = Draft()
    _flatten(draft, spec_data, "", why)
    n_ratio, d_ratio = params / n_opt, plan.tokens_total / d_opt
    draft.header = [
        f"Proposed by `runlib propose --accelerator {accelerator} --devices {devices} --days {days:g}"
        + (f" --data {data}`" if data else "`")
        + " (runlib/review/propose.py documents the rules).",
        f"Budget: {device_hours:,.0f} device-hours; planned {plan.gpu_hours:,.0f} ({plan.gpu_hours / device_hours:.0%}; the rest for eval, checkpoints, restarts).",
        f"Compute-optimal fit: Besiroglu et al. 2024 refit (arXiv 2404.10102) at C = 6ND = {c_fit:.3g} FLOPs:",
        f"  N_opt {n_opt:,.0f}, D_opt {d_opt:,.0f}; this spec: N {params:,} ({n_ratio:.3f}x), D {plan.tokens_total:,} ({d_ratio:.3f}x).",
        *data_notes,
        "Each number's comment says why it was chosen.",
    ]
    text = draft.to_yaml()
    loaded = load_draft(text, "<proposal>", "runlib propose")
    summary = (
        f"proposal: {params / 1e9:.3g}B parameters on {plan.tokens_total / 1e9:.3g}B tokens "
        f"(refit optimum {n_opt / 1e9:.3g}B / {d_opt / 1e9:.3g}B: {n_ratio:.2f}x / {d_ratio:.2f}x), "
        f"{plan.wall_days:.1f} of {days:g} days, batch {step_tokens:,} tokens, LR {lr:g}, {sharding}/{recompute}, "
        f"micro-batch {micro}, checkpoint every {every} steps\n"
    )
    return Proposal(text, loaded, summary, params, plan.tokens_total, n_opt, d_opt)


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
