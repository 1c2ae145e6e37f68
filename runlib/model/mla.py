"""Multi-head latent attention (model.attention kind mla), DeepSeek-V2 (arXiv 2405.04434 section 2.1) and
DeepSeek-V3 (arXiv 2412.19437 section 2.1.1), written to be read.

    attention = MultiHeadLatentAttention(model_spec)
    y = attention(x [n, L, d], rope (cos, sin) [n, 1, L, qk_rope_head_dim] | None, mask) -> [n, L, d]

the signature of runlib.model.attention.Attention, so a Block can hold either. With a the heads and n, r, v the
nope, rope and value head widths (mla.qk_nope_head_dim, qk_rope_head_dim, v_head_dim):
  * queries: c_q = RMSNorm(q_a_proj(x)) [q_lora_rank], q = q_b_proj(c_q) [a x (n + r)]; without
    q_lora_rank (DeepSeek-V2-Lite) q = q_proj(x);
  * keys and values: kv_a_proj_with_mqa(x) = [c_kv (kv_lora_rank), k_rope (r)], c_kv normed by
    kv_a_layernorm, kv_b_proj(c_kv) = [k_nope (n), v (v)] per head; the rotated key part k_rope is one
    projection shared by every head (the "mqa"), each head's key [k_nope; RoPE(k_rope)];
  * RoPE on the r rotated dimensions of q and k only (the "decoupled" rotary key, V2 section 2.1.3), in
    the rotate-half form of runlib.model.attention.apply_rope and of transformers' DeepseekV3Attention
    with config.rope_interleave false. DeepSeek's own code (and transformers' default rope_interleave
    true, for its checkpoints) rotates interleaved pairs (x0, x1), (x2, x3), ...; the two differ by a
    fixed permutation of the r rope rows of q_b_proj (per head) and of kv_a_proj_with_mqa, so export
    either sets rope_interleave false or permutes those rows. `rope` must hold r-wide tables (a model with
    MLA builds its RoPE tables over qk_rope_head_dim, not head_dim);
  * scores scaled by 1/sqrt(n + r) (the query-key width; V2 eq. 9-10). DeepSeek's YaRN checkpoints
    also multiply this scale by mscale^2 (transformers' yarn_apply_mscale): not applied here, the rope
    tables carry runlib's YaRN factor on the rotated part;
  * causal attention with Attention's masks: an AttentionMask (runlib.model.attention) (SDPA boolean or
    additive mask, flex BlockMask with score_mod, context parallelism's gathered keys) or None (causal);
    model.dropout on the probabilities in training, model.attention_softcap as Attention's.
The parameter names are transformers' DeepseekV3Attention's (q_a_proj, q_a_layernorm, q_b_proj or
q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), so export is a rename of the layer path;
the count equals runlib.plan.params.attention_params (no biases: ModelSpec refuses bias with mla).
The latent norms are runlib's RMSNorm at NORM_EPS (transformers' DeepseekV3RMSNorm defaults to 1e-6).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from runlib.model.attention import apply_rope, capped_attention, capped_score_mod, flex_attention_fn
from runlib.model.norms import NORM_EPS, RMSNorm
from runlib.spec.models import ModelSpec


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention (module docstring)."""

    recompute_core = False  # selective activation recomputation (set by runlib.model.parallelize)

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        mla = model.attention
        if mla is None:
            raise ValueError("MultiHeadLatentAttention needs model.attention (kind mla)")
        d, heads = model.d_model, model.heads
        self.heads, self.kv_lora_rank = heads, mla.kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim = mla.qk_nope_head_dim, mla.qk_rope_head_dim
        self.v_head_dim = mla.v_head_dim
        self.qk_head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank is None:
            self.q_proj: nn.Linear | None = nn.Linear(d, heads * self.qk_head_dim, bias=False)
            self.q_a_proj = self.q_a_layernorm = self.q_b_proj = None
        else:
            self.q_proj = None
            self.q_a_proj = nn.Linear(d, mla.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, eps=NORM_EPS)
            self.q_b_proj = nn.Linear(mla.q_lora_rank, heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, mla.kv_lora_rank + mla.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, eps=NORM_EPS)
        self.kv_b_proj = nn.Linear(mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * mla.v_head_dim, d, bias=False)
        self.o_proj.residual_projection = True  # type: ignore[assignment]  # a marker for reset_parameters (as Attention.wo's)
        self.scale = self.qk_head_dim**-0.5
        self.dropout = model.dropout
        self.softcap = model.attention_softcap

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """x [n, L, d] -> q [n, L, a x (n + r)], through the query latent when q_lora_rank."""
        if self.q_proj is not None:
            q: torch.Tensor = self.q_proj(x)
            return q
        assert self.q_a_proj is not None and self.q_a_layernorm is not None and self.q_b_proj is not None
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, mask: Any) -> torch.Tensor:
        n, length, _ = x.shape
        nope, rot = self.qk_nope_head_dim, self.qk_rope_head_dim
        # -1 heads, as Attention's: under tensor parallelism a rank's projections hold its heads only
        q = self.queries(x).view(n, length, -1, self.qk_head_dim).transpose(1, 2)
        q_nope, q_rope = torch.split(q, [nope, rot], dim=-1)
        c_kv, k_rope = torch.split(self.kv_a_proj_with_mqa(x), [self.kv_lora_rank, rot], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c_kv)).view(n, length, -1, nope + self.v_head_dim).transpose(1, 2)
        k_nope, v = torch.split(kv, [nope, self.v_head_dim], dim=-1)
        k_rope = k_rope.view(n, 1, length, rot)  # one rotated key, shared by the heads
        if rope is not None:
            cos, sin = rope
            if cos.shape[-1] != rot:
                raise ValueError(f"MLA rotates qk_rope_head_dim {rot} dimensions; the RoPE tables are {cos.shape[-1]}")
            q_rope, k_rope = apply_rope(q_rope, cos, sin), apply_rope(k_rope, cos, sin)
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(-1, k_nope.shape[1], -1, -1)], dim=-1)
        context_parallel = getattr(mask, "context_parallel", None)
        if context_parallel is not None:  # every rank's keys and values (runlib.model.context_parallel)
            k, v = context_parallel.gather(k, dim=2), context_parallel.gather(v, dim=2)
        if self.recompute_core and torch.is_grad_enabled():
            y: torch.Tensor = torch.utils.checkpoint.checkpoint(self.core, q, k, v, mask, use_reentrant=False)
        else:
            y = self.core(q, k, v, mask)
        out: torch.Tensor = self.o_proj(y.transpose(1, 2).reshape(n, length, -1))
        return out

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any) -> torch.Tensor:
        """softmax(q k^T / sqrt(n + r) + mask) v over [n, heads, L, *] (values v_head_dim wide), with
        Attention.core's backends and masks."""
        p = self.dropout if self.training else 0.0
        block_mask = getattr(mask, "block_mask", None)
        if block_mask is not None:
            q, k, v = (t.clone(memory_format=torch.contiguous_format) for t in (q, k, v))  # as Attention.core
            flex_out: torch.Tensor = flex_attention_fn(q.device)(
                q,
                k,
                v,
                score_mod=capped_score_mod(getattr(mask, "score_mod", None), self.softcap),
                block_mask=block_mask,
                scale=self.scale,
            )
            return flex_out
        bool_mask = getattr(mask, "bool_mask", None)
        if self.softcap is not None:
            capped: torch.Tensor = capped_attention(q, k, v, bool_mask, self.scale, self.softcap, p)
            return capped
        if bool_mask is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask, dropout_p=p, scale=self.scale)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p, scale=self.scale)
