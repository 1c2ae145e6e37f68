"""The normalisation layers a ModelSpec names (model.norm): RMSNorm, LayerNorm with or without a bias,
and Megatron's LayerNorm-1p."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runlib.plan.params import norm_has_bias
from runlib.spec.models import ModelSpec

NORM_EPS = 1e-5


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), computed in float32."""

    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)


class LayerNorm1P(nn.LayerNorm):
    """LayerNorm scaled by 1 + weight, the weight starting at 0 (Megatron-LM's apply_layernorm_1p,
    megatron/core/fusions/fused_layer_norm.py; Nemotron-4): the scale stored as its offset from 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight + 1.0, self.bias, self.eps)


def make_norm(model: ModelSpec, dim: int) -> nn.Module:
    if model.norm == "rmsnorm":
        return RMSNorm(dim)
    if model.norm == "layernorm1p":
        return LayerNorm1P(dim, eps=NORM_EPS, bias=norm_has_bias(model))
    return nn.LayerNorm(dim, eps=NORM_EPS, bias=norm_has_bias(model))
