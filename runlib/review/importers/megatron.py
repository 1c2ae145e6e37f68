"""Megatron-LM: a pretrain_gpt.py argument list (a launch script or a file of flags).

A launch script's training command is resolved as bash would resolve it, without running it
(runlib.review.importers.shell: its variables, ${VAR:-default}, arrays, arithmetic and if-branches); a
file of flags is split with shlex. Every flag the mapping does not read is listed in the spec's header.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from runlib.review.importers.common import check_source_values, fill_defaults, spec_name
from runlib.review.importers.draft import Draft, HardwareChoice, UnmappableConfig
from runlib.review.importers.shell import training_command

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


LAUNCH_ONLY = ("--master-addr", "--master-port", "--node-rank", "--rdzv")
"""torchrun's rendezvous flags: where the processes meet, nothing of the run."""

MAX_COMMAND_CHARS = 16 * 1024
"""One command, continuation lines joined: GPT-3 175B's argument list (the fixture) is ~1.5 KB. shlex.split
of a 900 KB word took over a minute; 16 KiB takes milliseconds."""


def parse_words(words: list[str], file: str) -> dict[str, list[str]]:
    """--flag -> its values ([] for a switch), from one command's words (torchrun's flags among them)."""
    out: dict[str, list[str]] = {}
    flag = None
    for word in words:
        if word.startswith("--"):
            if any(c.isspace() for c in word):
                raise UnmappableConfig(
                    f"{file}: {word!r} reaches the program as one argument (a quoted array element expanded "
                    'in quotes, "${A[@]}"), which Megatron-LM would refuse: expand the array unquoted or split the '
                    "element"
                )
            name, eq, value = word.partition("=")
            flag = name.replace("_", "-")
            out[flag] = [value] if eq else []
            if flag in SWITCHES or eq:
                flag = None
        elif flag is not None:
            out[flag].append(word)
    return out


def parse_args(text: str, file: str) -> dict[str, list[str]]:
    """--flag -> its values ([] for a switch): of the script's training command, resolved as bash would, or
    over every command in a file of flags (torchrun's too)."""
    command = training_command(text, file)
    if command is not None:
        return parse_words(command, file)
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
        out.update(parse_words(words, file))
    return out


Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class Arguments:
    """One file's argument list (parse_args), read flag by flag; a value missing or not a number is the
    file's fault (UnmappableConfig naming the flag)."""

    flags: dict[str, list[str]]
    file: str
    read: set[str] = field(default_factory=set)
    """The flags the mapping looked at: the others are listed in the header as not imported."""

    def __contains__(self, flag: str) -> bool:
        self.read.add(flag)
        return flag in self.flags

    def words(self, flag: str) -> list[str]:
        self.read.add(flag)
        return self.flags[flag]

    def word(self, flag: str, default: str) -> str:
        """The flag's first value; `default` when it is not given or has no value."""
        self.read.add(flag)
        return (self.flags.get(flag) or [default])[0]

    def unread(self) -> list[str]:
        """The given flags the mapping never read, each with its values."""
        return [" ".join([f, *v]) for f, v in self.flags.items() if f not in self.read]

    def count(self, flag: str, default: int | None = None) -> int:
        return self._number(flag, default, int)

    def rate(self, flag: str, default: float | None = None) -> float:
        return self._number(flag, default, float)

    def _number(self, flag: str, default: Number | None, kind: Callable[[str], Number]) -> Number:
        self.read.add(flag)
        values = self.flags.get(flag)
        if not values:
            if default is None:
                raise UnmappableConfig(f"{self.file}: {flag} is required for this mapping; add it to the argument list")
            return default
        try:
            value = kind(values[0])
        except ValueError:
            raise UnmappableConfig(f"{self.file}: {flag} {values[0][:40]!r} is not a number") from None
        check_source_values(value, self.file, flag)
        return value


@dataclass(frozen=True)
class ModelParallel:
    """--tensor-model-parallel-size, --pipeline-model-parallel-size, --context-parallel-size."""

    tensor: int
    pipeline: int
    context: int

    @property
    def size(self) -> int:
        return self.tensor * self.pipeline * self.context


# ------------------------------------------------------------------------ read and validate the file


def _gpt_arguments(text: str, file: str) -> Arguments:
    """The arguments of a dense GPT (pretrain_gpt.py): --num-layers and --hidden-size given, no MoE or MLA."""
    a = Arguments(parse_args(text, file), file)
    if "--num-layers" not in a or "--hidden-size" not in a:
        raise UnmappableConfig(
            f"{file}: no --num-layers/--hidden-size: is this a Megatron-LM pretrain_gpt.py argument list?"
        )
    for flag, what in UNMAPPABLE.items():
        if flag in a:
            raise UnmappableConfig(f"{file}: {flag}: {what} have no runlib model (dense decoders only)")
    return a


def _model_parallel(a: Arguments) -> ModelParallel:
    tp, pp = a.count("--tensor-model-parallel-size", 1), a.count("--pipeline-model-parallel-size", 1)
    return ModelParallel(tp, pp, a.count("--context-parallel-size", 1))


def _torchrun(a: Arguments) -> tuple[int, int]:
    """(--nproc_per_node, --nnodes) of the torchrun line; (0, 0) without one."""
    per_node = a.count("--nproc-per-node", 0)
    return per_node, a.count("--nnodes", 1) if per_node else 0


def _named_draft(path: Path, a: Arguments) -> Draft:
    """The draft with its header, name, description and seed."""
    d = Draft()
    d.header = [
        f"Imported by `runlib import` from {path.name} (Megatron-LM pretrain_gpt.py arguments).",
        "Flags not given take Megatron-LM's defaults; `assumed:` marks what Megatron does not say.",
    ]
    d.set("name", spec_name(path.stem))
    d.set("description", f"Megatron-LM arguments {path.name}")
    d.set("seed", a.count("--seed", 1234), "--seed (Megatron default 1234)")
    return d


# ----------------------------------------------------------------------------------- map the model


def _hardware(d: Draft, a: Arguments, mp: ModelParallel, per_node: int, nnodes: int) -> int:
    """hardware.*: the torchrun world, or one data-parallel replica without a torchrun line; the data
    parallelism that follows."""
    if "--fp8-format" in a:
        d.set("hardware.accelerator", "h100-sxm", "assumed: H100 SXM, the first with fp8 (--fp8-format)")
    else:
        d.set(
            "hardware.accelerator",
            "a100-80gb",
            "assumed: A100 80GB, as Megatron-LM's published runs (Narayanan et al. 2021, arXiv 2104.04473)",
        )
    chosen = d.chosen_hardware(per_node or 8)
    if chosen is not None:
        world = chosen
    elif per_node:
        d.set("hardware.nodes", nnodes, "torchrun --nnodes")
        d.set("hardware.devices_per_node", per_node, "torchrun --nproc_per_node")
        world = per_node * nnodes
    else:
        world = mp.size
        d.set("hardware.nodes", max(1, world // 8), "assumed: no torchrun line: one data-parallel replica")
        d.set("hardware.devices_per_node", min(world, 8), "assumed: 8-GPU nodes")
    if world % mp.size:
        raise UnmappableConfig(
            f"{a.file}: tensor {mp.tensor} x pipeline {mp.pipeline} x context {mp.context} does not divide the "
            f"{world} GPUs; give the world it runs on: runlib import --devices N (or --nodes N)"
        )
    return world // mp.size


def _model(d: Draft, a: Arguments) -> int:
    """model.* but the vocabulary and the context; returns --seq-length."""
    hidden, heads, layers = a.count("--hidden-size"), a.count("--num-attention-heads"), a.count("--num-layers")
    seq = a.count("--seq-length")
    swiglu = "--swiglu" in a
    d.set("model.layers", layers, "--num-layers")
    d.set("model.d_model", hidden, "--hidden-size")
    d.set("model.heads", heads, "--num-attention-heads")
    if "--group-query-attention" in a:
        d.set("model.kv_heads", a.count("--num-query-groups"), "--num-query-groups")
    if "--kv-channels" in a and a.count("--kv-channels") != hidden // heads:
        d.set("model.head_dim", a.count("--kv-channels"), "--kv-channels")
    default_ffn = int(4 * hidden * 2 / 3) if swiglu else 4 * hidden
    d.set(
        "model.d_ff",
        a.count("--ffn-hidden-size", default_ffn),
        "--ffn-hidden-size" if "--ffn-hidden-size" in a else "4 * hidden (Megatron default)",
    )
    if "--squared-relu" in a:  # Nemotron-4 (megatron/training/arguments.py: squared_relu)
        d.set("model.activation", "relu2", "--squared-relu")
    else:
        d.set("model.activation", "swiglu" if swiglu else "gelu", "--swiglu" if swiglu else "GELU (Megatron default)")
    norm = a.word("--normalization", "LayerNorm")
    if norm != "RMSNorm" and "--apply-layernorm-1p" in a:
        d.set("model.norm", "layernorm1p", f"--normalization {norm} --apply-layernorm-1p")
        d.set("model.norm_bias", True, "Megatron's LayerNorm keeps its bias under --disable-bias-linear")
    else:
        d.set("model.norm", "rmsnorm" if norm == "RMSNorm" else "layernorm", f"--normalization {norm}")
    d.set(
        "model.bias",
        "--disable-bias-linear" not in a,
        "--disable-bias-linear" if "--disable-bias-linear" in a else "biased linears (Megatron default)",
    )
    _position(d, a, seq)
    if "--qk-layernorm" in a:
        d.set("model.qk_norm", True, "--qk-layernorm")
    d.set(
        "model.tie_embeddings",
        "--untie-embeddings-and-output-weights" not in a,
        "shared embedding and output weights (Megatron default)",
    )
    return seq


def _position(d: Draft, a: Arguments, seq: int) -> None:
    """RoPE (--rotary-base) or a learned table of --max-position-embeddings rows, which must be seq's."""
    pos = a.word("--position-embedding-type", "learned_absolute")
    if "--use-rotary-position-embeddings" in a:
        pos = "rope"
    if pos not in ("learned_absolute", "rope"):
        raise UnmappableConfig(f"{a.file}: --position-embedding-type {pos}: runlib has rope and learned positions")
    d.set("model.position", "rope" if pos == "rope" else "learned", f"--position-embedding-type {pos}")
    if pos == "rope":
        d.set("model.rope_theta", float(a.count("--rotary-base", 10000)), "--rotary-base")
        if "--rotary-percent" in a and a.rate("--rotary-percent") < 1:  # Nemotron-4: 0.5
            d.set("model.rope_fraction", a.rate("--rotary-percent"), "--rotary-percent")
    else:
        max_pos = a.count("--max-position-embeddings", seq)
        if max_pos != seq:
            raise UnmappableConfig(
                f"{a.file}: --max-position-embeddings {max_pos} differs from --seq-length {seq}: a spec's learned table has seq_len rows"
            )


def _vocabulary(d: Draft, a: Arguments, tp: int, seq: int) -> None:
    """model.vocab_size (the tokenizer's, padded: _vocab_size_with_padding), model.seq_len, tokenizer.*."""
    tokenizer = a.word("--tokenizer-type", "GPT2BPETokenizer")
    if tokenizer == "GPT2BPETokenizer":
        base_vocab = GPT2_VOCAB
    elif "--vocab-size" in a:
        base_vocab = a.count("--vocab-size")
    else:
        raise UnmappableConfig(
            f"{a.file}: --tokenizer-type {tokenizer}: its vocabulary size is not in the arguments; add --vocab-size"
        )
    multiple = a.count("--make-vocab-size-divisible-by", 128) * tp
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


# --------------------------------------------------------------------------------- map the training


def _parallelism(d: Draft, a: Arguments, mp: ModelParallel) -> None:
    """parallelism.*: the model-parallel sizes, the distributed optimizer, the recomputation."""
    d.set("parallelism.tensor", mp.tensor, "--tensor-model-parallel-size")
    d.set("parallelism.pipeline", mp.pipeline, "--pipeline-model-parallel-size")
    if mp.context > 1:
        d.set("parallelism.context", mp.context, "--context-parallel-size")
    d.set(
        "parallelism.sharding",
        "zero1" if "--use-distributed-optimizer" in a else "none",
        "--use-distributed-optimizer"
        if "--use-distributed-optimizer" in a
        else "replicated optimizer (Megatron default)",
    )
    granularity = a.word("--recompute-granularity", "")
    if "--recompute-activations" in a:
        granularity = "selective"
    d.set(
        "parallelism.activation_checkpointing",
        granularity or "none",
        "--recompute-granularity" if granularity else "no recomputation (default)",
    )


def _batch(d: Draft, a: Arguments, dp: int, seq: int) -> int:
    """batch.*, the ramp included; returns the global batch in sequences."""
    micro = a.count("--micro-batch-size")
    global_seqs = a.count("--global-batch-size", micro * dp)
    if global_seqs % (micro * dp):
        raise UnmappableConfig(
            f"{a.file}: --global-batch-size {global_seqs} is not a multiple of micro-batch {micro} x dp {dp}"
        )
    d.set("batch.micro_batch", micro, "--micro-batch-size")
    d.set(
        "batch.grad_accum",
        global_seqs // (micro * dp),
        f"--global-batch-size {global_seqs} / (micro {micro} x dp {dp})",
    )
    d.set("batch.global_batch", f"{global_seqs} sequences", "--global-batch-size")
    if "--rampup-batch-size" in a:
        d.set("batch.ramp", *_ramp(a, global_seqs, seq))
    return global_seqs


def _ramp(a: Arguments, global_seqs: int, seq: int) -> tuple[list[dict[str, str]], str]:
    """--rampup-batch-size start increment samples: a stage per increment, each after its share of the
    samples (megatron/core/num_microbatches_calculator.py); the stages and their comment."""
    start, inc, samples = (int(x) for x in a.words("--rampup-batch-size")[:3])
    increments = (global_seqs - start) // inc
    if increments < 1 or increments > 255:
        raise UnmappableConfig(
            f"{a.file}: --rampup-batch-size {start} {inc} {samples}: {increments} increments; a spec ramp has 1-255"
        )
    per = samples / increments
    stages = [
        {"after": f"{math.ceil(k * per) * seq} tokens", "global_batch": f"{start + k * inc} sequences"}
        for k in range(increments + 1)
    ]
    return stages, f"--rampup-batch-size {start} {inc} {samples}: +{inc} sequences every {per:,.0f} samples"


def _run_tokens(d: Draft, a: Arguments, global_seqs: int, seq: int) -> int:
    """tokens: --train-samples x seq, or --train-iters x the global batch (no ramp) x seq."""
    if "--train-samples" in a:
        run_tokens = a.count("--train-samples") * seq
        where = f"--train-samples x {seq}"
    elif "--train-iters" in a:
        run_tokens = a.count("--train-iters") * global_seqs * seq
        where = "--train-iters x global batch x seq"
        if "--rampup-batch-size" in a:
            # NVIDIA's own examples/gpt3/train_gpt3_175b_distributed.sh sets both: the run is still readable
            where = (
                "assumed: --train-iters x the full global batch x seq, as samples: Megatron-LM refuses "
                "--train-iters with --rampup-batch-size (validate_args in megatron/training/arguments.py: "
                "'expected no batch-size rampup for iteration-based training'); give --train-samples to run it there"
            )
    else:
        raise UnmappableConfig(f"{a.file}: neither --train-samples nor --train-iters: the run has no length")
    d.set("tokens", run_tokens, where)
    return run_tokens


def _optimizer(d: Draft, a: Arguments) -> float:
    """optimizer.*: Adam with decoupled weight decay, Megatron's defaults where a flag is missing; the LR."""
    d.set("optimizer.kind", "adamw", "Adam with decoupled weight decay (Megatron's default optimizer)")
    lr = a.rate("--lr")
    d.set("optimizer.lr", lr, "--lr")
    d.set(
        "optimizer.betas",
        [a.rate("--adam-beta1", 0.9), a.rate("--adam-beta2", 0.999)],
        "--adam-beta1, --adam-beta2",
    )
    d.set("optimizer.eps", a.rate("--adam-eps", 1e-8), "--adam-eps")
    d.set("optimizer.weight_decay", a.rate("--weight-decay", 0.01), "--weight-decay")
    d.set("optimizer.grad_clip", a.rate("--clip-grad", 1.0), "--clip-grad")
    return lr


DECAY_STYLES = {"cosine": "cosine", "linear": "linear", "constant": "constant", "WSD": "wsd"}
"""--lr-decay-style -> runlib's schedule.kind."""


def _duration(a: Arguments, unit: str, global_seqs: int, seq: int) -> tuple[int | None, str]:
    """A duration flag in tokens: --X-samples (x seq) or --X-iters (x global batch x seq)."""
    if f"--{unit}-samples" in a:
        return a.count(f"--{unit}-samples") * seq, f"--{unit}-samples x {seq}"
    if f"--{unit}-iters" in a:
        return a.count(f"--{unit}-iters") * global_seqs * seq, f"--{unit}-iters"
    return None, ""


def _schedule(d: Draft, a: Arguments, lr: float, run_tokens: int, global_seqs: int, seq: int) -> None:
    """schedule.*: the decay style, the warmup, the decay (WSD's, or one that ends before the run) and the floor."""
    style = a.word("--lr-decay-style", "linear")
    if style not in DECAY_STYLES:
        raise UnmappableConfig(f"{a.file}: --lr-decay-style {style}: runlib has {', '.join(DECAY_STYLES)}")
    d.set("schedule.kind", DECAY_STYLES[style], "--lr-decay-style")
    warmup, where_w = _duration(a, "lr-warmup", global_seqs, seq)
    if warmup is None and "--lr-warmup-fraction" in a:
        warmup, where_w = int(a.rate("--lr-warmup-fraction") * run_tokens), "--lr-warmup-fraction"
    d.set("schedule.warmup", f"{warmup or 0} tokens", where_w or "no warmup (default)")
    decay, where_d = _duration(a, "lr-decay", global_seqs, seq)
    if style == "WSD":
        wsd, where_d = _duration(a, "lr-wsd-decay", global_seqs, seq)
        if wsd:
            d.set("schedule.decay", f"{wsd} tokens", where_d)
    elif decay is not None and decay != run_tokens:
        d.set(
            "schedule.decay",
            f"{decay - (warmup or 0)} tokens",
            f"{where_d} less the warmup; the LR stays at --min-lr after",
        )
    d.set("schedule.min_lr_ratio", round(a.rate("--min-lr", 0.0) / lr, 6) if lr else 0.0, "--min-lr / --lr")


def _precision(d: Draft, a: Arguments) -> None:
    """precision.*: --fp16 (with dynamic or --loss-scale static scaling), --bf16 (fp8 with --fp8-format), or
    fp32."""
    if "--fp16" in a:
        d.set("precision.compute", "fp16", "--fp16")
        d.set(
            "precision.loss_scaling",
            "static" if "--loss-scale" in a else "dynamic",
            "--loss-scale" if "--loss-scale" in a else "dynamic loss scaling (Megatron default with --fp16)",
        )
        if "--loss-scale" in a:
            d.set("precision.loss_scale", a.rate("--loss-scale"), "--loss-scale")
    elif "--bf16" in a and "--fp8-format" in a:
        d.set(
            "precision.compute",
            "fp8",
            f"--fp8-format {a.word('--fp8-format', 'hybrid')} over --bf16 (Transformer Engine)",
        )
    elif "--bf16" in a:
        d.set("precision.compute", "bf16", "--bf16")
    else:
        d.set("precision.compute", "fp32", "neither --fp16 nor --bf16")
    if "--grad-reduce-in-bf16" in a:
        d.set("precision.grads", "bf16", "--grad-reduce-in-bf16 (the gradient buffer in bf16)")


def _cadence(d: Draft, a: Arguments) -> None:
    """checkpoint.every, monitor.eval_every and monitor.log_every, in steps, where the flags give them."""
    if "--save-interval" in a:
        d.set("checkpoint.every", f"{a.count('--save-interval')} steps", "--save-interval")
    if "--eval-interval" in a:
        d.set("monitor.eval_every", f"{a.count('--eval-interval')} steps", "--eval-interval")
    if "--log-interval" in a:
        d.set("monitor.log_every", f"{a.count('--log-interval')} steps", "--log-interval")


def _data(d: Draft, a: Arguments) -> None:
    """data.*: GPTDataset's packing (documents concatenated with EOD), the EOD targets, the loss's mean."""
    d.set("data.packing", "stream", "Megatron's GPTDataset concatenates documents with EOD")
    d.set(
        "data.boundary_targets",
        "kept",
        "no EOD masking (--eod-mask-loss off)" if "--eod-mask-loss" not in a else "--eod-mask-loss",
    )
    if "--eod-mask-loss" in a:
        d.set("data.boundary_targets", "masked", "--eod-mask-loss")
    d.set("data.loss_normalization", "global_tokens", "loss averaged over the global batch's tokens")


# ----------------------------------------------------------------------------------------- the steps


def import_megatron(path: Path, text: str, hardware: HardwareChoice | None = None) -> Draft:
    """Read and validate (a dense GPT's arguments), map the hardware and the model, then the training, each
    flag that is not given at Megatron-LM's default."""
    file = str(path)
    a = _gpt_arguments(text, file)
    mp = _model_parallel(a)
    per_node, nnodes = _torchrun(a)
    d = _named_draft(path, a)
    d.choice = hardware or HardwareChoice()
    dp = _hardware(d, a, mp, per_node, nnodes)
    seq = _model(d, a)
    _vocabulary(d, a, mp.tensor, seq)
    _parallelism(d, a, mp)
    global_seqs = _batch(d, a, dp, seq)
    run_tokens = _run_tokens(d, a, global_seqs, seq)
    lr = _optimizer(d, a)
    _schedule(d, a, lr, run_tokens, global_seqs, seq)
    _precision(d, a)
    _cadence(d, a)
    _data(d, a)
    ignored = [w for w in a.unread() if not w.startswith(LAUNCH_ONLY)]
    if ignored:
        d.header.append(
            "Not imported (no runlib field; they act in Megatron-LM only): " + ", ".join(ignored)[:2000] + "."
        )
    fill_defaults(d, run_tokens, "corpus")
    return d
