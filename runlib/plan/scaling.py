"""Compute-optimal references from published fits (auditor.md 2.5).

- Chinchilla (Hoffmann et al. 2022, arXiv 2203.15556, Table 3): ~20 training tokens per parameter.
- Besiroglu et al. 2024 (arXiv 2404.10102) refit of Chinchilla's Approach 3: E=1.8172, A=482.01,
  B=2085.43, alpha=0.3478, beta=0.3658; N_opt = G*(C/6)^a, D_opt = (C/6)^b / G,
  G = (alpha*A/(beta*B))^(1/(alpha+beta)), a = beta/(alpha+beta), b = alpha/(alpha+beta).
- DeepSeek LLM (arXiv 2401.02954, eq. 1): eta_opt = 0.3118*C^-0.1250, B_opt = 0.2920*C^0.3271 tokens,
  with C = M*D and M the non-embedding FLOPs per token (6*N_non_embedding + 6*L*d_attn*s, their
  72*L*h^2 + 6*L*h*s generalised).

The refit's loss L(N, D) = E + A/N^alpha + B/D^beta is shown only where it was fitted: Hoffmann et
al. 2022 (abstract) trained "over 400 language models ranging from 70 million to over 16 billion
parameters on 5 to 500 billion tokens", and the refit is fitted to a reconstruction of those
models' losses (Besiroglu et al. 2024, introduction). Outside that box it extrapolates a power law
(a 1.3M-parameter model on 2M tokens gets 15.7 nats, nearly twice ln(4096) = 8.3, the loss of
guessing uniformly over its vocabulary), and it is never shown at or above ln(vocabulary). Inside,
it is in nats per token of Chinchilla's data and tokenizer (MassiveText with Gopher's 32,000-token
SentencePiece vocabulary: Rae et al. 2021, arXiv 2112.11446), not of this run's: it ranks runs
rather than predicts this run's loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runlib.plan.params import ParamCounts, head_dim
from runlib.spec.models import ModelSpec
from runlib.spec.units import format_count

CHINCHILLA_TOKENS_PER_PARAM = 20.0
REFIT_E, REFIT_A, REFIT_B, REFIT_ALPHA, REFIT_BETA = 1.8172, 482.01, 2085.43, 0.3478, 0.3658
# the models the fit saw (Hoffmann et al. 2022, abstract: "70 million to over 16 billion parameters
# on 5 to 500 billion tokens")
FIT_PARAMS_RANGE = (70e6, 16e9)
FIT_TOKENS_RANGE = (5e9, 500e9)


@dataclass(frozen=True, slots=True)
class References:
    tokens_per_param: float
    chinchilla_tokens_per_param: float
    optimal_params: float  # Besiroglu refit, at this run's FLOPs
    optimal_tokens: float
    deepseek_compute: float  # C = M * D
    optimal_batch_tokens: float  # DeepSeek B_opt
    optimal_lr: float  # DeepSeek eta_opt
    predicted_loss: float | None  # refit L(N, D) at this run's N and D; None outside the fitted range
    predicted_loss_note: str = ""  # why it is not shown, or what its unit is
    extrapolated_loss: float = math.nan  # the formula's value even where it is not shown


@dataclass(frozen=True, slots=True)
class LossPrediction:
    value: float | None  # None: not shown (see note)
    formula: float  # E + A/N^alpha + B/D^beta, wherever N and D are
    note: str


def refit_loss(params: float, tokens: float) -> float:
    """The Besiroglu et al. refit L(N, D) in nats per token (Chinchilla's data and tokenizer)."""
    return float(REFIT_E + REFIT_A / max(params, 1.0) ** REFIT_ALPHA + REFIT_B / max(tokens, 1.0) ** REFIT_BETA)


def _span(lo: float, hi: float) -> str:
    return f"{format_count(lo)}-{format_count(hi)}"


def predict_loss(params: float, tokens: float, vocab_size: int | None = None) -> LossPrediction:
    """The refit's loss at (params, tokens), shown only inside the fitted range and below ln(vocab_size)."""
    formula = refit_loss(params, tokens)
    outside = []
    if not FIT_PARAMS_RANGE[0] <= params <= FIT_PARAMS_RANGE[1]:
        outside.append(f"{format_count(params)} parameters (fitted {_span(*FIT_PARAMS_RANGE)})")
    if not FIT_TOKENS_RANGE[0] <= tokens <= FIT_TOKENS_RANGE[1]:
        outside.append(f"{format_count(tokens)} tokens (fitted {_span(*FIT_TOKENS_RANGE)})")
    uniform = math.log(vocab_size) if vocab_size and vocab_size > 1 else math.inf
    above = formula >= uniform
    if outside or above or not math.isfinite(formula):
        reasons = []
        if outside:
            reasons.append("this run is outside the range the fit saw: " + " and ".join(outside))
        if above:
            reasons.append(
                f"the formula gives {formula:.2f}, not below ln({vocab_size}) = {uniform:.2f}, "
                "the loss of a uniform guess over the vocabulary"
            )
        return LossPrediction(None, formula, "not shown: " + "; ".join(reasons))
    return LossPrediction(
        formula, formula, "nats per token on Chinchilla's data and 32K tokenizer: compares runs, not this run's loss"
    )


def refit_optimum(compute_flops: float) -> tuple[float, float]:
    """(N_opt, D_opt) for training compute C = 6*N*D under the Besiroglu et al. refit."""
    a = REFIT_BETA / (REFIT_ALPHA + REFIT_BETA)
    b = REFIT_ALPHA / (REFIT_ALPHA + REFIT_BETA)
    g = (REFIT_ALPHA * REFIT_A / (REFIT_BETA * REFIT_B)) ** (1 / (REFIT_ALPHA + REFIT_BETA))
    return g * (compute_flops / 6) ** a, (compute_flops / 6) ** b / g


def deepseek_optimal_batch_tokens(compute: float) -> float:
    return float(0.2920 * compute**0.3271)


def deepseek_optimal_lr(compute: float) -> float:
    return float(0.3118 * compute**-0.1250)


def references(
    params: ParamCounts,
    tokens: float,
    flops_total: float,
    model: ModelSpec,
    seq_len: int,
    vocab_size: int | None = None,
) -> References:
    """vocab_size: the ids the model predicts over (default model.vocab_size): bounds the predicted loss."""
    n = max(params.total, 1)
    d = max(tokens, 1.0)
    n_opt, d_opt = refit_optimum(max(flops_total, 1.0))
    m = 6.0 * params.non_embedding + 6.0 * model.layers * model.heads * head_dim(model) * seq_len
    c_ds = max(m * d, 1.0)
    prediction = predict_loss(n, d, vocab_size or model.vocab_size)
    return References(
        tokens_per_param=d / n,
        chinchilla_tokens_per_param=CHINCHILLA_TOKENS_PER_PARAM,
        optimal_params=n_opt,
        optimal_tokens=d_opt,
        deepseek_compute=c_ds,
        optimal_batch_tokens=deepseek_optimal_batch_tokens(c_ds),
        optimal_lr=deepseek_optimal_lr(c_ds),
        predicted_loss=prediction.value,
        predicted_loss_note=prediction.note,
        extrapolated_loss=prediction.formula,
    )
