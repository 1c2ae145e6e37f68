"""Training FLOPs per token, with the convention named.

The figure the plan uses (`CONVENTION`) is PaLM's (Chowdhery et al. 2022, arXiv 2204.02311, App. B),
also nanoGPT's and torchtitan's: 6*N_matmul + 12*L*d_attn*s per token, forward and backward, with
the attention scores counted in full (no causal discount). N_matmul includes the LM head and
excludes the input embedding lookup. Alongside it: Kaplan's 6*N (arXiv 2001.08361, context term
dropped) and Megatron's causal count 6*N_matmul + 6*L*d_attn*s (megatron/training/training.py).

Relative positions (Transformer-XL, Dai et al. 2019, section 3.3; Gopher) add one score matmul per layer,
the queries against the projected relative encodings (term (b) + (d) of the paper's A^rel), as large
as q k^T: 6*L*d_attn*s more per token in the PaLM convention (3*L*d_attn*s in the causal one); the
projection of the encodings is a matmul of its own parameters (counted in N_matmul, s rows per s
tokens). ALiBi's bias (Press et al. 2022) is an addition per score, no matmul: not counted; nor are
dropout and norms, as in PaLM's count.

Sliding-window layers (model.sliding_window: Mistral 7B, Gemma 2) score each query against at most the
window's keys: min(w, s) in the full count, and in the causal one the mean over queries of min(i, w),
(s + 1) / 2 without a window as Megatron's s / 2 approximates it.
"""

from __future__ import annotations

CONVENTION = "palm: 6*N_matmul + 12*L*d_attn*s per token (Chowdhery et al. 2022 App. B; no causal discount)"


def flops_per_token(
    matmul_params: int,
    layers: int,
    attn_width: float,
    seq_len: int,
    relative_positions: bool = False,
    window: int | None = None,
    windowed_layers: int = 0,
) -> float:
    """PaLM convention, fwd+bwd; `windowed_layers` of the layers attend to `window` keys at most."""
    scores = 18.0 if relative_positions else 12.0
    keys = (layers - windowed_layers) * seq_len + windowed_layers * min(window or seq_len, seq_len)
    return 6.0 * matmul_params + scores * attn_width * keys


def causal_mean_keys(seq_len: int, window: int | None = None) -> float:
    """The mean over a sequence's queries of the keys a causal (windowed) query sees: mean of min(i, w)."""
    w = min(window or seq_len, seq_len)
    return (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len


def flops_per_token_causal(
    matmul_params: int,
    layers: int,
    attn_width: float,
    seq_len: int,
    relative_positions: bool = False,
    window: int | None = None,
    windowed_layers: int = 0,
) -> float:
    """Megatron convention: attention scores halved by the causal mask (s / 2 keys per query; a windowed
    layer's mean of min(i, w) over its windowed share, the same halving applied)."""
    scores = 9.0 if relative_positions else 6.0
    if not windowed_layers:
        return 6.0 * matmul_params + scores * layers * attn_width * seq_len
    # the windowed layers' keys, relative to a full causal layer's (s + 1) / 2
    share = causal_mean_keys(seq_len, window) / causal_mean_keys(seq_len)
    keys = (layers - windowed_layers) * seq_len + windowed_layers * seq_len * share
    return 6.0 * matmul_params + scores * attn_width * keys


def flops_per_token_kaplan(non_embedding_params: int) -> float:
    """Kaplan et al. 2020: C = 6*N*D with N the non-embedding parameters."""
    return 6.0 * non_embedding_params
