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
"""

from __future__ import annotations

CONVENTION = "palm: 6*N_matmul + 12*L*d_attn*s per token (Chowdhery et al. 2022 App. B; no causal discount)"


def flops_per_token(
    matmul_params: int, layers: int, attn_width: int, seq_len: int, relative_positions: bool = False
) -> float:
    """PaLM convention, fwd+bwd."""
    scores = 18.0 if relative_positions else 12.0
    return 6.0 * matmul_params + scores * layers * attn_width * seq_len


def flops_per_token_causal(
    matmul_params: int, layers: int, attn_width: int, seq_len: int, relative_positions: bool = False
) -> float:
    """Megatron convention: attention scores halved by the causal mask."""
    scores = 9.0 if relative_positions else 6.0
    return 6.0 * matmul_params + scores * layers * attn_width * seq_len


def flops_per_token_kaplan(non_embedding_params: int) -> float:
    """Kaplan et al. 2020: C = 6*N*D with N the non-embedding parameters."""
    return 6.0 * non_embedding_params
