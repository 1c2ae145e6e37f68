"""An auxiliary loss whose gradient rides on a module's output (Megatron-LM's MoEAuxLossAutoScaler,
megatron/core/transformer/moe/moe_utils.py): the forward returns the output unchanged and the backward
passes the output's gradient through and gives the auxiliary loss the gradient `scale`, as if
scale x aux_loss had been added to the loss.

So an MoE layer's balancing and z-losses need no path of their own from the loss: computed inside a block
that is recomputed in the backward (activation checkpointing, the op-level selective policy included),
they are backpropagated with the block's output, once, instead of through a second way into the region
(which selective checkpointing refuses: "Trying to backward an extra time").
"""

from __future__ import annotations

from typing import Any

import torch


class _ScaleAuxLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, output: torch.Tensor, aux_loss: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale, ctx.aux_shape, ctx.aux_dtype = scale, aux_loss.shape, aux_loss.dtype
        return output.view_as(output)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        aux_grad = torch.full(ctx.aux_shape, ctx.scale, dtype=ctx.aux_dtype, device=grad_output.device)
        return grad_output, aux_grad, None


def with_aux_loss(output: torch.Tensor, aux_loss: torch.Tensor, scale: float) -> torch.Tensor:
    """`output`, carrying scale x aux_loss into the backward (module docstring)."""
    out: torch.Tensor = _ScaleAuxLoss.apply(output, aux_loss, scale)  # type: ignore[no-untyped-call]
    return out
