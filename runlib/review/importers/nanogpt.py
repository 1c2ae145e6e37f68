"""nanoGPT: a config file of Python assignments (config/train_gpt2.py style) over train.py's defaults.

The file is parsed with `ast` and never executed: only module-level `name = <expr>` assignments whose
value is a literal or arithmetic on literals and earlier names (`5 * 8`) are read; anything else
(a call, a conditional) is reported and the train.py default used. Mapping, from karpathy/nanoGPT:
  train.py       defaults below; gradient_accumulation_steps is global and divided by the DDP world size;
                 get_lr(): linear warmup over warmup_iters, cosine to min_lr at lr_decay_iters (decay_lr)
  model.py       GPT: learned positions (wpe, block_size rows), LayerNorm and Linear biases iff `bias`,
                 GELU MLP of 4*n_embd, lm_head tied to wte; vocab 50304 (50257 padded) without meta.pkl
  data/*/prepare.py  token counts of the prepared datasets (DATASET_TOKENS)
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlib.review.importers.common import MAX_SOURCE_NUMBER, check_source_values, fill_defaults, spec_name, whole
from runlib.review.importers.draft import Draft, UnmappableConfig

# train.py's defaults (karpathy/nanoGPT train.py, "default config values designed to train a gpt2 (124M) on OpenWebText")
TRAIN_DEFAULTS: dict[str, Any] = {
    "eval_interval": 2000,
    "log_interval": 1,
    "always_save_checkpoint": True,
    "init_from": "scratch",
    "dataset": "openwebtext",
    "gradient_accumulation_steps": 40,
    "batch_size": 12,
    "block_size": 1024,
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "bias": False,
    "learning_rate": 6e-4,
    "max_iters": 600000,
    "weight_decay": 1e-1,
    "beta1": 0.9,
    "beta2": 0.95,
    "grad_clip": 1.0,
    "decay_lr": True,
    "warmup_iters": 2000,
    "lr_decay_iters": 600000,
    "min_lr": 6e-5,
    "device": "cuda",
    "dtype": "bfloat16",  # 'bfloat16' if the GPU supports it, else 'float16'
}
# tokens in each prepared dataset's train.bin, as its prepare.py prints them
DATASET_TOKENS = {
    "openwebtext": (9_035_582_198, "data/openwebtext/prepare.py: train.bin has 9,035,582,198 tokens", "web"),
    "shakespeare": (301_966, "data/shakespeare/prepare.py: train.bin has 301,966 tokens", "books"),
}
GPT2_PADDED_VOCAB = (
    50304  # model.py / train.py: "defaulting to vocab_size of GPT-2 to 50304 (50257 rounded up for efficiency)"
)
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_NPROC = re.compile(r"--nproc_per_node[= ](\d+)")
_NNODES = re.compile(r"--nnodes[= ](\d+)")


class TooLarge(ValueError):
    """Arithmetic in the config that leaves every real value behind (`x = x * x` repeated)."""


def _bounded(result: Any) -> Any:
    """The result of one operation, or TooLarge past MAX_SOURCE_NUMBER or not finite: checked after every
    operation, so that no operand exceeds ~50 bits and repeated squaring (`x = x*x` 26 times: 2^26-bit
    integers, minutes of multiplication) stops at its third step."""
    if isinstance(result, complex):
        raise ValueError("complex")
    if isinstance(result, float) and not math.isfinite(result):
        raise TooLarge(f"{result} is not finite")
    if isinstance(result, (int, float)) and abs(result) > MAX_SOURCE_NUMBER:
        raise TooLarge(f"the value exceeds {MAX_SOURCE_NUMBER:.0e}")
    return result


def _value(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, names)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, names), _value(node.right, names)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (left, right)):
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return _bounded(_OPS[type(node.op)](left, right))
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    raise ValueError(ast.dump(node)[:60])


def read_assignments(text: str, file: str) -> tuple[dict[str, Any], list[str]]:
    """Module-level `name = literal` assignments; the names skipped, with why."""
    try:
        tree = ast.parse(text, filename=file)
    except SyntaxError as exc:
        raise UnmappableConfig(
            f"{file}:{exc.lineno}: not a Python file ({exc.msg}); a nanoGPT config is assignments"
        ) from None
    except (RecursionError, MemoryError):  # CPython's parser on deeply nested expressions
        raise UnmappableConfig(f"{file}: nested too deeply to read; a nanoGPT config is flat assignments") from None
    names: dict[str, Any] = {}
    skipped: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target = stmt.targets[0].id
            try:
                names[target] = _value(stmt.value, names)
            except TooLarge as exc:
                raise UnmappableConfig(
                    f"{file}:{stmt.lineno}: {target}: {exc}; no nanoGPT setting is that large: write the value the "
                    "run used"
                ) from None
            except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
                skipped.append(f"{target} (line {stmt.lineno}: not a literal; train.py's default used)")
    return names, skipped


@dataclass(frozen=True)
class NanoConfig:
    """train.py's configuration: its defaults overridden by the file's assignments (`given`)."""

    given: dict[str, Any]
    file: str

    def __getitem__(self, key: str) -> Any:
        return self.given[key] if key in self.given else TRAIN_DEFAULTS[key]

    def count(self, key: str) -> int:
        """A count of the configuration (common.whole: a fraction is refused)."""
        return whole(self[key], self.file, key)

    def note(self, key: str) -> str:
        """Where the value of `key` comes from: the file ([CFG]) or train.py's default."""
        return f"{key} [CFG]" if key in self.given else f"{key}, train.py default"


@dataclass(frozen=True)
class Launch:
    """The DDP world of the config's torchrun launch comment; one process without one."""

    world: int
    per_node: int
    nodes: int
    torchrun: bool  # a torchrun --nproc_per_node in the file
    nnodes: bool  # and --nnodes


@dataclass(frozen=True)
class Batch:
    """train.py's batch: batch_size sequences of block_size per process, gradient_accumulation_steps over
    all processes (divided by the world size)."""

    micro: int
    block: int
    gas_global: int
    grad_accum: int

    @property
    def step_tokens(self) -> int:
        return self.micro * self.block * self.gas_global


# ------------------------------------------------------------------------ read and validate the file


def _read_config(text: str, file: str) -> tuple[NanoConfig, list[str]]:
    """The configuration and the assignments skipped; refused without any assignment."""
    names, skipped = read_assignments(text, file)
    check_source_values(names, file)
    if not names:
        raise UnmappableConfig(f"{file}: no `name = value` assignments found; is this a nanoGPT config file?")
    return NanoConfig(names, file), skipped


def _pretraining_dataset(cfg: NanoConfig) -> str:
    """The dataset of a run from scratch on a BPE dataset: a fine-tune and a character vocabulary refused."""
    init_from = str(cfg["init_from"])
    if init_from != "scratch":
        raise UnmappableConfig(
            f"{cfg.file}: init_from = {init_from!r} continues from an existing model (a fine-tune or resume); a run "
            "spec describes pre-training from scratch: set init_from = 'scratch' or import the base run's config"
        )
    dataset = str(cfg["dataset"])
    if dataset.endswith("_char"):
        raise UnmappableConfig(
            f"{cfg.file}: dataset = {dataset!r} uses nanoGPT's character-level vocabulary (meta.pkl); runlib trains "
            "byte-level BPE tokenizers only: use a BPE dataset (openwebtext, shakespeare)"
        )
    return dataset


def _launch(text: str) -> Launch:
    """torchrun --nproc_per_node (and --nnodes) of the launch comment."""
    nproc, nnodes = _NPROC.search(text), _NNODES.search(text)
    world = 1
    if nproc:
        world = int(nproc.group(1)) * (int(nnodes.group(1)) if nnodes else 1)
    per_node = int(nproc.group(1)) if nproc else 1
    return Launch(world, per_node, world // per_node, torchrun=nproc is not None, nnodes=nnodes is not None)


def _batch_sizes(cfg: NanoConfig, world: int) -> Batch:
    """The batch, gradient_accumulation_steps divisible by the world (train.py asserts it)."""
    gas_global = cfg.count("gradient_accumulation_steps")
    if gas_global % world:
        raise UnmappableConfig(
            f"{cfg.file}: gradient_accumulation_steps = {gas_global} is not divisible by the {world} DDP processes "
            "(train.py asserts it): fix the config or the launch command"
        )
    micro, block = cfg.count("batch_size"), cfg.count("block_size")
    return Batch(micro, block, gas_global, gas_global // world)


def _named_draft(path: Path, cfg: NanoConfig, skipped: list[str], description: str) -> Draft:
    """The draft with its header (the skipped assignments listed), name, description and seed."""
    d = Draft()
    d.header = [
        f"Imported by `runlib import` from {path.name} (nanoGPT config; read with ast, not executed).",
        "Values without [CFG] are train.py's defaults; `assumed:` marks what nanoGPT does not say.",
    ] + [f"Skipped: {s}" for s in skipped]
    d.set("name", spec_name(str(cfg.given.get("wandb_run_name", path.stem))))
    d.set("description", description)
    d.set("seed", 1337, "torch.manual_seed(1337 + seed_offset), train.py")
    return d


# ----------------------------------------------------------------------------------- map the model


def _hardware(d: Draft, cfg: NanoConfig, launch: Launch) -> None:
    """hardware.*: a CPU by `device`, else nanoGPT's A100s; the nodes and devices of the launch comment."""
    if str(cfg["device"]).startswith("cpu"):
        d.set("hardware.accelerator", "cpu", cfg.note("device"))
    else:
        d.assume("hardware.accelerator", "a100-40gb", "nanoGPT's reference runs use 8x A100 40GB (README)")
    if launch.torchrun:
        d.set(
            "hardware.nodes",
            launch.nodes,
            "torchrun --nnodes in the config's launch comment" if launch.nnodes else "one node (torchrun --standalone)",
        )
        d.set("hardware.devices_per_node", launch.per_node, "torchrun --nproc_per_node in the config's launch comment")
    else:
        d.assume("hardware.nodes", 1, "no torchrun launch line in the config: a single process")
        d.assume("hardware.devices_per_node", 1, "no torchrun launch line in the config: a single process")


def _model(d: Draft, cfg: NanoConfig, block: int) -> None:
    """model.*: model.py's GPT (GELU MLP of 4 * n_embd, LayerNorm, learned positions, tied embeddings)."""
    n_embd = cfg.count("n_embd")
    d.set("model.layers", cfg.count("n_layer"), cfg.note("n_layer"))
    d.set("model.d_model", n_embd, cfg.note("n_embd"))
    d.set("model.heads", cfg.count("n_head"), cfg.note("n_head"))
    d.set("model.d_ff", 4 * n_embd, "4 * n_embd (model.py MLP)")
    d.set("model.activation", "gelu", "nn.GELU (model.py)")
    d.set("model.norm", "layernorm", "LayerNorm (model.py)")
    d.set("model.bias", bool(cfg["bias"]), cfg.note("bias"))
    d.set("model.position", "learned", "wpe, block_size rows (model.py)")
    d.set("model.tie_embeddings", True, "wte.weight = lm_head.weight (model.py)")
    d.set(
        "model.vocab_size",
        whole(cfg.given.get("vocab_size", GPT2_PADDED_VOCAB), cfg.file, "vocab_size"),
        "GPT-2's 50257 padded to 50304 (train.py)",
    )
    d.set("model.seq_len", block, cfg.note("block_size"))


def _tokenizer(d: Draft) -> None:
    """tokenizer.*: GPT-2's BPE, as the prepare.py scripts encode with it."""
    d.set("tokenizer.pretrained", "tokenizers/gpt2/tokenizer.json", "GPT-2 BPE (tiktoken 'gpt2', prepare.py)")
    d.set("tokenizer.vocab_size", 50256, "50,257 ids less <|endoftext|>")
    d.set("tokenizer.reserved_tokens", 1, "<|endoftext|> after each document (prepare.py)")
    d.set("tokenizer.digits", "none", "GPT-2's pre-tokenizer keeps digit runs whole")


def _data(d: Draft, dataset: str) -> str:
    """data.*: the dataset as a placeholder source (its size where DATASET_TOKENS knows it), get_batch's
    random windows; returns the source's name."""
    known = DATASET_TOKENS.get(dataset)
    source = spec_name(dataset).replace("-", "_").replace(".", "_")
    d.set(f"data.sources.{source}.domain", known[2] if known else "web", None if known else "assumed: web text")
    d.set(
        f"data.sources.{source}.input",
        {"format": "jsonl", "path": f"data/raw/{source}/*.jsonl"},
        f"placeholder for dataset = {dataset!r}: put its documents there before running",
    )
    if known:
        d.set(f"data.sources.{source}.tokens", known[0], known[1])
    d.set("data.packing", "stream", "random block_size windows of the concatenated tokens (get_batch)")
    d.set("data.boundary_targets", "kept", "every target scored (model.py forward)")
    d.set("data.loss_normalization", "micro_batch_mean", "cross-entropy mean per micro-batch / grad accumulation")
    d.set("data.token_dtype", "uint16", "np.uint16 memmap (prepare.py)")
    return source


# --------------------------------------------------------------------------------- map the training


def _batch(d: Draft, cfg: NanoConfig, batch: Batch, world: int) -> None:
    """parallelism.sharding (DDP) and batch.*."""
    d.set("parallelism.sharding", "none", "DDP")
    d.set("batch.micro_batch", batch.micro, cfg.note("batch_size"))
    d.set("batch.grad_accum", batch.grad_accum, f"gradient_accumulation_steps {batch.gas_global} / {world} processes")
    d.set("batch.global_batch", f"{batch.step_tokens} tokens", "batch_size * block_size * gradient_accumulation_steps")


def _optimizer(d: Draft, cfg: NanoConfig) -> float:
    """optimizer.*: configure_optimizers' AdamW; returns the learning rate."""
    lr = float(cfg["learning_rate"])
    d.set("optimizer.kind", "adamw", "torch.optim.AdamW (model.py configure_optimizers)")
    d.set("optimizer.lr", lr, cfg.note("learning_rate"))
    d.set("optimizer.betas", [float(cfg["beta1"]), float(cfg["beta2"])], "beta1, beta2")
    d.set("optimizer.eps", 1e-8, "AdamW default")
    d.set("optimizer.weight_decay", float(cfg["weight_decay"]), cfg.note("weight_decay"))
    d.set(
        "optimizer.grad_clip",
        float(cfg["grad_clip"]),
        cfg.note("grad_clip") + ("; 0 disables clipping" if not cfg["grad_clip"] else ""),
    )
    return lr


def _schedule(d: Draft, cfg: NanoConfig, lr: float, max_iters: int) -> None:
    """schedule.*: get_lr's warmup and cosine to min_lr at lr_decay_iters, or a constant LR (decay_lr False)."""
    warmup = cfg.count("warmup_iters")
    if cfg["decay_lr"]:
        d.set("schedule.kind", "cosine", "get_lr: linear warmup, then cosine (train.py)")
        d.set("schedule.warmup", f"{warmup} steps", cfg.note("warmup_iters"))
        decay_iters = cfg.count("lr_decay_iters")
        if decay_iters != max_iters:
            d.set(
                "schedule.decay", f"{max(decay_iters - warmup, 1)} steps", "lr_decay_iters - warmup_iters; min_lr after"
            )
        d.set("schedule.min_lr_ratio", round(float(cfg["min_lr"]) / lr, 6) if lr else 0.0, "min_lr / learning_rate")
    else:
        d.set("schedule.kind", "constant", "decay_lr = False")
        d.set("schedule.warmup", "0 steps", "decay_lr = False: no warmup either")


def _precision(d: Draft, cfg: NanoConfig) -> None:
    """precision.compute by `dtype`; float16 with train.py's GradScaler."""
    dtype = str(cfg["dtype"])
    if dtype == "float16":
        d.set("precision.compute", "fp16", cfg.note("dtype"))
        d.set("precision.loss_scaling", "dynamic", "torch.cuda.amp.GradScaler for float16 (train.py)")
    elif dtype == "float32":
        d.set("precision.compute", "fp32", cfg.note("dtype"))
    else:
        d.set("precision.compute", "bf16", cfg.note("dtype"))


def _cadence(d: Draft, cfg: NanoConfig) -> None:
    """checkpoint.* (ckpt.pt saved at each eval, overwritten) and monitor.*."""
    d.set("checkpoint.every", f"{int(cfg['eval_interval'])} steps", "saved at each eval (eval_interval)")
    d.set("checkpoint.keep", 1, "ckpt.pt is overwritten")
    d.set("monitor.eval_every", f"{int(cfg['eval_interval'])} steps", cfg.note("eval_interval"))
    d.set("monitor.log_every", f"{int(cfg['log_interval'])} steps", cfg.note("log_interval"))


# ----------------------------------------------------------------------------------------- the steps


def import_nanogpt(path: Path, text: str) -> Draft:
    """Read and validate (the assignments, a pre-training run on a BPE dataset, the launch and the batch),
    map the hardware, the model, the tokenizer and the data, then the training; train.py's default for
    every name the file does not assign."""
    file = str(path)
    cfg, skipped = _read_config(text, file)
    dataset = _pretraining_dataset(cfg)
    launch = _launch(text)
    batch = _batch_sizes(cfg, launch.world)
    max_iters = cfg.count("max_iters")
    run_tokens = max_iters * batch.step_tokens
    description = f"nanoGPT {path.name}: {max_iters:,} steps of {batch.step_tokens:,} tokens on {dataset}"
    d = _named_draft(path, cfg, skipped, description)
    _hardware(d, cfg, launch)
    _model(d, cfg, batch.block)
    _tokenizer(d)
    source = _data(d, dataset)
    _batch(d, cfg, batch, launch.world)
    lr = _optimizer(d, cfg)
    _schedule(d, cfg, lr, max_iters)
    _precision(d, cfg)
    d.set("tokens", run_tokens, f"max_iters {max_iters:,} * {batch.step_tokens:,}")
    _cadence(d, cfg)
    fill_defaults(d, run_tokens, source)
    return d
