"""Self-attention as runlib's model computes it: RoPE and ALiBi, the document and window masks (SDPA's
boolean masks and flex_attention's BlockMasks), grouped-query attention with QK-norm, soft-capped logits.
The backends and masks are described in runlib.model.transformer's docstring, which builds them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from runlib.model.context_parallel import ContextParallel
from runlib.model.norms import RMSNorm
from runlib.model.rope import rope_frequencies
from runlib.plan.params import head_dim as spec_head_dim
from runlib.plan.params import kv_heads as spec_kv_heads
from runlib.plan.params import qk_norm_widths, qkv_has_bias
from runlib.spec.models import ModelSpec, RopeScalingSpec

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
