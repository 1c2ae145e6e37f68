"""Parameter counts of a decoder-only transformer, exact for Llama-, GPT-2-, Pythia-, OLMo-, BLOOM-, OPT-,
Falcon-, MPT-, DeepSeek- and Gopher-style blocks.

Per layer (auditor.md 2.1; Kaplan et al. 2020, arXiv 2001.08361, Table 1 for the split):
  attention  d*(a*hd) [q] + 2*d*(kv*hd) [k, v] + (a*hd)*d [o]   (+ a*hd + 2*kv*hd + d biases; with
             model.qkv_bias, Qwen2's, a*hd + 2*kv*hd whatever model.bias says of o)
  mlp        3*d*f (SwiGLU, GeGLU: Shazeer 2020) or 2*d*f (GELU, ReLU, squared ReLU)  (+ f + d biases; gated:
             2f + d)
  norms      2 per layer, 1 with parallel blocks (GPT-J, PaLM, Falcon), 4 with sandwich norms (Gemma 2,
             arXiv 2408.00118 section 2): d each (RMSNorm, or LayerNorm without bias) or 2d (LayerNorm
             with bias: model.norm_bias, default model.bias)
  qk-norm    a*hd + kv*hd (OLMo 2, arXiv 2501.00656: RMSNorm over the full q and k projections), or
             2*hd per head (Qwen3, Gemma 3: one head_dim weight each for q and k, shared by the heads)
  relative   d*(a*hd) + 2*a*hd (Transformer-XL, Dai et al. 2019, arXiv 1901.02860, section 3.3: the
             projection W_{k,R} of the sinusoidal relative encodings and the biases u, v per layer;
             Gopher's 280B counts them, Rae et al. 2021 Table 1: 80 x 16384^2 = 21.5B of it)
Mixture of experts (model.moe): an MoE layer's MLP is a router d*E, E routed experts and the shared
experts (one MLP of shared_d_ff) as above with their own widths, and with Qwen2-MoE's shared gate d more;
DeepSeek-V3's balancing bias is a buffer, not a parameter, and is not counted. "Active" parameters are
those a token passes through: the total less the (E - top_k) routed experts it skips in each MoE layer
(Mixtral 8x7B: 46.7B total, 12.9B active, Jiang et al. 2024 arXiv 2401.04088 section 2).
Multi-head latent attention (model.attention kind mla; DeepSeek-V2, arXiv 2405.04434 section 2.1.2):
d*r_q + r_q + r_q*a*(n+r) [queries through the latent, with its norm; d*a*(n+r) without a latent] +
d*(r_kv + r) + r_kv + r_kv*a*(n+v) [the key/value latent, its norm, the shared rotated key] + a*v*d [o],
with n, r, v the nope, rope and value head widths.
Multi-token prediction (model.mtp; DeepSeek-V3, arXiv 2412.19437 section 2.2): per module two input norms,
a 2d*d projection, one block (an MoE block past moe.dense_layers) and the norm before the shared output
head; the embedding and the head are the main model's. Counted apart (ParamCounts.mtp), as DeepSeek
publishes V3: 671B of main model, 685B with the MTP module's weights (its checkpoint also stores copies
of the embedding and head there: 685B - 671B - this count).
plus a final norm, an embedding norm (BLOOM), the token embedding V*d, an output head V*d unless tied,
and s_max*d learned positions (ALiBi: none; Press et al. 2022).
"Embedding" parameters are the token and position tables and an untied output head; the rest is
"non-embedding" (Kaplan's N), the embedding norm included.
"""

from __future__ import annotations

from dataclasses import dataclass

from runlib.spec.models import ModelSpec


@dataclass(frozen=True, slots=True)
class ParamCounts:
    total: int  # the model's parameters, MTP modules apart (`mtp`)
    embedding: int
    non_embedding: int
    per_layer: int  # the largest layer's (an MoE layer's with model.moe): what FSDP gathers at once
    matmul: int  # parameters in the matmuls of one token, forward (LM head included, input tables and skipped experts not; MTP modules included)
    active: int = 0  # parameters one token passes through: total less the routed experts it skips
    layers_total: int = 0  # the layers' parameters together (layers x per_layer in a dense model)
    expert: int = 0  # the routed experts' parameters, all layers (sharded over the expert-parallel ranks)
    expert_per_layer: int = 0  # one MoE layer's routed experts
    mtp: int = 0  # the multi-token prediction modules' parameters (trained; not in total)

    @property
    def trained(self) -> int:
        """Every parameter the optimizer updates: the model and its MTP modules."""
        return self.total + self.mtp


def head_dim(model: ModelSpec) -> int:
    """A head's query and key width (with MLA its nope and rope parts)."""
    if model.attention is not None:
        return model.attention.qk_nope_head_dim + model.attention.qk_rope_head_dim
    return model.head_dim or model.d_model // model.heads


def kv_heads(model: ModelSpec) -> int:
    return model.kv_heads or model.heads


def attention_flop_width(model: ModelSpec) -> float:
    """The width of PaLM's 12*L*d_attn*s score term: q k^T over the query-key width and the scores times
    v over the value width, 6*s*(w_qk + w_v) per layer and token, so d_attn is their mean (heads x
    head_dim for multi-head attention; with MLA, arXiv 2405.04434, a x (n + r) and a x v)."""
    if model.attention is not None:
        return model.heads * (head_dim(model) + model.attention.v_head_dim) / 2
    return float(model.heads * head_dim(model))


def moe_layers(model: ModelSpec) -> list[bool]:
    """Which layers hold an MoE MLP: past moe.dense_layers, layer i with (i + 1) % moe.every == 0."""
    moe = model.moe
    if moe is None:
        return [False] * model.layers
    return [i >= moe.dense_layers and (i + 1) % moe.every == 0 for i in range(model.layers)]


def norm_has_bias(model: ModelSpec) -> bool:
    """A LayerNorm's bias: model.norm_bias when given, else model.bias; RMSNorm has none."""
    if model.norm == "rmsnorm":
        return False
    return model.bias if model.norm_bias is None else model.norm_bias


def gated_mlp(model: ModelSpec) -> bool:
    """A gated MLP, three matrices (SwiGLU, GeGLU: Shazeer 2020, arXiv 2002.05202)."""
    return model.activation in ("swiglu", "geglu")


def windowed_layers(model: ModelSpec) -> list[bool]:
    """Which layers attend to a sliding window (model.sliding_window; every global_every-th layer global)."""
    if model.sliding_window is None:
        return [False] * model.layers
    every = model.global_every
    return [every is None or (i + 1) % every != 0 for i in range(model.layers)]


def rotary_dims(model: ModelSpec) -> int:
    """The dimensions of each head RoPE rotates (model.rope_fraction of head_dim; with MLA its rope part)."""
    if model.attention is not None:
        return model.attention.qk_rope_head_dim
    return int(head_dim(model) * model.rope_fraction)


def qkv_has_bias(model: ModelSpec) -> bool:
    """Biases on the q, k and v projections: model.qkv_bias when given, else model.bias."""
    return model.bias if model.qkv_bias is None else model.qkv_bias


def qk_norm_widths(model: ModelSpec) -> tuple[int, int]:
    """The weights of the q and k norms: the full projections' widths, one head's, or none."""
    hd = head_dim(model)
    if model.qk_norm == "per_head":
        return hd, hd
    return (model.heads * hd, kv_heads(model) * hd) if model.qk_norm else (0, 0)


def norms_per_layer(model: ModelSpec) -> int:
    if model.parallel_block:
        return model.parallel_norms
    return 4 if model.norm_position == "sandwich" else 2


def mlp_params(model: ModelSpec, d_ff: int) -> int:
    """One MLP of d_ff hidden units: 3 (gated) or 2 matrices, with biases when model.bias."""
    d = model.d_model
    mlp = (3 if gated_mlp(model) else 2) * d * d_ff
    if model.bias:
        mlp += (2 * d_ff if gated_mlp(model) else d_ff) + d
    return mlp


def attention_params(model: ModelSpec) -> int:
    """One layer's attention projections (module docstring), biases and relative encodings included."""
    d, hd = model.d_model, head_dim(model)
    mla = model.attention
    if mla is not None:
        a, qk = model.heads, hd
        q = d * a * qk if mla.q_lora_rank is None else d * mla.q_lora_rank + mla.q_lora_rank * (1 + a * qk)
        kv = d * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * (
            1 + a * (mla.qk_nope_head_dim + mla.v_head_dim)
        )
        return q + kv + a * mla.v_head_dim * d
    q_width, kv_width = model.heads * hd, kv_heads(model) * hd
    attention = d * q_width + 2 * d * kv_width + q_width * d
    if qkv_has_bias(model):
        attention += q_width + 2 * kv_width
    if model.bias:
        attention += d
    relative = d * q_width + 2 * q_width if model.position == "relative" else 0
    return attention + relative + sum(qk_norm_widths(model))


def moe_mlp_params(model: ModelSpec) -> tuple[int, int]:
    """(all, routed experts) of one MoE layer's MLP: the router, the experts, the shared experts and gate."""
    moe = model.moe
    assert moe is not None
    routed = moe.experts * mlp_params(model, moe.expert_d_ff)
    shared_d_ff = moe.shared_d_ff or moe.shared_experts * moe.expert_d_ff
    shared = mlp_params(model, shared_d_ff) if moe.shared_experts or moe.shared_d_ff else 0
    gate = model.d_model if moe.shared_gate else 0
    return model.d_model * moe.experts + routed + shared + gate, routed


def count_params(model: ModelSpec, vocab_rows: int, max_seq_len: int) -> ParamCounts:
    d = model.d_model
    norm = d * (2 if norm_has_bias(model) else 1)
    attention = attention_params(model)
    dense_layer = attention + mlp_params(model, model.d_ff) + norms_per_layer(model) * norm
    moe_layer, routed, skipped = dense_layer, 0, 0
    if model.moe is not None:
        moe_mlp, routed = moe_mlp_params(model)
        moe_layer = attention + moe_mlp + norms_per_layer(model) * norm
        skipped = routed * (model.moe.experts - min(model.moe.top_k, model.moe.experts)) // model.moe.experts
    sparse = sum(moe_layers(model))
    layers_total = (model.layers - sparse) * dense_layer + sparse * moe_layer

    token_embedding = vocab_rows * d
    output_head = 0 if model.tie_embeddings else vocab_rows * d
    positions = max_seq_len * d if model.position == "learned" else 0
    embedding = token_embedding + output_head + positions
    non_embedding = layers_total + norm + (norm if model.embedding_norm else 0)
    total = non_embedding + embedding
    active = total - sparse * skipped
    mtp_block = moe_layer if model.moe is not None and model.layers >= model.moe.dense_layers else dense_layer
    mtp_module = 3 * norm + 2 * d * d + mtp_block
    mtp = model.mtp.depth * mtp_module if model.mtp is not None else 0
    # the LM head is a matmul whether tied or not; each MTP module runs its block and the head again
    mtp_matmul = (
        model.mtp.depth * (mtp_module - skipped * (mtp_block == moe_layer) + vocab_rows * d) if model.mtp else 0
    )
    matmul = active - embedding + vocab_rows * d + mtp_matmul
    per_layer = max(dense_layer, moe_layer) if sparse else dense_layer
    return ParamCounts(
        total,
        embedding,
        non_embedding,
        per_layer,
        matmul,
        active,
        layers_total,
        sparse * routed,
        routed if sparse else 0,
        mtp,
    )
