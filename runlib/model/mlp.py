"""The dense MLP of a block (and of a mixture's shared experts)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runlib.plan.params import gated_mlp
from runlib.spec.models import ModelSpec


class MLP(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x) (Shazeer 2020), GeGLU the same with a tanh GELU; GELU, ReLU, squared
    ReLU: w2(act(w1 x))."""

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        d, f = model.d_model, model.d_ff
        self.activation = model.activation
        self.gated = gated_mlp(model)  # SwiGLU or GeGLU: a gate (w1) and an up projection (w3)
        self.w1 = nn.Linear(d, f, bias=model.bias)
        self.w3 = nn.Linear(d, f, bias=model.bias) if self.gated else None
        self.w2 = nn.Linear(f, d, bias=model.bias)
        self.w2.residual_projection = True  # type: ignore[assignment]  # a marker for reset_parameters (as wo's)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w1(x)
        if self.w3 is not None:
            gate = F.silu(h) if self.activation == "swiglu" else F.gelu(h, approximate="tanh")  # GeGLU: tanh GELU
            h = gate * self.w3(x)
        elif self.activation == "relu":
            h = F.relu(h)
        elif self.activation == "relu2":  # squared ReLU (So et al. 2021, section 4)
            h = F.relu(h).square()
        else:
            h = F.gelu(h)
        out: torch.Tensor = self.w2(h)
        return out
