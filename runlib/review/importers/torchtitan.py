"""torchtitan: a job TOML (torchtitan/models/llama3/train_configs/*.toml), read with tomllib.

The model shape is not in the TOML: [model] names a flavor, whose arguments are torchtitan's
(torchtitan/models/llama3/__init__.py, TransformerModelArgs). The MLP width follows its FeedForward:
hidden = int(2 * 4 * dim / 3), times ffn_dim_multiplier, rounded up to multiple_of. Sections read:
[training] (local_batch_size or the older batch_size, seq_len, steps, max_norm, dataset,
mixed_precision_param/_reduce), [lr_scheduler] (warmup_steps, decay_ratio, decay_type, min_lr_factor;
older files: training.warmup_steps), [optimizer], [parallelism] (older: training.*_degree),
[checkpoint], [activation_checkpoint], [model] converters (float8). The world size is not in the TOML
(run_train.sh's NGPU, default 8): assumed 8 unless given, and then the header says so, quotes the file's own
comment on its GPUs (the presets' "# NOTE: this toml config is a preset for 64 A100 GPUs.") and names
runlib import --nodes/--devices/--accelerator.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from runlib.review.importers.common import check_source_values, fill_defaults, spec_name, whole
from runlib.review.importers.draft import Draft, HardwareChoice, UnmappableConfig

# torchtitan/models/llama3/__init__.py: llama3_configs (vocab from the Llama 3 tokenizer: 128,256)
LLAMA3_FLAVORS: dict[str, dict[str, Any]] = {
    "8B": {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.3,
        "multiple_of": 1024,
        "rope_theta": 500000,
    },
    "70B": {
        "dim": 8192,
        "n_layers": 80,
        "n_heads": 64,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.3,
        "multiple_of": 4096,
        "rope_theta": 500000,
    },
    "405B": {
        "dim": 16384,
        "n_layers": 126,
        "n_heads": 128,
        "n_kv_heads": 8,
        "ffn_dim_multiplier": 1.2,
        "multiple_of": 4096,
        "rope_theta": 500000,
    },
}
LLAMA3_VOCAB = 128256  # tiktoken Llama 3 tokenizer: 128,000 + 256 special tokens
DATASETS = {"c4": (156_000_000_000, "C4 en: ~156B tokens (Dodge et al. 2021, arXiv 2104.08758, Table 1)", "web")}
DEFAULT_WORLD = 8  # torchtitan's run_train.sh: NGPU=${NGPU:-"8"}


def ffn_hidden(dim: int, multiplier: float | None, multiple_of: int) -> int:
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _get(
    cfg: dict[str, Any], section: str, key: str, default: Any = None, *old: tuple[str, str]
) -> tuple[Any, str | None]:
    if key in cfg.get(section, {}):
        return cfg[section][key], f"[{section}] {key}"
    for sec, k in old:
        if k in cfg.get(sec, {}):
            return cfg[sec][k], f"[{sec}] {k}"
    return default, None


# ------------------------------------------------------------------------ read and validate the file


def _read_toml(text: str, file: str) -> dict[str, Any]:
    """The job TOML, its values checked (common.check_source_values)."""
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UnmappableConfig(f"{file}: not valid TOML ({exc})") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise UnmappableConfig(f"{file}: nested too deeply to read; a job TOML is a few levels deep") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit int() limit
        raise UnmappableConfig(f"{file}: not a readable TOML file ({str(exc)[:120]})") from None
    check_source_values(cfg, file)
    return cfg


def _flavor(model: dict[str, Any], file: str) -> str:
    """[model] flavor, one of LLAMA3_FLAVORS of a llama3 model."""
    name, flavor = model.get("name"), str(model.get("flavor", ""))
    if name not in ("llama3", "llama3_ft") or flavor not in LLAMA3_FLAVORS:
        raise UnmappableConfig(
            f"{file}: [model] name = {name!r}, flavor = {flavor!r}: runlib maps torchtitan's llama3 flavors "
            f"{', '.join(LLAMA3_FLAVORS)} (the shape lives in torchtitan's code, not the TOML)"
        )
    return flavor


def _named_draft(path: Path, cfg: dict[str, Any], flavor: str) -> Draft:
    """The draft with its header, name ([job] description, else the file's stem) and description."""
    d = Draft()
    d.header = [
        f"Imported by `runlib import` from {path.name} (torchtitan job TOML; model shape of flavor {flavor}",
        "from torchtitan/models/llama3/__init__.py). `assumed:` marks what the TOML does not say.",
    ]
    job = cfg.get("job", {})
    d.set("name", spec_name(str(job.get("description") or path.stem)))
    d.set("description", f"torchtitan {path.name}: {job.get('description', '')}".strip())
    return d


# ----------------------------------------------------------------------------------- map the model


def _gpu_comments(text: str) -> list[str]:
    """The TOML's comment lines that speak of GPUs (the presets' "# NOTE: ... a preset for 64 A100 GPUs."):
    the only place a job TOML speaks of its machine. Quoted in the header, never mapped: the presets copy it
    between files (llama3_8b.toml's also says 64 A100s) and the world is run_train.sh's NGPU, not the TOML's."""
    return [
        line.strip().lstrip("#").strip()[:160]
        for line in text.splitlines()
        if line.strip().startswith("#") and "gpu" in line.lower()
    ][:2]


def _hardware(d: Draft, text: str) -> int:
    """hardware.*: run_train.sh's default world (the TOML names none); its size. Without --devices/--nodes the
    header says the world is assumed, quotes what the file's comments say of its GPUs, and how to set it."""
    world = DEFAULT_WORLD
    d.set("hardware.accelerator", "h100-sxm", "assumed: torchtitan's published benchmarks run on H100s")
    chosen = d.chosen_hardware()
    if chosen is not None:
        return chosen
    d.set("hardware.nodes", max(1, world // 8), "assumed: run_train.sh's default NGPU=8 on one node")
    d.set("hardware.devices_per_node", min(world, 8), "assumed: run_train.sh's default NGPU=8")
    said = _gpu_comments(text)
    d.header += [
        f"Hardware assumed: the TOML does not state its world size; {world} x {d.get('hardware.accelerator')} is "
        "run_train.sh's default NGPU=8.",
        *(f'The file\'s comment says: "{c}"' for c in said),
        "Set the machine it runs on with runlib import --nodes N or --devices N (and --accelerator KEY):",
        "the batch, the sharding and the memory follow from it.",
    ]
    return world


def _model(d: Draft, cfg: dict[str, Any], flavor: str, file: str) -> int:
    """model.*: the flavor's TransformerModelArgs, [training] seq_len; returns seq_len."""
    args = LLAMA3_FLAVORS[flavor]
    dim = args["dim"]
    d.set("model.layers", args["n_layers"], f"n_layers, flavor {flavor}")
    d.set("model.d_model", dim, f"dim, flavor {flavor}")
    d.set("model.heads", args["n_heads"], "n_heads")
    d.set("model.kv_heads", args["n_kv_heads"], "n_kv_heads")
    d.set(
        "model.d_ff",
        ffn_hidden(dim, args["ffn_dim_multiplier"], args["multiple_of"]),
        f"int(2*4*dim/3) * {args['ffn_dim_multiplier']}, rounded up to {args['multiple_of']}",
    )
    d.set("model.activation", "swiglu", "FeedForward w1, w2, w3")
    d.set("model.norm", "rmsnorm", "RMSNorm")
    d.set("model.bias", False, "nn.Linear(..., bias=False)")
    d.set("model.position", "rope", "precompute_freqs_cis")
    d.set("model.rope_theta", float(args["rope_theta"]), "rope_theta")
    d.set("model.tie_embeddings", False, "separate tok_embeddings and output")
    d.set("model.vocab_size", LLAMA3_VOCAB, "the Llama 3 tokenizer's 128,256 ids")
    seq_value, where = _get(cfg, "training", "seq_len", 2048)
    seq = whole(seq_value, file, "training.seq_len")
    d.set("model.seq_len", seq, where or "training.seq_len default")
    return seq


def _tokenizer(d: Draft, model: dict[str, Any]) -> None:
    """tokenizer.*: the Llama 3 tokenizer (128,000 BPE tokens, 256 special ones)."""
    d.set(
        "tokenizer.pretrained",
        "tokenizers/llama3/tokenizer.model",
        next(
            (f"{key} {model[key]}" for key in ("tokenizer_path", "hf_assets_path") if key in model),
            "tokenizer_path",
        ),  # newer files (Aug 2025 on) name the Hugging Face assets' directory instead
    )
    d.set("tokenizer.vocab_size", 128000, "128,000 BPE tokens")
    d.set("tokenizer.reserved_tokens", 256, "special tokens 128000-128255")
    d.set("tokenizer.digits", "triplets", "Llama 3's pre-tokenizer splits numbers into runs of up to 3 digits")


# --------------------------------------------------------------------------------- map the training


DEGREES = (
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "data_parallel_replicate_degree",
)  # [parallelism] keys read (older files: [training])


def _parallelism(d: Draft, cfg: dict[str, Any], world: int, file: str) -> int:
    """parallelism.* but the recomputation; returns the data parallelism (FSDP over what is left)."""
    par = cfg.get("parallelism", {})
    old = cfg.get("training", {})
    degree = {name: whole(par.get(name, old.get(name, 1)), file, f"parallelism.{name}") for name in DEGREES}
    tp, pp = degree["tensor_parallel_degree"], degree["pipeline_parallel_degree"]
    cp, replicate = degree["context_parallel_degree"], degree["data_parallel_replicate_degree"]
    if world % (tp * pp * cp):
        raise UnmappableConfig(
            f"{file}: tensor {tp} x pipeline {pp} x context {cp} does not divide the {world} GPUs; give the world it "
            "runs on: runlib import --devices N (or --nodes N)"
        )
    dp = world // (tp * pp * cp)
    d.set("parallelism.tensor", tp, "tensor_parallel_degree")
    d.set("parallelism.pipeline", pp, "pipeline_parallel_degree")
    d.set("parallelism.context", cp, "context_parallel_degree")
    d.set(
        "parallelism.sharding",
        "hsdp" if replicate > 1 else "fsdp",
        "data_parallel_shard_degree -1: FSDP over the rest" + (f", replicate {replicate}" if replicate > 1 else ""),
    )
    return dp


def _activation_checkpointing(d: Draft, cfg: dict[str, Any], file: str) -> None:
    """parallelism.activation_checkpointing from [activation_checkpoint] mode and selective_ac_option."""
    ac_section = cfg.get("activation_checkpoint", {})
    ac = str(ac_section.get("mode", "selective"))
    if ac not in ("none", "selective", "full"):
        raise UnmappableConfig(f"{file}: [activation_checkpoint] mode = {ac!r}: one of none, selective, full")
    option = str(ac_section.get("selective_ac_option", "op"))
    if ac == "selective" and option != "op":
        raise UnmappableConfig(
            f"{file}: [activation_checkpoint] selective_ac_option = {option!r} (full recomputation of every "
            f'{option}th block) has no runlib value; use "op" (runlib\'s selective_op) or mode "full"'
        )
    # torchtitan's "selective" with selective_ac_option "op" (its default) is an op-level policy: runlib's
    # selective_op (runlib/model/parallelize.py op_selective_context)
    d.set(
        "parallelism.activation_checkpointing",
        "selective_op" if ac == "selective" else ac,
        "[activation_checkpoint] mode",
    )


def _batch(d: Draft, cfg: dict[str, Any], dp: int, seq: int, file: str) -> int:
    """batch.*: local_batch_size per rank, accumulated up to global_batch_size; returns the tokens per step."""
    local, where = _get(cfg, "training", "local_batch_size", None, ("training", "batch_size"))
    if local is None:
        local, where = 8, "torchtitan's default local_batch_size"
    global_batch, _ = _get(cfg, "training", "global_batch_size", -1)
    local, global_batch = (
        whole(local, file, "training.local_batch_size"),
        whole(global_batch, file, "training.global_batch_size"),
    )
    per_step = int(local) * dp
    accum = 1
    if int(global_batch) > 0:
        if int(global_batch) % per_step:
            raise UnmappableConfig(
                f"{file}: global_batch_size {global_batch} is not a multiple of local_batch_size x dp = {per_step}"
            )
        accum = int(global_batch) // per_step
    d.set("batch.micro_batch", int(local), where)
    d.set(
        "batch.grad_accum",
        accum,
        "global_batch_size / (local_batch_size x dp)" if accum > 1 else "no gradient accumulation",
    )
    d.set(
        "batch.global_batch",
        f"{per_step * accum * int(seq)} tokens",
        f"{per_step * accum} sequences of {int(seq)} on dp {dp}",
    )
    return per_step * accum * int(seq)


def _optimizer(d: Draft, cfg: dict[str, Any], file: str) -> None:
    """optimizer.*: [optimizer] (AdamW or Adam, torchtitan's defaults) and [training] max_norm."""
    opt = cfg.get("optimizer", {})
    kind = str(opt.get("name", "AdamW")).lower()
    if kind not in ("adamw", "adam"):
        raise UnmappableConfig(f"{file}: [optimizer] name = {opt.get('name')!r}: runlib maps AdamW and Adam")
    d.set("optimizer.kind", kind, "[optimizer] name")
    d.set("optimizer.lr", float(opt.get("lr", 8e-4)), "[optimizer] lr")
    d.set(
        "optimizer.betas",
        [float(opt.get("beta1", 0.9)), float(opt.get("beta2", 0.95))],
        "beta1, beta2 (torchtitan defaults 0.9, 0.95)",
    )
    d.set("optimizer.eps", float(opt.get("eps", 1e-8)), "[optimizer] eps")
    d.set("optimizer.weight_decay", float(opt.get("weight_decay", 0.1)), "weight_decay (torchtitan default 0.1)")
    clip, where_clip = _get(cfg, "training", "max_norm", 1.0)
    d.set("optimizer.grad_clip", float(clip), where_clip or "max_norm default")


def _schedule(d: Draft, cfg: dict[str, Any], steps: int, file: str) -> None:
    """schedule.*: [lr_scheduler] warmup, then a decay right after it, or WSD with decay_ratio."""
    lr_cfg = cfg.get("lr_scheduler", {})
    warmup, where_w = _get(cfg, "lr_scheduler", "warmup_steps", 200, ("training", "warmup_steps"))
    decay_ratio = lr_cfg.get("decay_ratio")
    decay_type = str(lr_cfg.get("decay_type", "linear"))
    if decay_type not in ("linear", "cosine"):
        raise UnmappableConfig(
            f"{file}: [lr_scheduler] decay_type = {decay_type!r}: runlib has linear and cosine decays"
        )
    if decay_ratio is not None:
        d.set("schedule.kind", "wsd", f"decay_ratio {decay_ratio}: warmup, stable, {decay_type} decay")
        d.set("schedule.decay", f"{max(1, math.ceil(float(decay_ratio) * int(steps)))} steps", "decay_ratio x steps")
    else:
        d.set("schedule.kind", decay_type, f"decay_type {decay_type}, decaying right after warmup (decay_ratio unset)")
    d.set("schedule.warmup", f"{int(warmup)} steps", where_w or "warmup_steps default")
    d.set(
        "schedule.min_lr_ratio",
        float(lr_cfg.get("min_lr_factor", lr_cfg.get("lr_min", 0.0))),
        "min_lr_factor (default 0)",
    )


def _precision(d: Draft, cfg: dict[str, Any], model: dict[str, Any]) -> None:
    """precision.*: fp8 with the float8 converter, else mixed_precision_param; grads by mixed_precision_reduce."""
    converters = model.get("converters", [])
    param_dtype, _ = _get(cfg, "training", "mixed_precision_param", "bfloat16")
    reduce_dtype, _ = _get(cfg, "training", "mixed_precision_reduce", "float32")
    compute = "fp8" if "float8" in converters else {"bfloat16": "bf16", "float32": "fp32"}.get(str(param_dtype), "bf16")
    d.set("precision.compute", compute, "float8 converter" if compute == "fp8" else "mixed_precision_param")
    d.set("precision.grads", "fp32" if reduce_dtype == "float32" else "bf16", "mixed_precision_reduce")


def _data(d: Draft, cfg: dict[str, Any]) -> str:
    """data.*: [training] dataset as a placeholder source (its size where DATASETS knows it); its name."""
    dataset = str(cfg.get("training", {}).get("dataset", "c4"))
    known = DATASETS.get(dataset)
    source = spec_name(dataset).replace("-", "_").replace(".", "_")
    d.set(f"data.sources.{source}.domain", known[2] if known else "web", None if known else "assumed: web text")
    d.set(
        f"data.sources.{source}.input",
        {"format": "jsonl", "path": f"data/raw/{source}/*.jsonl"},
        f"placeholder for dataset {dataset!r}: put its documents there",
    )
    if known:
        d.set(f"data.sources.{source}.tokens", known[0], known[1])
    d.set("data.packing", "stream", "torchtitan's HuggingFaceDataset concatenates documents with BOS/EOS")
    d.set("data.boundary_targets", "kept", "every target scored")
    return source


def _cadence(d: Draft, cfg: dict[str, Any]) -> None:
    """checkpoint.* from [checkpoint], monitor.log_every from [metrics] log_freq."""
    ckpt = cfg.get("checkpoint", {})
    if ckpt.get("enable_checkpoint", ckpt.get("enable", False)):
        d.set("checkpoint.every", f"{int(ckpt.get('interval', 500))} steps", "[checkpoint] interval")
    d.set("checkpoint.keep", int(ckpt.get("keep_latest_k", 10) or 10), "keep_latest_k")
    log_freq = cfg.get("metrics", {}).get("log_freq")
    if log_freq:
        d.set("monitor.log_every", f"{int(log_freq)} steps", "[metrics] log_freq")


# ----------------------------------------------------------------------------------------- the steps


def import_torchtitan(path: Path, text: str, hardware: HardwareChoice | None = None) -> Draft:
    """Read and validate (the TOML, a llama3 flavor), map the hardware (assumed), the flavor's model and the
    tokenizer, then the training from the TOML's sections, torchtitan's defaults where a key is missing."""
    file = str(path)
    cfg = _read_toml(text, file)
    model = cfg.get("model", {})
    flavor = _flavor(model, file)
    d = _named_draft(path, cfg, flavor)
    d.choice = hardware or HardwareChoice()
    world = _hardware(d, text)
    seq = _model(d, cfg, flavor, file)
    _tokenizer(d, model)
    dp = _parallelism(d, cfg, world, file)
    _activation_checkpointing(d, cfg, file)
    step_tokens = _batch(d, cfg, dp, seq, file)
    steps = whole(_get(cfg, "training", "steps", 10000)[0], file, "training.steps")
    run_tokens = int(steps) * step_tokens
    _optimizer(d, cfg, file)
    _schedule(d, cfg, steps, file)
    _precision(d, cfg, model)
    d.set("tokens", run_tokens, f"steps {int(steps):,} x {step_tokens:,} tokens")
    source = _data(d, cfg)
    _cadence(d, cfg)
    fill_defaults(d, run_tokens, source)
    return d
