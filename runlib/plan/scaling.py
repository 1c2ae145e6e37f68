"""Compute-optimal references from published fits (auditor.md 2.5).

- Chinchilla (Hoffmann et al. 2022, arXiv 2203.15556, Table 3): ~20 training tokens per parameter.
- Besiroglu et al. 2024 (arXiv 2404.10102) refit of Chinchilla's Approach 3: E=1.8172, A=482.01,
  B=2085.43, alpha=0.3478, beta=0.3658; N_opt = G*(C/6)^a, D_opt = (C/6)^b / G,
  G = (alpha*A/(beta*B))^(1/(alpha+beta)), a = beta/(alpha+beta), b = alpha/(alpha+beta).
- DeepSeek LLM (arXiv 2401.02954, eq. 1): eta_opt = 0.3118*C^-0.1250, B_opt = 0.2920*C^0.3271 tokens,
  with C = M*D and M the non-embedding FLOPs per token (6*N_non_embedding + 6*L*d_attn*s, their
  72*L*h^2 + 6*L*h*s generalised).
"""

from __future__ import annotations

from dataclasses import dataclass

from runlib.plan.params import ParamCounts, head_dim
from runlib.spec.models import ModelSpec

CHINCHILLA_TOKENS_PER_PARAM = 20.0
REFIT_E, REFIT_A, REFIT_B, REFIT_ALPHA, REFIT_BETA = 1.8172, 482.01, 2085.43, 0.3478, 0.3658


@dataclass(frozen=True, slots=True)
class References:
    tokens_per_param: float
    chinchilla_tokens_per_param: float
    optimal_params: float  # Besiroglu refit, at this run's FLOPs
    optimal_tokens: float
    deepseek_compute: float  # C = M * D
    optimal_batch_tokens: float  # DeepSeek B_opt
    optimal_lr: float  # DeepSeek eta_opt
    predicted_loss: float  # refit L(N, D) at this run's N and D


def refit_optimum(compute_flops: float) -> tuple[float, float]:
    """(N_opt, D_opt) for training compute C = 6*N*D under the Besiroglu et al. refit."""
    a = REFIT_BETA / (REFIT_ALPHA + REFIT_BETA)
    b = REFIT_ALPHA / (REFIT_ALPHA + REFIT_BETA)
    g = (REFIT_ALPHA * REFIT_A / (REFIT_BETA * REFIT_B)) ** (1 / (REFIT_ALPHA + REFIT_BETA))
    return g * (compute_flops / 6) ** a, (compute_flops / 6) ** b / g


def deepseek_optimal_batch_tokens(compute: float) -> float:
    return 0.2920 * compute**0.3271


def deepseek_optimal_lr(compute: float) -> float:
    return 0.3118 * compute**-0.1250


def references(params: ParamCounts, tokens: float, flops_total: float, model: ModelSpec, seq_len: int) -> References:
    n = max(params.total, 1)
    d = max(tokens, 1.0)
    n_opt, d_opt = refit_optimum(max(flops_total, 1.0))
    m = 6.0 * params.non_embedding + 6.0 * model.layers * model.heads * head_dim(model) * seq_len
    c_ds = max(m * d, 1.0)
    loss = REFIT_E + REFIT_A / n**REFIT_ALPHA + REFIT_B / d**REFIT_BETA
    return References(
        tokens_per_param=d / n,
        chinchilla_tokens_per_param=CHINCHILLA_TOKENS_PER_PARAM,
        optimal_params=n_opt,
        optimal_tokens=d_opt,
        deepseek_compute=c_ds,
        optimal_batch_tokens=deepseek_optimal_batch_tokens(c_ds),
        optimal_lr=deepseek_optimal_lr(c_ds),
        predicted_loss=loss,
    )
