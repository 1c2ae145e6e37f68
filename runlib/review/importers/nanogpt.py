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


def import_nanogpt(path: Path, text: str) -> Draft:
    file = str(path)
    names, skipped = read_assignments(text, file)
    check_source_values(names, file)
    if not names:
        raise UnmappableConfig(f"{file}: no `name = value` assignments found; is this a nanoGPT config file?")
    cfg = {**TRAIN_DEFAULTS, **names}

    def note(key: str) -> str:
        return f"{key} [CFG]" if key in names else f"{key}, train.py default"

    init_from = str(cfg["init_from"])
    if init_from != "scratch":
        raise UnmappableConfig(
            f"{file}: init_from = {init_from!r} continues from an existing model (a fine-tune or resume); a run "
            "spec describes pre-training from scratch: set init_from = 'scratch' or import the base run's config"
        )
    dataset = str(cfg["dataset"])
    if dataset.endswith("_char"):
        raise UnmappableConfig(
            f"{file}: dataset = {dataset!r} uses nanoGPT's character-level vocabulary (meta.pkl); runlib trains "
            "byte-level BPE tokenizers only: use a BPE dataset (openwebtext, shakespeare)"
        )
    world = 1
    match = _NPROC.search(text)
    if match:
        world = int(match.group(1)) * (int(_NNODES.search(text).group(1)) if _NNODES.search(text) else 1)
    per_node = int(match.group(1)) if match else 1
    nodes = world // per_node
    gas_global = whole(cfg["gradient_accumulation_steps"], file, "gradient_accumulation_steps")
    if gas_global % world:
        raise UnmappableConfig(
            f"{file}: gradient_accumulation_steps = {gas_global} is not divisible by the {world} DDP processes "
            "(train.py asserts it): fix the config or the launch command"
        )
    micro, block = whole(cfg["batch_size"], file, "batch_size"), whole(cfg["block_size"], file, "block_size")
    grad_accum = gas_global // world
    step_tokens = micro * block * gas_global
    max_iters = whole(cfg["max_iters"], file, "max_iters")

    d = Draft()
    d.header = [
        f"Imported by `runlib import` from {path.name} (nanoGPT config; read with ast, not executed).",
        "Values without [CFG] are train.py's defaults; `assumed:` marks what nanoGPT does not say.",
    ] + [f"Skipped: {s}" for s in skipped]
    d.set("name", spec_name(str(names.get("wandb_run_name", path.stem))))
    d.set("description", f"nanoGPT {path.name}: {max_iters:,} steps of {step_tokens:,} tokens on {dataset}")
    d.set("seed", 1337, "torch.manual_seed(1337 + seed_offset), train.py")
    if str(cfg["device"]).startswith("cpu"):
        d.set("hardware.accelerator", "cpu", note("device"))
    else:
        d.assume("hardware.accelerator", "a100-40gb", "nanoGPT's reference runs use 8x A100 40GB (README)")
    if match:
        d.set(
            "hardware.nodes",
            nodes,
            "torchrun --nnodes in the config's launch comment"
            if _NNODES.search(text)
            else "one node (torchrun --standalone)",
        )
        d.set("hardware.devices_per_node", per_node, "torchrun --nproc_per_node in the config's launch comment")
    else:
        d.assume("hardware.nodes", 1, "no torchrun launch line in the config: a single process")
        d.assume("hardware.devices_per_node", 1, "no torchrun launch line in the config: a single process")

    n_embd = whole(cfg["n_embd"], file, "n_embd")
    d.set("model.layers", whole(cfg["n_layer"], file, "n_layer"), note("n_layer"))
    d.set("model.d_model", n_embd, note("n_embd"))
    d.set("model.heads", whole(cfg["n_head"], file, "n_head"), note("n_head"))
    d.set("model.d_ff", 4 * n_embd, "4 * n_embd (model.py MLP)")
    d.set("model.activation", "gelu", "nn.GELU (model.py)")
    d.set("model.norm", "layernorm", "LayerNorm (model.py)")
    d.set("model.bias", bool(cfg["bias"]), note("bias"))
    d.set("model.position", "learned", "wpe, block_size rows (model.py)")
    d.set("model.tie_embeddings", True, "wte.weight = lm_head.weight (model.py)")
    d.set(
        "model.vocab_size",
        whole(names.get("vocab_size", GPT2_PADDED_VOCAB), file, "vocab_size"),
        "GPT-2's 50257 padded to 50304 (train.py)",
    )
    d.set("model.seq_len", block, note("block_size"))

    d.set("tokenizer.pretrained", "tokenizers/gpt2/tokenizer.json", "GPT-2 BPE (tiktoken 'gpt2', prepare.py)")
    d.set("tokenizer.vocab_size", 50256, "50,257 ids less <|endoftext|>")
    d.set("tokenizer.reserved_tokens", 1, "<|endoftext|> after each document (prepare.py)")
    d.set("tokenizer.digits", "none", "GPT-2's pre-tokenizer keeps digit runs whole")

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
    d.set("parallelism.sharding", "none", "DDP")
    d.set("batch.micro_batch", micro, note("batch_size"))
    d.set("batch.grad_accum", grad_accum, f"gradient_accumulation_steps {gas_global} / {world} processes")
    d.set("batch.global_batch", f"{step_tokens} tokens", "batch_size * block_size * gradient_accumulation_steps")

    lr = float(cfg["learning_rate"])
    d.set("optimizer.kind", "adamw", "torch.optim.AdamW (model.py configure_optimizers)")
    d.set("optimizer.lr", lr, note("learning_rate"))
    d.set("optimizer.betas", [float(cfg["beta1"]), float(cfg["beta2"])], "beta1, beta2")
    d.set("optimizer.eps", 1e-8, "AdamW default")
    d.set("optimizer.weight_decay", float(cfg["weight_decay"]), note("weight_decay"))
    d.set(
        "optimizer.grad_clip",
        float(cfg["grad_clip"]),
        note("grad_clip") + ("; 0 disables clipping" if not cfg["grad_clip"] else ""),
    )

    warmup = whole(cfg["warmup_iters"], file, "warmup_iters")
    if cfg["decay_lr"]:
        d.set("schedule.kind", "cosine", "get_lr: linear warmup, then cosine (train.py)")
        d.set("schedule.warmup", f"{warmup} steps", note("warmup_iters"))
        decay_iters = whole(cfg["lr_decay_iters"], file, "lr_decay_iters")
        if decay_iters != max_iters:
            d.set(
                "schedule.decay", f"{max(decay_iters - warmup, 1)} steps", "lr_decay_iters - warmup_iters; min_lr after"
            )
        d.set("schedule.min_lr_ratio", round(float(cfg["min_lr"]) / lr, 6) if lr else 0.0, "min_lr / learning_rate")
    else:
        d.set("schedule.kind", "constant", "decay_lr = False")
        d.set("schedule.warmup", "0 steps", "decay_lr = False: no warmup either")
    dtype = str(cfg["dtype"])
    if dtype == "float16":
        d.set("precision.compute", "fp16", note("dtype"))
        d.set("precision.loss_scaling", "dynamic", "torch.cuda.amp.GradScaler for float16 (train.py)")
    elif dtype == "float32":
        d.set("precision.compute", "fp32", note("dtype"))
    else:
        d.set("precision.compute", "bf16", note("dtype"))
    d.set("tokens", max_iters * step_tokens, f"max_iters {max_iters:,} * {step_tokens:,}")
    d.set("checkpoint.every", f"{int(cfg['eval_interval'])} steps", "saved at each eval (eval_interval)")
    d.set("checkpoint.keep", 1, "ckpt.pt is overwritten")
    d.set("monitor.eval_every", f"{int(cfg['eval_interval'])} steps", note("eval_interval"))
    d.set("monitor.log_every", f"{int(cfg['log_interval'])} steps", note("log_interval"))
    fill_defaults(d, max_iters * step_tokens, source)
    return d
