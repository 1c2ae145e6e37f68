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
    total: int
    embedding: int
    non_embedding: int
    per_layer: int
    matmul: int  # parameters used in matmuls per token: everything but the input lookup tables (LM head included)


def head_dim(model: ModelSpec) -> int:
    return model.head_dim or model.d_model // model.heads


def kv_heads(model: ModelSpec) -> int:
    return model.kv_heads or model.heads


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
    """The dimensions of each head RoPE rotates (model.rope_fraction of head_dim)."""
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


def count_params(model: ModelSpec, vocab_rows: int, max_seq_len: int) -> ParamCounts:
    d, f, hd = model.d_model, model.d_ff, head_dim(model)
    q_width, kv_width = model.heads * hd, kv_heads(model) * hd
    attention = d * q_width + 2 * d * kv_width + q_width * d
    mlp = (3 if gated_mlp(model) else 2) * d * f
    if qkv_has_bias(model):
        attention += q_width + 2 * kv_width
    if model.bias:
        attention += d
        mlp += (2 * f if gated_mlp(model) else f) + d
    norm = d * (2 if norm_has_bias(model) else 1)
    qk_norm = sum(qk_norm_widths(model))
    relative = d * q_width + 2 * q_width if model.position == "relative" else 0
    per_layer = attention + mlp + norms_per_layer(model) * norm + qk_norm + relative

    token_embedding = vocab_rows * d
    output_head = 0 if model.tie_embeddings else vocab_rows * d
    positions = max_seq_len * d if model.position == "learned" else 0
    embedding = token_embedding + output_head + positions
    non_embedding = model.layers * per_layer + norm + (norm if model.embedding_norm else 0)
    total = non_embedding + embedding
    matmul = non_embedding + vocab_rows * d  # the LM head is a matmul whether tied or not
    return ParamCounts(total, embedding, non_embedding, per_layer, matmul)
