"""A decoder-only transformer built from a ModelSpec, written to be read (nanoGPT style).

    Transformer(model_spec, vocab_rows, max_seq_len)
    model(input_ids [n, L], position_ids [n, L] | None, doc_ids [n, L] | None) -> logits [n, L, V], float32
    (in training mode under context parallelism: logits [n, L / cp, V] of this rank's tokens,
    model.context_parallel.local(targets) are their targets)

The parts, by the papers that introduced them:
  * pre-norm blocks (x + attn(norm(x)), then x + mlp(norm(x))) and a final norm, with RMSNorm
    (Zhang & Sennrich 2019, arXiv 1910.07467) or LayerNorm (Ba et al. 2016; with a bias when
    model.norm_bias, default model.bias) or LayerNorm-1p (Megatron, Nemotron-4), all in runlib.model.norms;
    or parallel blocks, x + attn(norm(x)) + mlp(norm(x)) with one
    norm (model.parallel_block: GPT-J, PaLM section 2, Falcon) or one per branch (GPT-NeoX); an optional norm after the input
    embedding (model.embedding_norm: BLOOM);
  * rotary position embedding, RoPE (Su et al. 2021, arXiv 2104.09864), in the rotate-half form of
    GPT-NeoX and Llama; `set_rope(theta, max_seq_len)` recomputes its cos/sin tables (a long-context
    phase changes both); or learned absolute positions (GPT-2) of max_seq_len rows; or ALiBi (Press et
    al. 2022, arXiv 2108.12409): no position parameters, each head's score minus slope_h x (i - j), with
    the paper's geometric slopes (a power of two of heads: 2^(-8h/heads); otherwise those of the nearest
    lower power of two, then every other one of the next: ofirpress/attention_with_linear_biases,
    fairseq/models/transformer.py, get_slopes). In a packed row, i - j is the distance within the
    document (keys of other documents are masked), so the bias needs no position_ids. Transformer-XL
    relative positions (model.position: relative) are not built (the audit refuses them, RUN008);
  * grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245): kv_heads key/value heads shared
    by groups of query heads; optional QK-norm (OLMo 2, arXiv 2501.00656): an RMSNorm over the whole q
    and the whole k projection, before they are split into heads;
  * SwiGLU MLP (Shazeer 2020, arXiv 2002.05202): w2(silu(w1 x) * w3 x), or w2(act(w1 x)) with GELU,
    ReLU (OPT) or squared ReLU (Primer, So et al. 2021, arXiv 2109.08668);
  * dropout (model.dropout, GPT-2/Megatron style) on the embedding output, the attention
    probabilities and each block's attention and MLP outputs, in training mode only; with dropout the
    sdpa backend is used in training (flex_attention has no dropout);
  * an LM head tied to the token embedding or its own matrix.
The parameter count equals runlib.plan.params.count_params exactly (tested for every spec in specs/).

Attention with document masking (packed rows): with doc_ids, a query at i reads key j only if
doc_ids[i] == doc_ids[j] and j <= i. Backends (`Transformer.attention_backend`):
  * "sdpa": torch's scaled_dot_product_attention, with is_causal=True when no row holds more than one
    document, else an explicit boolean mask [n, 1, L, L] built once per forward. Works everywhere,
    with gradients (the CPU training path).
  * "flex": torch.nn.attention.flex_attention with a BlockMask from `create_block_mask` over the
    document mask_mod (`document_causal_mask_mod`), which skips the blocks that are fully masked. On
    CUDA flex_attention is compiled (once, lazily); elsewhere it runs eagerly, which in torch 2.13 on
    CPU is an unfused reference implementation without backward (inference only).
  * "auto" (default): flex on CUDA tensors, sdpa elsewhere.
The two backends agree (tests/model/test_transformer.py: the mask_mod evaluated on index grids equals
the boolean mask; flex and sdpa forwards agree on CPU under no_grad).

Parallel training (runlib.model.parallelize) needs two hooks here: Attention reshapes q/k/v with -1
heads, so a tensor-parallel rank runs on its own heads only; `Block.recompute` (full) and
`Attention.recompute_core` (selective) switch on activation recomputation with
torch.utils.checkpoint inside forward, so parameter names (and checkpoints) stay the same.

Initialisation (GPT-2, Radford et al. 2019): normal(0, 0.02) for every linear and embedding weight,
normal(0, 0.02 / sqrt(2 * layers)) for the two projections that write into the residual stream
(attention output, MLP down projection), zeros for biases, ones for norm weights. Deterministic
given torch.manual_seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from runlib.model.context_parallel import ContextParallel
from runlib.model.norms import LayerNorm1P, RMSNorm, make_norm
from runlib.model.rope import rope_frequencies
from runlib.plan.params import gated_mlp, qk_norm_widths, qkv_has_bias, rotary_dims, windowed_layers
from runlib.plan.params import head_dim as spec_head_dim
from runlib.plan.params import kv_heads as spec_kv_heads
from runlib.spec.models import ModelSpec, RopeScalingSpec

AttentionBackend = Literal["auto", "sdpa", "flex"]
INIT_STD = 0.02

# ----------------------------------------------------------------------------------------- ALiBi


def alibi_slopes(heads: int) -> torch.Tensor:
    """The per-head ALiBi slopes [heads], float32, as the paper's reference get_slopes (Press et al. 2022)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(heads).is_integer():
        slopes = power_of_two(heads)
    else:
        lower = 2 ** math.floor(math.log2(heads))
        slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: torch.Tensor, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive SDPA mask [n, heads, L, L]: -slope_h * (i - j) where `allowed` [n, 1, L, L], -inf elsewhere."""
    length = allowed.shape[-1]
    positions = torch.arange(length, device=allowed.device, dtype=torch.float32)
    distance = positions[None, :] - positions[:, None]  # j - i: <= 0 on and below the diagonal
    bias = slopes.to(allowed.device)[:, None, None] * distance  # [heads, L, L]
    return bias[None].masked_fill(~allowed, float("-inf")).to(dtype)


# ----------------------------------------------------------------------------------------- RoPE


def rope_tables(
    head_dim: int,
    max_seq_len: int,
    theta: float,
    device: torch.device | None = None,
    scaling: RopeScalingSpec | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_seq_len, head_dim] of the rotate-half RoPE: frequency i serves dims i and i + hd/2
    (with `scaling`, Llama 3.1's or YaRN's frequencies, runlib.model.rope)."""
    inv_freq, attention_factor = rope_frequencies(head_dim, theta, scaling, device)
    angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [n, heads, L, hd] rotated by the float32 cos/sin [n, 1, L, r], in float32: the first r dimensions
    of each head (partial RoPE, model.rope_fraction: GPT-NeoX's rotary_pct), the rest passed as they are."""
    xf = x.float()
    rotary = cos.shape[-1]
    if rotary < x.shape[-1]:
        xr, rest = xf[..., :rotary], xf[..., rotary:]
        return torch.cat([xr * cos + rotate_half(xr) * sin, rest], dim=-1).type_as(x)
    return (xf * cos + rotate_half(xf) * sin).type_as(x)


# ----------------------------------------------------------------------------------------- masks


def has_documents(doc_ids: torch.Tensor | None) -> bool:
    """True when some row of doc_ids [n, L] holds more than one document (a document mask is needed)."""
    return doc_ids is not None and doc_ids.shape[-1] > 1 and bool((doc_ids[:, 1:] != doc_ids[:, :-1]).any())


def document_causal_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """The boolean SDPA mask [n, 1, L, L] (True = attend): same document and key at or before the query."""
    n, length = doc_ids.shape
    causal = torch.ones(length, length, dtype=torch.bool, device=doc_ids.device).tril()
    same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
    return (same_doc & causal)[:, None]


def context_parallel_mask(query: torch.Tensor, keys: torch.Tensor, doc_ids: torch.Tensor | None) -> torch.Tensor:
    """The boolean SDPA mask [n or 1, 1, Lq, Lk] of local queries at global positions `query` [Lq] over
    gathered keys at global positions `keys` [Lk] (runlib.model.context_parallel): same document (doc_ids
    [n, L] of the whole rows) and key at or before the query."""
    allowed = keys[None, :] <= query[:, None]
    if doc_ids is None:
        return allowed[None, None]
    same_doc = doc_ids[:, query][:, :, None] == doc_ids[:, keys][:, None, :]
    return (same_doc & allowed)[:, None]


MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def document_causal_mask_mod(doc_ids: torch.Tensor | None) -> MaskMod:
    """The flex_attention mask_mod of the same mask; without doc_ids the plain causal mask."""
    if doc_ids is None:

        def causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return q_idx >= kv_idx

        return causal

    def document_causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return (doc_ids[b, q_idx] == doc_ids[b, kv_idx]) & (q_idx >= kv_idx)

    return document_causal


def window_band(length: int, window: int, device: torch.device) -> torch.Tensor:
    """[L, L] True where the key is one of the query's `window` latest (q - k < window; Mistral 7B's sliding
    window, arXiv 2310.06825 section 2, and transformers' sliding_window_causal)."""
    index = torch.arange(length, device=device)
    return (index[:, None] - index[None, :]) < window


def windowed_mask_mod(mask_mod: MaskMod, window: int) -> MaskMod:
    """`mask_mod` and the sliding window: the key among the query's `window` latest."""

    def windowed(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return mask_mod(b, h, q_idx, kv_idx) & (q_idx - kv_idx < window)

    return windowed


_compiled_flex: Callable[..., Any] | None = None


def flex_attention_fn(device: torch.device) -> Callable[..., Any]:
    """flex_attention, compiled on CUDA (created on first use), eager elsewhere."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    compiled: Callable[..., Any] = _compiled_flex
    return compiled


def context_parallel_mask_mod(query: torch.Tensor, keys: torch.Tensor, doc_ids: torch.Tensor | None) -> MaskMod:
    """The flex_attention mask_mod of context_parallel_mask: q_idx and kv_idx index `query` and `keys`."""

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        causal = keys[kv_idx] <= query[q_idx]
        if doc_ids is None:
            return causal
        return causal & (doc_ids[b, query[q_idx]] == doc_ids[b, keys[kv_idx]])

    return mask_mod


def flex_block_mask(
    doc_ids: torch.Tensor | None,
    n: int,
    length: int,
    device: torch.device,
    mask_mod: MaskMod | None = None,
    kv_length: int | None = None,
) -> Any:
    """A BlockMask of the document-causal mask (or of `mask_mod`, over `kv_length` keys)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(
        mask_mod or document_causal_mask_mod(doc_ids),
        B=n if doc_ids is not None else None,
        H=None,
        Q_LEN=length,
        KV_LEN=kv_length or length,
        device=device,
        _compile=device.type == "cuda",
    )


# ----------------------------------------------------------------------------------------- layers


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE and optional QK-norm."""

    recompute_core = False  # selective activation recomputation (set by runlib.model.parallelize)

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        d, hd = model.d_model, spec_head_dim(model)
        self.heads, self.kv_heads, self.head_dim = model.heads, spec_kv_heads(model), hd
        if self.heads % self.kv_heads:
            raise ValueError(f"model.heads {self.heads} is not a multiple of model.kv_heads {self.kv_heads}")
        qkv_bias = qkv_has_bias(model)  # Qwen2: on q, k and v only (model.qkv_bias)
        self.wq = nn.Linear(d, self.heads * hd, bias=qkv_bias)
        self.wk = nn.Linear(d, self.kv_heads * hd, bias=qkv_bias)
        self.wv = nn.Linear(d, self.kv_heads * hd, bias=qkv_bias)
        self.wo = nn.Linear(self.heads * hd, d, bias=model.bias)
        self.wo.residual_projection = True  # type: ignore[assignment]  # a marker for reset_parameters; nn.Module types attributes as Tensor | Module
        # QK-norm over the whole projection (OLMo 2) or over each head with one shared weight (Qwen3)
        q_width, k_width = qk_norm_widths(model)
        self.qk_norm_per_head = model.qk_norm == "per_head"
        self.q_norm = RMSNorm(q_width) if q_width else None
        self.k_norm = RMSNorm(k_width) if k_width else None
        self.dropout = model.dropout
        # Gemma 2: logits scaled by 1/sqrt(attention_scale_dim) (None: SDPA's 1/sqrt(head_dim)), soft-capped
        self.scale = model.attention_scale_dim**-0.5 if model.attention_scale_dim else None
        self.softcap = model.attention_softcap

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.q_norm is not None and self.k_norm is not None and not self.qk_norm_per_head:
            q, k = self.q_norm(q), self.k_norm(k)
        # -1 heads: under tensor parallelism (runlib.model.parallelize) q/k/v hold this rank's heads only
        q = q.view(n, length, -1, self.head_dim)
        k = k.view(n, length, -1, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None and self.qk_norm_per_head:
            q, k = self.q_norm(q), self.k_norm(k)  # over each head's head_dim
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(n, length, -1, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if isinstance(mask, AttentionMask) and mask.context_parallel is not None:
            # context parallelism: every rank's keys and values (runlib.model.context_parallel)
            k, v = mask.context_parallel.gather(k, dim=2), mask.context_parallel.gather(v, dim=2)
        if self.recompute_core and torch.is_grad_enabled():
            # selective recomputation (Korthikanti et al. 2022, arXiv 2205.05198, section 4.1): the
            # attention core's activations are not kept; it runs again in the backward pass
            y: torch.Tensor = torch.utils.checkpoint.checkpoint(self.core, q, k, v, mask, use_reentrant=False)
        else:
            y = self.core(q, k, v, mask)
        out: torch.Tensor = self.wo(y.transpose(1, 2).reshape(n, length, -1))
        return out

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any) -> torch.Tensor:
        """softmax(q k^T / sqrt(hd) + mask) v over [n, heads, L, hd], grouped-query when k/v have fewer heads."""
        gqa = k.shape[1] != q.shape[1]
        p = self.dropout if self.training else 0.0
        if isinstance(mask, AttentionMask) and mask.block_mask is not None:
            # contiguous copies: inductor's CPU flex template misreads rotate-half q/k views (feasibility.md 7)
            q, k, v = (t.clone(memory_format=torch.contiguous_format) for t in (q, k, v))
            flex_out: torch.Tensor = flex_attention_fn(q.device)(
                q,
                k,
                v,
                score_mod=capped_score_mod(mask.score_mod, self.softcap),
                block_mask=mask.block_mask,
                enable_gqa=gqa,
                scale=self.scale,
            )
            return flex_out
        bool_mask = mask.bool_mask if isinstance(mask, AttentionMask) else None
        if self.softcap is not None:
            return capped_attention(q, k, v, bool_mask, self.scale, self.softcap, p)
        if bool_mask is not None:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=bool_mask, dropout_p=p, enable_gqa=gqa, scale=self.scale
            )
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p, enable_gqa=gqa, scale=self.scale)


def capped_score_mod(score_mod: Any, cap: float | None) -> Any:
    """flex_attention's score_mod with the logits soft-capped first, cap * tanh(score / cap) (Gemma 2)."""
    if cap is None:
        return score_mod

    def capped(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        score = cap * torch.tanh(score / cap)
        return score if score_mod is None else score_mod(score, b, h, q_idx, kv_idx)

    return capped


def capped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float | None,
    cap: float,
    dropout: float,
) -> torch.Tensor:
    """Attention with soft-capped logits, unfused (no SDPA kernel caps them): softmax(cap * tanh(q k^T * scale /
    cap) + mask) v, the softmax in float32 (Gemma 2, arXiv 2408.00118 section 2; transformers' Gemma2Attention).
    mask: boolean (True = attend), additive (ALiBi's), or None for causal."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    scores = cap * torch.tanh(scores / cap)
    if mask is None:
        length, keys = q.shape[2], k.shape[2]
        mask = torch.ones(length, keys, dtype=torch.bool, device=q.device).tril(keys - length)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if dropout > 0:
        probs = F.dropout(probs, dropout)
    return probs @ v


class MLP(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x) (Shazeer 2020), GeGLU the same with a tanh GELU; GELU, ReLU, squared
    ReLU: w2(act(w1 x))."""

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        d, f = model.d_model, model.d_ff
        self.activation = model.activation
        self.gated = gated_mlp(model)  # SwiGLU or GeGLU: a gate (w1) and an up projection (w3)
        self.w1 = nn.Linear(d, f, bias=model.bias)
        self.w3 = nn.Linear(d, f, bias=model.bias) if self.gated else None
        self.w2 = nn.Linear(f, d, bias=model.bias)
        self.w2.residual_projection = True  # type: ignore[assignment]  # a marker for reset_parameters (as wo's)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w1(x)
        if self.w3 is not None:
            gate = F.silu(h) if self.activation == "swiglu" else F.gelu(h, approximate="tanh")  # GeGLU: tanh GELU
            h = gate * self.w3(x)
        elif self.activation == "relu":
            h = F.relu(h)
        elif self.activation == "relu2":  # squared ReLU (So et al. 2021, section 4)
            h = F.relu(h).square()
        else:
            h = F.gelu(h)
        out: torch.Tensor = self.w2(h)
        return out


class Block(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)); parallel: x + attention(h) + mlp(h),
    h = norm(x), one norm; model.norm_position output: x + norm(attention(x)), then x + norm(mlp(x))
    (OLMo 2); sandwich: x + norm'(attention(norm(x))), then the same for the MLP (Gemma 2). Dropout
    (model.dropout) on each branch's output in training."""

    recompute = False  # full activation recomputation of the block (set by runlib.model.parallelize)
    recompute_mlp = False  # the MLP recomputed in the backward pass (activation_checkpointing: mlp)
    windowed = False  # attends to model.sliding_window keys (set by Transformer)
    nope = False  # attends without RoPE (model.nope_every; set by Transformer)
    # with recompute: a policy of what to keep anyway (op-level selective: parallelize.op_selective_context)
    recompute_context_fn: Callable[[], tuple[Any, Any]] | None = None

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.parallel = model.parallel_block
        self.attention_norm = make_norm(model, model.d_model)
        self.attention = Attention(model)
        # a parallel block's MLP reads the attention's norm unless it has its own (model.parallel_norms 2)
        own_mlp_norm = not self.parallel or model.parallel_norms == 2
        self.mlp_norm = make_norm(model, model.d_model) if own_mlp_norm else None
        self.mlp = MLP(model)
        self.norm_position = model.norm_position
        sandwich = model.norm_position == "sandwich"
        self.attention_post_norm = make_norm(model, model.d_model) if sandwich else None
        self.mlp_post_norm = make_norm(model, model.d_model) if sandwich else None
        self.dropout = nn.Dropout(model.dropout) if model.dropout > 0 else None

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            # full recomputation (Chen et al. 2016, arXiv 1604.06174): keep only the block's input (and,
            # with a context_fn, the op outputs its policy keeps: runlib.model.parallelize.op_selective_policy)
            extra: dict[str, Any] = {}
            if self.recompute_context_fn is not None:
                extra["context_fn"] = self.recompute_context_fn
            out: torch.Tensor = torch.utils.checkpoint.checkpoint(
                self.body, x, rope, mask, use_reentrant=False, **extra
            )
            return out
        return self.body(x, rope, mask)

    def _drop(self, y: torch.Tensor) -> torch.Tensor:
        return self.dropout(y) if self.dropout is not None else y

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP, recomputed in the backward pass under activation_checkpointing mlp (only its input kept)."""
        if self.recompute_mlp and torch.is_grad_enabled():
            out: torch.Tensor = torch.utils.checkpoint.checkpoint(self.mlp, x, use_reentrant=False)
            return out
        y: torch.Tensor = self.mlp(x)
        return y

    def body(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        if self.mlp_norm is None or self.parallel:  # one norm for both branches, or one each (GPT-NeoX)
            h = self.attention_norm(x)
            g = h if self.mlp_norm is None else self.mlp_norm(x)
            return x + self._drop(self.attention(h, rope, mask)) + self._drop(self._mlp(g))
        if self.norm_position == "output":
            x = x + self._drop(self.attention_norm(self.attention(x, rope, mask)))
            return x + self._drop(self.mlp_norm(self._mlp(x)))
        if self.attention_post_norm is not None and self.mlp_post_norm is not None:  # sandwich
            x = x + self._drop(self.attention_post_norm(self.attention(self.attention_norm(x), rope, mask)))
            return x + self._drop(self.mlp_post_norm(self._mlp(self.mlp_norm(x))))
        x = x + self._drop(self.attention(self.attention_norm(x), rope, mask))
        return x + self._drop(self._mlp(self.mlp_norm(x)))


class AttentionMask:
    """What one forward's attention layers share: an SDPA mask (boolean, or additive float with ALiBi), a
    flex BlockMask (with ALiBi's score_mod), or neither (causal); under context parallelism, the group
    whose keys and values each layer gathers (the masks are then over the gathered keys)."""

    def __init__(
        self,
        bool_mask: torch.Tensor | None = None,
        block_mask: Any = None,
        score_mod: Any = None,
        context_parallel: ContextParallel | None = None,
    ) -> None:
        self.bool_mask, self.block_mask, self.score_mod = bool_mask, block_mask, score_mod
        self.context_parallel = context_parallel


# ----------------------------------------------------------------------------------------- model


class Transformer(nn.Module):
    """The decoder of a ModelSpec, with vocab_rows embedding rows and positions up to max_seq_len."""

    attention_backend: AttentionBackend = "auto"
    alibi: torch.Tensor  # buffers (register_buffer), typed for mypy
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor
    runlib_autocast: torch.dtype | None = None  # set by runlib.model.parallelize: the dtype forward_context casts to
    # set by runlib.model.parallelize: in training mode each rank computes its share of every row's tokens
    context_parallel: ContextParallel | None = None

    def __init__(self, model: ModelSpec, vocab_rows: int, max_seq_len: int) -> None:
        super().__init__()
        self.spec, self.vocab_rows, self.max_seq_len = model, vocab_rows, max_seq_len
        self.head_dim = spec_head_dim(model)
        if model.position == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
        if model.position == "relative":
            raise ValueError(
                "model.position relative (Transformer-XL) is not enacted by runlib's model (RUN008 refuses it): "
                "use alibi, rope or learned"
            )
        self.tok_embeddings = nn.Embedding(vocab_rows, model.d_model)
        self.pos_embeddings = nn.Embedding(max_seq_len, model.d_model) if model.position == "learned" else None
        self.embedding_norm = make_norm(model, model.d_model) if model.embedding_norm else None
        self.embedding_dropout = nn.Dropout(model.dropout) if model.dropout > 0 else None
        self.register_buffer(
            "alibi", alibi_slopes(model.heads) if model.position == "alibi" else torch.empty(0), persistent=False
        )
        self.layers = nn.ModuleList(Block(model) for _ in range(model.layers))
        for i, (block, windowed) in enumerate(zip(self.blocks(), windowed_layers(model), strict=True)):
            block.windowed = windowed  # a sliding-window layer (model.sliding_window, global_every)
            block.nope = model.nope_every is not None and (i + 1) % model.nope_every == 0  # no RoPE (SmolLM3)
        self.norm = make_norm(model, model.d_model)
        self.lm_head = nn.Linear(model.d_model, vocab_rows, bias=False)
        if model.tie_embeddings:
            self.lm_head.weight = self.tok_embeddings.weight
        self.rope_theta = model.rope_theta
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        if model.position == "rope":
            self.set_rope(model.rope_theta, max_seq_len)
        self.reset_parameters()

    def blocks(self) -> list[Block]:
        """The transformer blocks, typed (nn.ModuleList yields Modules)."""
        return [block for block in self.layers if isinstance(block, Block)]

    # -- set-up

    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2*layers)), zero biases, unit norms."""
        residual_std = INIT_STD / math.sqrt(2 * self.spec.layers)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = residual_std if getattr(module, "residual_projection", False) else INIT_STD
                if not (module is self.lm_head and self.spec.tie_embeddings):
                    nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, (RMSNorm, nn.LayerNorm)):
                if module.weight is not None:  # a scale of 1 (LayerNorm1P stores it as 1 + 0)
                    (nn.init.zeros_ if isinstance(module, LayerNorm1P) else nn.init.ones_)(module.weight)
                bias = getattr(module, "bias", None)
                if isinstance(bias, torch.Tensor):
                    nn.init.zeros_(bias)

    def set_rope(self, theta: float, max_seq_len: int | None = None, scaling: RopeScalingSpec | None = None) -> None:
        """Recompute the RoPE cos/sin tables for base theta (and a phase's frequency scaling) and positions up to
        max_seq_len."""
        if self.spec.position != "rope":
            raise ValueError("set_rope: the model has learned positions, not RoPE")
        max_seq_len = max_seq_len or self.max_seq_len
        cos, sin = rope_tables(rotary_dims(self.spec), max_seq_len, theta, self.rope_cos.device, scaling)
        self.rope_cos, self.rope_sin = cos, sin  # buffers stay buffers (non-persistent: not in state_dict)
        self.rope_theta = theta

    # -- forward

    def context_parallel_attention_mask(
        self, cp: ContextParallel, doc_ids: torch.Tensor | None, n: int, length: int, device: torch.device
    ) -> AttentionMask:
        """The mask of this rank's queries over the gathered keys of rows of `length` tokens (built once)."""
        query, keys = cp.query_index(length, device), cp.key_index(length, device)
        docs = doc_ids if doc_ids is not None and has_documents(doc_ids) else None
        if self.attention_backend == "flex" or (self.attention_backend == "auto" and device.type == "cuda"):
            mask_mod = context_parallel_mask_mod(query, keys, docs)
            block = flex_block_mask(docs, n, query.numel(), device, mask_mod=mask_mod, kv_length=length)
            return AttentionMask(block_mask=block, context_parallel=cp)
        return AttentionMask(bool_mask=context_parallel_mask(query, keys, docs), context_parallel=cp)

    def attention_mask(
        self,
        doc_ids: torch.Tensor | None,
        n: int,
        length: int,
        device: torch.device,
        dtype: torch.dtype,
        window: int | None = None,
    ) -> AttentionMask:
        """The mask every layer of this forward uses (built once; a second one, `window`, for the
        sliding-window layers: a query sees its `window` latest keys); ALiBi's additive mask in `dtype` (the
        residual stream's: the embedding's output)."""
        if window is not None and window >= length:
            window = None  # the window holds the whole row: the plain mask
        backend = self.attention_backend
        if self.training and self.spec.dropout > 0 and torch.is_grad_enabled():
            backend = "sdpa"  # flex_attention has no dropout on the attention probabilities
        alibi = self.spec.position == "alibi"
        if backend == "flex" or (backend == "auto" and device.type == "cuda"):
            # no host sync to look for documents: a BlockMask skips the masked blocks either way
            score_mod = None
            if alibi:
                slopes = self.alibi

                def score_mod(
                    score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
                ) -> torch.Tensor:
                    return score + slopes[h] * (kv_idx - q_idx)

            mask_mod = windowed_mask_mod(document_causal_mask_mod(doc_ids), window) if window else None
            block = flex_block_mask(doc_ids, n, length, device, mask_mod=mask_mod)
            return AttentionMask(block_mask=block, score_mod=score_mod)
        documents = doc_ids is not None and has_documents(doc_ids)
        if alibi or documents or window:
            if doc_ids is not None and documents:
                allowed = document_causal_mask(doc_ids)
            else:
                allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]
            if window:
                allowed = allowed & window_band(length, window, device)
            return AttentionMask(bool_mask=alibi_bias(self.alibi, allowed, dtype) if alibi else allowed)
        return AttentionMask()

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        doc_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # a pipeline stage after the first (runlib.model.pipeline) receives the residual stream [n, L, d] (a
        # tensor-parallel rank's sequence shard of it): the row length is position_ids'
        first_stage = self.tok_embeddings is not None
        n, length = input_ids.shape[0], (input_ids.shape[1] if position_ids is None else position_ids.shape[1])
        device = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(length, device=device).expand(n, length)
        # context parallelism splits training rows only: evaluation runs whole windows on every rank
        cp = self.context_parallel if self.training else None
        if cp is not None:
            if self.spec.position == "alibi":
                raise ValueError("context parallelism with ALiBi is not enacted (RUN001 refuses it)")
            input_ids, position_ids = cp.local(input_ids), cp.local(position_ids)
        x = self.tok_embeddings(input_ids) if first_stage else input_ids
        if first_stage and self.spec.embedding_multiplier is not None:
            x = x * torch.tensor(self.spec.embedding_multiplier, dtype=x.dtype)  # Gemma: sqrt(d_model)
        rope = None
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(position_ids)
        elif self.spec.position == "rope":  # (alibi: positions enter as the attention bias, attention_mask)
            if device.type != "cuda" and int(position_ids.max()) >= self.rope_cos.shape[0]:
                raise ValueError(
                    f"position {int(position_ids.max())} is beyond the RoPE table of {self.rope_cos.shape[0]}; "
                    "call set_rope(theta, max_seq_len) first"
                )
            cos, sin = self.rope_cos[position_ids], self.rope_sin[position_ids]  # [n, L, hd]
            rope = (cos[:, None], sin[:, None])
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        if self.embedding_dropout is not None:
            x = self.embedding_dropout(x)
        local = None
        if cp is not None:
            if self.spec.sliding_window is not None:
                raise ValueError("context parallelism with sliding_window is not enacted (RUN001 refuses it)")
            mask = self.context_parallel_attention_mask(cp, doc_ids, n, length, device)
        else:
            mask = self.attention_mask(doc_ids, n, length, device, x.dtype)
            if self.spec.sliding_window is not None:
                local = self.attention_mask(doc_ids, n, length, device, x.dtype, window=self.spec.sliding_window)
        for layer in self.blocks():
            x = layer(x, None if layer.nope else rope, local if layer.windowed and local is not None else mask)
        if self.lm_head is None:  # a pipeline stage before the last: the residual stream goes on
            return x
        logits: torch.Tensor = self.lm_head(self.norm(x)).float()
        cap = self.spec.final_softcap
        return cap * torch.tanh(logits / cap) if cap is not None else logits
