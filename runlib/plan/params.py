"""Parameter counts of a decoder-only transformer, exact for Llama-, GPT-2-, Pythia- and OLMo-style blocks.

Per layer (auditor.md 2.1; Kaplan et al. 2020, arXiv 2001.08361, Table 1 for the split):
  attention  d*(a*hd) [q] + 2*d*(kv*hd) [k, v] + (a*hd)*d [o]   (+ a*hd + 2*kv*hd + d biases)
  mlp        3*d*f (SwiGLU, Shazeer 2020) or 2*d*f (GELU)        (+ f + d biases; SwiGLU: 2f + d)
  norms      2 per layer: d each (RMSNorm) or 2d (LayerNorm with bias)
  qk-norm    a*hd + kv*hd (OLMo 2, arXiv 2501.00656: RMSNorm over the full q and k projections)
plus a final norm, the token embedding V*d, an output head V*d unless tied, and s_max*d learned positions.
"Embedding" parameters are the token and position tables and an untied output head; the rest is
"non-embedding" (Kaplan's N).
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


def count_params(model: ModelSpec, vocab_rows: int, max_seq_len: int) -> ParamCounts:
    d, f, hd = model.d_model, model.d_ff, head_dim(model)
    q_width, kv_width = model.heads * hd, kv_heads(model) * hd
    attention = d * q_width + 2 * d * kv_width + q_width * d
    mlp = (3 if model.activation == "swiglu" else 2) * d * f
    if model.bias:
        attention += q_width + 2 * kv_width + d
        mlp += (2 * f if model.activation == "swiglu" else f) + d
    norm = d * (2 if model.norm == "layernorm" and model.bias else 1)
    qk_norm = q_width + kv_width if model.qk_norm else 0
    per_layer = attention + mlp + 2 * norm + qk_norm

    token_embedding = vocab_rows * d
    output_head = 0 if model.tie_embeddings else vocab_rows * d
    positions = max_seq_len * d if model.position == "learned" else 0
    embedding = token_embedding + output_head + positions
    non_embedding = model.layers * per_layer + norm
    total = non_embedding + embedding
    matmul = non_embedding + vocab_rows * d  # the LM head is a matmul whether tied or not
    return ParamCounts(total, embedding, non_embedding, per_layer, matmul)
