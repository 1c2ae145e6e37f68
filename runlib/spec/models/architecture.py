"""The model's shape: layers, widths, attention, norms, positions."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from runlib.spec.models.base import (
    MAX_ROPE_THETA,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    MAX_WIDTH,
    KeyedWhenSet,
)
from runlib.spec.models.moe import MlaSpec, MoeSpec, MtpSpec


def _divisors_near(n: int, target: int, count: int = 4) -> str:
    """The divisors of n closest to target, ascending, e.g. 16, 6 -> '2, 4, 8 or 16' (sqrt(n) steps)."""
    divisors: set[int] = set()
    i = 1
    while i * i <= n:
        if n % i == 0:
            divisors.update((i, n // i))
        i += 1
    near = sorted(sorted(divisors, key=lambda d: (abs(d - target), d))[:count])
    words = [str(d) for d in near]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


class ModelSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {
            "norm_bias",
            "parallel_block",
            "parallel_norms",
            "embedding_norm",
            "dropout",
            "qkv_bias",
            "norm_position",
            "attention_scale_dim",
            "attention_softcap",
            "final_softcap",
            "embedding_multiplier",
            "sliding_window",
            "global_every",
            "rope_fraction",
            "nope_every",
            "moe",
            "attention",
            "mtp",
        }
    )

    layers: int = Field(ge=1, le=100_000)
    """Number of transformer blocks."""

    d_model: int = Field(ge=1, le=MAX_WIDTH)
    """Hidden size (residual stream width)."""

    heads: int = Field(ge=1, le=MAX_WIDTH)
    """Attention (query) heads."""

    kv_heads: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """Key/value heads (grouped-query attention): a divisor of heads; omitted or = heads for multi-head attention."""

    @field_validator("kv_heads")
    @classmethod
    def _kv_heads_divide_heads(cls, kv_heads: int | None, info: ValidationInfo) -> int | None:
        # grouped-query attention shares each key/value head among heads / kv_heads query heads
        # (Ainslie et al. 2023, GQA, section 2.2): any other count has no layout, and every parameter,
        # FLOP and memory figure computed from it would describe a model that cannot be built
        heads = info.data.get("heads")  # absent when heads itself was refused: that error is reported
        if kv_heads is None or heads is None or heads % kv_heads == 0:
            return kv_heads
        raise ValueError(
            f"kv_heads: {kv_heads} does not divide heads: {heads} (grouped-query attention shares each "
            f"key/value head among heads / kv_heads query heads); use a divisor of {heads}: "
            f"{_divisors_near(heads, kv_heads)}"
        )

    head_dim: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """Per-head width; default d_model / heads."""

    d_ff: int = Field(ge=1, le=2**24)
    """Hidden size of the MLP."""

    activation: Literal["swiglu", "geglu", "gelu", "relu", "relu2"] = "swiglu"
    """swiglu: gated MLP with three matrices, w2(silu(w1 x) * w3 x) (Shazeer 2020, arXiv 2002.05202); geglu: the same with a tanh-approximated GELU gate, w2(gelu_tanh(w1 x) * w3 x) (the same paper; Gemma, arXiv 2408.00118); gelu, relu (OPT, Zhang et al. 2022) and relu2, squared ReLU (Primer, So et al. 2021, arXiv 2109.08668, section 4): two matrices, w2(act(w1 x))."""

    norm: Literal["rmsnorm", "layernorm", "layernorm1p"] = "rmsnorm"
    """Normalization; layernorm carries a bias when `norm_bias` (default: `bias`) is true; layernorm1p: LayerNorm whose stored scale w applies as 1 + w and starts at 0: the scale stored as its offset from 1, so decay or rounding of the stored value acts around a scale of 1 (Megatron-LM's --apply-layernorm-1p, megatron/core/fusions/fused_layer_norm.py zero_centered_gamma; Nemotron-4, arXiv 2402.16819): the same parameters as layernorm."""

    bias: bool = False
    """Biases in linear layers (and, unless `norm_bias` says otherwise, in layernorm)."""

    qkv_bias: bool | None = None
    """Biases on the query, key and value projections, separately from `bias` (Qwen2 and Qwen2.5: q, k and v with biases, the output projection and the MLP without; transformers' Qwen2Attention); omitted: as `bias`."""

    norm_bias: bool | None = None
    """LayerNorm bias, separately from the linear layers' (Falcon: biased LayerNorm, bias-free linear layers; MPT: neither); omitted: as `bias`. RMSNorm has none: true with rmsnorm is an error."""

    @field_validator("norm_bias")
    @classmethod
    def _norm_bias_needs_layernorm(cls, norm_bias: bool | None, info: ValidationInfo) -> bool | None:
        if norm_bias and info.data.get("norm") == "rmsnorm":
            raise ValueError(
                "norm_bias: true with norm: rmsnorm: RMSNorm has a scale and no bias; use norm: layernorm, "
                "or omit norm_bias"
            )
        return norm_bias

    position: Literal["rope", "learned", "alibi", "relative"] = "rope"
    """rope: rotary embedding (Su et al. 2021); learned: an absolute position table of max(seq_len) rows (GPT-2); alibi: no position parameters, each head's attention score minus slope_h x distance (Press et al. 2022, arXiv 2108.12409; BLOOM, MPT); relative: Transformer-XL relative encodings (Dai et al. 2019, arXiv 1901.02860, section 3.3; Gopher), one d_model x (heads x head_dim) projection of the sinusoidal encodings and two bias vectors of heads x head_dim per layer, and one more score matmul per layer in the FLOPs (planning only: the trainer refuses it, RUN008)."""

    parallel_block: bool = False
    """Attention and MLP read the same normed input and both add to the residual, x + attn(norm(x)) + mlp(norm(x)), with one norm per layer (GPT-J, Wang & Komatsuzaki 2021; PaLM, Chowdhery et al. 2022 section 2; Falcon)."""

    parallel_norms: int = Field(1, ge=1, le=2)
    """A parallel block's norms: 1, one shared by both branches (GPT-J, PaLM, Falcon-7B); 2, one per branch, x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX's use_parallel_residual: Pythia, GPT-NeoX-20B; EleutherAI/gpt-neox, megatron/model/transformer.py ParallelTransformerLayer). Read with parallel_block: true only."""

    @field_validator("parallel_norms")
    @classmethod
    def _parallel_norms_of_a_parallel_block(cls, norms: int, info: ValidationInfo) -> int:
        if norms != 1 and not info.data.get("parallel_block"):
            raise ValueError(
                f"parallel_norms: {norms} without parallel_block: true: a sequential block has a norm per sublayer "
                "already; set parallel_block: true, or remove parallel_norms"
            )
        return norms

    embedding_norm: bool = False
    """A norm (model.norm) right after the input embedding (BLOOM, Le Scao et al. 2022 section 3.2.1: "embedding LayerNorm")."""

    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout probability on the embedding output, the attention probabilities and each block's attention and MLP outputs (GPT-2/Megatron hidden and attention dropout; OPT: 0.1); 0: none, as most runs since."""

    rope_theta: float = Field(10000.0, gt=0, le=MAX_ROPE_THETA)
    """RoPE base of the first phase; a phase may change it."""

    rope_fraction: float = Field(1.0, gt=0, le=1)
    """The share of each head's dimensions RoPE rotates (the first rope_fraction x head_dim, an even number; the rest pass unrotated): 1, all (Llama); GPT-NeoX's rotary_pct 0.25 (Black et al. 2022, arXiv 2204.06745), Nemotron-4's 0.5 (arXiv 2402.16819 section 2.1), StableLM 2's 0.25."""

    nope_every: int | None = Field(None, ge=1, le=100_000)
    """Every nope_every-th layer (layer i with (i + 1) % nope_every == 0) attends without positions, no RoPE (NoPE: Kazemnejad et al. 2023, arXiv 2305.19466; SmolLM3 drops RoPE from every 4th layer, its no_rope_layer_interval); omitted: RoPE in every layer."""

    @field_validator("rope_fraction")
    @classmethod
    def _rope_fraction_rotates_pairs(cls, fraction: float, info: ValidationInfo) -> float:
        d, heads, hd = info.data.get("d_model"), info.data.get("heads"), info.data.get("head_dim")
        width = hd or (d // heads if d and heads else None)
        if fraction < 1 and width is not None and int(width * fraction) % 2:
            raise ValueError(
                f"rope_fraction {fraction} rotates {int(width * fraction)} of head_dim {width}: RoPE rotates pairs "
                "of dimensions; use a fraction giving an even number"
            )
        return fraction

    qk_norm: bool | Literal["per_head"] = False
    """RMSNorm on queries and keys before RoPE: true, over the full q and k projections (OLMo 2, Groeneveld et al. 2025, arXiv 2501.00656 section 3.2: a*hd + kv*hd weights per layer); per_head, over each head's head_dim with one weight vector shared by the heads (Qwen3, Gemma 3: 2*hd weights per layer)."""

    @field_validator("qk_norm", mode="before")
    @classmethod
    def _qk_norm_value(cls, value: object) -> object:
        if value is True or value is False or value == "per_head":
            return value
        raise ValueError(f"expected true, false or per_head, got {value!r}")

    norm_position: Literal["pre", "output", "sandwich"] = "pre"
    """Where each sublayer's norm sits: pre, x + f(norm(x)) (GPT-2 onwards, Llama); output, x + norm(f(x)) (OLMo 2's reordered norm, arXiv 2501.00656 section 3.2: the same norms applied to the attention and MLP outputs); sandwich, x + norm'(f(norm(x))), a norm before and after each sublayer (Gemma 2, arXiv 2408.00118 section 2: 4 norms per layer). Parallel blocks take pre only."""

    @field_validator("norm_position")
    @classmethod
    def _norm_position_of_a_parallel_block(cls, position: str, info: ValidationInfo) -> str:
        if position != "pre" and info.data.get("parallel_block"):
            raise ValueError(
                f"norm_position: {position} with parallel_block: true: a parallel block has one norm before both "
                "branches; use norm_position: pre, or parallel_block: false"
            )
        return position

    attention_scale_dim: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """The width d whose 1/sqrt(d) scales the attention logits; omitted: head_dim. Gemma 2 27B scales by d_model / heads = 144 with head_dim 128 (its config's query_pre_attn_scalar; arXiv 2408.00118)."""

    attention_softcap: float | None = Field(None, gt=0, le=1e6)
    """Attention logits soft-capped before the softmax, cap * tanh(logits / cap) (Gemma 2, arXiv 2408.00118 section 2: 50); omitted: none. The attention then runs unfused on the CPU (the logits are materialized), through flex_attention's score_mod on CUDA."""

    final_softcap: float | None = Field(None, gt=0, le=1e6)
    """The output logits soft-capped, cap * tanh(logits / cap) (Gemma 2: 30); omitted: none."""

    embedding_multiplier: float | None = Field(None, gt=0, le=1e6)
    """The input embeddings times this before the first block (Gemma: sqrt(d_model)); omitted: 1."""

    sliding_window: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    """Local attention: a query sees the sliding_window latest keys, itself included (Mistral 7B v0.1, Jiang et al. 2023, arXiv 2310.06825: 4096; Gemma 2: 4096 on alternate layers); omitted: every layer attends to the whole context. Attention FLOPs of a windowed layer count min(window, seq_len) keys."""

    global_every: int | None = Field(None, ge=1, le=100_000)
    """With sliding_window: every global_every-th layer (layer i with (i + 1) % global_every == 0) attends to the whole context and the others are windowed (Gemma 2: 2, alternating local and global; Gemma 3: 6, five local then one global); omitted: every layer windowed (Mistral)."""

    @field_validator("global_every")
    @classmethod
    def _global_every_needs_a_window(cls, every: int | None, info: ValidationInfo) -> int | None:
        if every is not None and info.data.get("sliding_window") is None:
            raise ValueError(
                "global_every without sliding_window: it says which layers are global among windowed ones; give "
                "sliding_window (tokens), or omit global_every"
            )
        return every

    tie_embeddings: bool = False
    """The output head shares the input embedding matrix."""

    vocab_size: int | None = Field(None, ge=1, le=MAX_VOCAB)
    """Embedding rows; omitted: the tokenizer's size padded to a multiple of 128."""

    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    """Context length of the first phase; a phase may change it."""

    moe: MoeSpec | None = None
    """Mixture-of-experts MLPs (routed and shared experts, the router and its balancing); omitted: every layer dense, an MLP of d_ff."""

    attention: MlaSpec | None = None
    """The attention's kind when it is not multi-head / grouped-query attention: {kind: mla, ...}, DeepSeek's multi-head latent attention; omitted: heads x head_dim queries, kv_heads x head_dim keys and values."""

    @field_validator("attention")
    @classmethod
    def _mla_has_its_own_head_widths(cls, attention: MlaSpec | None, info: ValidationInfo) -> MlaSpec | None:
        if attention is None:
            return attention
        heads, kv = info.data.get("heads"), info.data.get("kv_heads")
        if kv is not None and kv != heads:
            raise ValueError(
                f"kv_heads: {kv} with attention.kind mla: latent attention gives every head its own keys and values "
                "from one shared latent (kv_lora_rank); remove kv_heads"
            )
        if info.data.get("head_dim") is not None:
            raise ValueError(
                "head_dim with attention.kind mla: its heads' widths are qk_nope_head_dim + qk_rope_head_dim "
                "(queries, keys) and v_head_dim (values); remove head_dim"
            )
        for name, value, fine in (
            ("bias", info.data.get("bias"), False),
            ("qkv_bias", info.data.get("qkv_bias"), None),
            ("qk_norm", info.data.get("qk_norm"), False),
            ("position", info.data.get("position"), "rope"),
        ):
            if value is not None and value != fine and not (name == "qkv_bias" and value is False):
                raise ValueError(
                    f"{name}: {value} with attention.kind mla: DeepSeek's latent attention has no biases, norms its "
                    f"latents instead of q and k, and rotates a rope part of each head; remove {name}"
                )
        return attention

    mtp: MtpSpec | None = None
    """Multi-token prediction modules trained beside the model (DeepSeek-V3); omitted: next-token prediction only."""
