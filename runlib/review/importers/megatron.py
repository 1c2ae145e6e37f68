"""Megatron-LM: a pretrain_gpt.py argument list (a shell script or a file of flags), split with shlex.

Flags and defaults are Megatron-LM's (megatron/training/arguments.py): GPT defaults are LayerNorm with
biases, GELU MLP of 4 * hidden (--ffn-hidden-size), learned absolute positions of
--max-position-embeddings rows, embeddings tied to the output layer unless
--untie-embeddings-and-output-weights; --swiglu, --normalization RMSNorm, --disable-bias-linear,
--position-embedding-type rope, --group-query-attention --num-query-groups change them. The vocabulary
is padded to a multiple of --make-vocab-size-divisible-by (128) x tensor parallelism
(megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding). A batch ramp
(--rampup-batch-size start increment samples) grows the global batch by `increment` sequences every
samples / ((global - start) / increment) samples (megatron/core/num_microbatches_calculator.py). The
world size comes from a torchrun line (--nproc_per_node x --nnodes) when present.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

from runlib.review.importers.common import check_source_values, fill_defaults, spec_name
from runlib.review.importers.draft import Draft, UnmappableConfig

GPT2_VOCAB = 50257  # GPT2BPETokenizer (--vocab-file gpt2-vocab.json)
UNMAPPABLE = {
    "--num-experts": "mixture-of-experts layers",
    "--multi-latent-attention": "multi-latent attention",
    "--moe-router-topk": "mixture-of-experts layers",
}
SWITCHES = {
    "--fp16",
    "--bf16",
    "--swiglu",
    "--disable-bias-linear",
    "--untie-embeddings-and-output-weights",
    "--group-query-attention",
    "--use-distributed-optimizer",
    "--sequence-parallel",
    "--recompute-activations",
    "--use-flash-attn",
    "--standalone",
    "--multi-latent-attention",
    "--no-position-embedding",
    "--use-rotary-position-embeddings",
    "--qk-layernorm",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
}


MAX_COMMAND_CHARS = 16 * 1024
"""One command, continuation lines joined: GPT-3 175B's argument list (the fixture) is ~1.5 KB. shlex.split
of a 900 KB word took over a minute; 16 KiB takes milliseconds."""


def parse_args(text: str, file: str) -> dict[str, list[str]]:
    """--flag -> its values ([] for a switch), over every command in the file (torchrun's too)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out: dict[str, list[str]] = {}
    for number, line in enumerate(joined.splitlines(), 1):
        if len(line) > MAX_COMMAND_CHARS:  # shlex grows a word by string concatenation: quadratic in its length
            raise UnmappableConfig(
                f"{file}: command {number} (continuation lines joined) is over {MAX_COMMAND_CHARS:,} characters; "
                "a Megatron-LM argument list is a few KB: is this the right file?"
            )
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise UnmappableConfig(f"{file}: cannot split the arguments ({exc})") from None
        flag = None
        for word in words:
            if word.startswith("--"):
                name, eq, value = word.partition("=")
                flag = name.replace("_", "-")
                out[flag] = [value] if eq else []
                if flag in SWITCHES or eq:
                    flag = None
            elif flag is not None:
                out[flag].append(word)
    return out


def import_megatron(path: Path, text: str) -> Draft:
    file = str(path)
    a = parse_args(text, file)
    if "--num-layers" not in a or "--hidden-size" not in a:
        raise UnmappableConfig(
            f"{file}: no --num-layers/--hidden-size: is this a Megatron-LM pretrain_gpt.py argument list?"
        )
    for flag, what in UNMAPPABLE.items():
        if flag in a:
            raise UnmappableConfig(f"{file}: {flag}: {what} have no runlib model (dense decoders only)")

    def num(flag: str, default: Any = None, kind=int) -> Any:
        if flag not in a or not a[flag]:
            if default is None:
                raise UnmappableConfig(f"{file}: {flag} is required for this mapping; add it to the argument list")
            return default
        try:
            value = kind(a[flag][0])
        except ValueError:
            raise UnmappableConfig(f"{file}: {flag} {a[flag][0][:40]!r} is not a number") from None
        check_source_values(value, file, flag)
        return value

    tp, pp = num("--tensor-model-parallel-size", 1), num("--pipeline-model-parallel-size", 1)
    cp = num("--context-parallel-size", 1)
    per_node = num("--nproc-per-node", 0)
    nnodes = num("--nnodes", 1) if per_node else 0
    d = Draft()
    d.header = [
        f"Imported by `runlib import` from {path.name} (Megatron-LM pretrain_gpt.py arguments).",
        "Flags not given take Megatron-LM's defaults; `assumed:` marks what Megatron does not say.",
    ]
    d.set("name", spec_name(path.stem))
    d.set("description", f"Megatron-LM arguments {path.name}")
    d.set("seed", num("--seed", 1234), "--seed (Megatron default 1234)")
    d.set(
        "hardware.accelerator",
        "a100-80gb",
        "assumed: A100 80GB, as Megatron-LM's published runs (Narayanan et al. 2021, arXiv 2104.04473)",
    )
    if per_node:
        d.set("hardware.nodes", nnodes, "torchrun --nnodes")
        d.set("hardware.devices_per_node", per_node, "torchrun --nproc_per_node")
        world = per_node * nnodes
    else:
        world = tp * pp * cp
        d.set("hardware.nodes", max(1, world // 8), "assumed: no torchrun line: one data-parallel replica")
        d.set("hardware.devices_per_node", min(world, 8), "assumed: 8-GPU nodes")
    if world % (tp * pp * cp):
        raise UnmappableConfig(f"{file}: tensor {tp} x pipeline {pp} x context {cp} does not divide the {world} GPUs")
    dp = world // (tp * pp * cp)

    hidden, heads, layers = num("--hidden-size"), num("--num-attention-heads"), num("--num-layers")
    seq = num("--seq-length")
    swiglu = "--swiglu" in a
    d.set("model.layers", layers, "--num-layers")
    d.set("model.d_model", hidden, "--hidden-size")
    d.set("model.heads", heads, "--num-attention-heads")
    if "--group-query-attention" in a:
        d.set("model.kv_heads", num("--num-query-groups"), "--num-query-groups")
    if "--kv-channels" in a and num("--kv-channels") != hidden // heads:
        d.set("model.head_dim", num("--kv-channels"), "--kv-channels")
    default_ffn = int(4 * hidden * 2 / 3) if swiglu else 4 * hidden
    d.set(
        "model.d_ff",
        num("--ffn-hidden-size", default_ffn),
        "--ffn-hidden-size" if "--ffn-hidden-size" in a else "4 * hidden (Megatron default)",
    )
    d.set("model.activation", "swiglu" if swiglu else "gelu", "--swiglu" if swiglu else "GELU (Megatron default)")
    norm = (a.get("--normalization") or ["LayerNorm"])[0]
    d.set("model.norm", "rmsnorm" if norm == "RMSNorm" else "layernorm", f"--normalization {norm}")
    d.set(
        "model.bias",
        "--disable-bias-linear" not in a,
        "--disable-bias-linear" if "--disable-bias-linear" in a else "biased linears (Megatron default)",
    )
    pos = (a.get("--position-embedding-type") or ["learned_absolute"])[0]
    if "--use-rotary-position-embeddings" in a:
        pos = "rope"
    if pos not in ("learned_absolute", "rope"):
        raise UnmappableConfig(f"{file}: --position-embedding-type {pos}: runlib has rope and learned positions")
    d.set("model.position", "rope" if pos == "rope" else "learned", f"--position-embedding-type {pos}")
    if pos == "rope":
        d.set("model.rope_theta", float(num("--rotary-base", 10000)), "--rotary-base")
    else:
        max_pos = num("--max-position-embeddings", seq)
        if max_pos != seq:
            raise UnmappableConfig(
                f"{file}: --max-position-embeddings {max_pos} differs from --seq-length {seq}: a spec's learned table has seq_len rows"
            )
    if "--qk-layernorm" in a:
        d.set("model.qk_norm", True, "--qk-layernorm")
    d.set(
        "model.tie_embeddings",
        "--untie-embeddings-and-output-weights" not in a,
        "shared embedding and output weights (Megatron default)",
    )
    tokenizer = (a.get("--tokenizer-type") or ["GPT2BPETokenizer"])[0]
    if tokenizer == "GPT2BPETokenizer":
        base_vocab = GPT2_VOCAB
    elif "--vocab-size" in a:
        base_vocab = num("--vocab-size")
    else:
        raise UnmappableConfig(
            f"{file}: --tokenizer-type {tokenizer}: its vocabulary size is not in the arguments; add --vocab-size"
        )
    multiple = num("--make-vocab-size-divisible-by", 128) * tp
    padded = math.ceil(base_vocab / multiple) * multiple
    d.set(
        "model.vocab_size",
        padded,
        f"{base_vocab} padded to a multiple of {multiple} (make-vocab-size-divisible-by x tensor)",
    )
    d.set("model.seq_len", seq, "--seq-length")
    d.set(
        "tokenizer.pretrained",
        "tokenizers/gpt2/tokenizer.json" if tokenizer == "GPT2BPETokenizer" else "tokenizers/imported/tokenizer.json",
        f"--tokenizer-type {tokenizer}",
    )
    d.set("tokenizer.vocab_size", base_vocab - 1, "the tokenizer's ids less the end-of-document token")
    d.set("tokenizer.reserved_tokens", 1, "<|endoftext|> (EOD)")
    if tokenizer == "GPT2BPETokenizer":
        d.set("tokenizer.digits", "none", "GPT-2's pre-tokenizer keeps digit runs whole")

    d.set("parallelism.tensor", tp, "--tensor-model-parallel-size")
    d.set("parallelism.pipeline", pp, "--pipeline-model-parallel-size")
    if cp > 1:
        d.set("parallelism.context", cp, "--context-parallel-size")
    d.set(
        "parallelism.sharding",
        "zero1" if "--use-distributed-optimizer" in a else "none",
        "--use-distributed-optimizer"
        if "--use-distributed-optimizer" in a
        else "replicated optimizer (Megatron default)",
    )
    gran = (a.get("--recompute-granularity") or [None])[0]
    if "--recompute-activations" in a:
        gran = "selective"
    d.set(
        "parallelism.activation_checkpointing",
        gran or "none",
        "--recompute-granularity" if gran else "no recomputation (default)",
    )

    micro = num("--micro-batch-size")
    global_seqs = num("--global-batch-size", micro * dp)
    if global_seqs % (micro * dp):
        raise UnmappableConfig(
            f"{file}: --global-batch-size {global_seqs} is not a multiple of micro-batch {micro} x dp {dp}"
        )
    d.set("batch.micro_batch", micro, "--micro-batch-size")
    d.set(
        "batch.grad_accum",
        global_seqs // (micro * dp),
        f"--global-batch-size {global_seqs} / (micro {micro} x dp {dp})",
    )
    d.set("batch.global_batch", f"{global_seqs} sequences", "--global-batch-size")
    if "--rampup-batch-size" in a:
        start, inc, samples = (int(x) for x in a["--rampup-batch-size"][:3])
        increments = (global_seqs - start) // inc
        if increments < 1 or increments > 255:
            raise UnmappableConfig(
                f"{file}: --rampup-batch-size {start} {inc} {samples}: {increments} increments; a spec ramp has 1-255"
            )
        per = samples / increments
        d.set(
            "batch.ramp",
            [
                {"after": f"{math.ceil(k * per) * seq} tokens", "global_batch": f"{start + k * inc} sequences"}
                for k in range(increments + 1)
            ],
            f"--rampup-batch-size {start} {inc} {samples}: +{inc} sequences every {per:,.0f} samples",
        )
    if "--train-samples" in a:
        run_tokens = num("--train-samples") * seq
        where = f"--train-samples x {seq}"
    elif "--train-iters" in a:
        if "--rampup-batch-size" in a:
            raise UnmappableConfig(
                f"{file}: --train-iters with --rampup-batch-size: give --train-samples (Megatron requires it too)"
            )
        run_tokens = num("--train-iters") * global_seqs * seq
        where = "--train-iters x global batch x seq"
    else:
        raise UnmappableConfig(f"{file}: neither --train-samples nor --train-iters: the run has no length")
    d.set("tokens", run_tokens, where)

    d.set("optimizer.kind", "adamw", "Adam with decoupled weight decay (Megatron's default optimizer)")
    lr = num("--lr", kind=float)
    d.set("optimizer.lr", lr, "--lr")
    d.set(
        "optimizer.betas",
        [num("--adam-beta1", 0.9, float), num("--adam-beta2", 0.999, float)],
        "--adam-beta1, --adam-beta2",
    )
    d.set("optimizer.eps", num("--adam-eps", 1e-8, float), "--adam-eps")
    d.set("optimizer.weight_decay", num("--weight-decay", 0.01, float), "--weight-decay")
    d.set("optimizer.grad_clip", num("--clip-grad", 1.0, float), "--clip-grad")
    style = (a.get("--lr-decay-style") or ["linear"])[0]
    kinds = {"cosine": "cosine", "linear": "linear", "constant": "constant", "WSD": "wsd"}
    if style not in kinds:
        raise UnmappableConfig(f"{file}: --lr-decay-style {style}: runlib has {', '.join(kinds)}")
    d.set("schedule.kind", kinds[style], "--lr-decay-style")

    def length(unit: str) -> tuple[int | None, str]:
        """A duration flag in tokens: --X-samples (x seq) or --X-iters (x global batch x seq)."""
        if f"--{unit}-samples" in a:
            return num(f"--{unit}-samples") * seq, f"--{unit}-samples x {seq}"
        if f"--{unit}-iters" in a:
            return num(f"--{unit}-iters") * global_seqs * seq, f"--{unit}-iters"
        return None, ""

    warmup, where_w = length("lr-warmup")
    if warmup is None and "--lr-warmup-fraction" in a:
        warmup, where_w = int(num("--lr-warmup-fraction", kind=float) * run_tokens), "--lr-warmup-fraction"
    d.set("schedule.warmup", f"{warmup or 0} tokens", where_w or "no warmup (default)")
    decay, where_d = length("lr-decay")
    if style == "WSD":
        wsd, where_d = length("lr-wsd-decay")
        if wsd:
            d.set("schedule.decay", f"{wsd} tokens", where_d)
    elif decay is not None and decay != run_tokens:
        d.set(
            "schedule.decay",
            f"{decay - (warmup or 0)} tokens",
            f"{where_d} less the warmup; the LR stays at --min-lr after",
        )
    d.set("schedule.min_lr_ratio", round(num("--min-lr", 0.0, float) / lr, 6) if lr else 0.0, "--min-lr / --lr")
    if "--fp16" in a:
        d.set("precision.compute", "fp16", "--fp16")
        d.set(
            "precision.loss_scaling",
            "static" if "--loss-scale" in a else "dynamic",
            "--loss-scale" if "--loss-scale" in a else "dynamic loss scaling (Megatron default with --fp16)",
        )
        if "--loss-scale" in a:
            d.set("precision.loss_scale", num("--loss-scale", kind=float), "--loss-scale")
    elif "--bf16" in a:
        d.set("precision.compute", "bf16", "--bf16")
    else:
        d.set("precision.compute", "fp32", "neither --fp16 nor --bf16")
    if "--save-interval" in a:
        d.set("checkpoint.every", f"{num('--save-interval')} steps", "--save-interval")
    if "--eval-interval" in a:
        d.set("monitor.eval_every", f"{num('--eval-interval')} steps", "--eval-interval")
    if "--log-interval" in a:
        d.set("monitor.log_every", f"{num('--log-interval')} steps", "--log-interval")
    d.set("data.packing", "stream", "Megatron's GPTDataset concatenates documents with EOD")
    d.set(
        "data.boundary_targets",
        "kept",
        "no EOD masking (--eod-mask-loss off)" if "--eod-mask-loss" not in a else "--eod-mask-loss",
    )
    if "--eod-mask-loss" in a:
        d.set("data.boundary_targets", "masked", "--eod-mask-loss")
    d.set("data.loss_normalization", "global_tokens", "loss averaged over the global batch's tokens")
    fill_defaults(d, run_tokens, "corpus")
    return d
