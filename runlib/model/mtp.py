"""Multi-token prediction (model.mtp), DeepSeek-V3 (arXiv 2412.19437 section 2.2), written to be read.

    mtp = MultiTokenPrediction(model_spec, block_factory)      # block_factory() -> a block(x, rope, mask)
    loss = mtp(h, embed_fn, head_fn, input_ids, targets, rope, mask, doc_ids)   # a scalar: the mean of
                                                                               # the modules' losses
    total = main_loss + model_spec.mtp.loss_weight * loss

`depth` modules run one after the other, module k (1..depth) with its own
  enorm, hnorm   norms of the embedding and of the previous hidden state (model.norm: RMSNorm in DeepSeek-V3)
  eh_proj        a bias-free 2 d_model -> d_model projection of their concatenation
  block          one transformer block (the caller's class: a dense block, or an MoE one past
                 moe.dense_layers as DeepSeek-V3's), causal with the main model's rope and mask
  norm           the norm before the output head (DeepSeek-V3's shared_head.norm)
and the main model's embedding (embed_fn) and output head (head_fn), shared.

The shift, in 0-based positions: input_ids [n, L] are t_0 .. t_{L-1} and targets [n, L] the main model's
next-token targets, targets[:, i] = t_{i+1} (ignore_index where there is none). h = h^0 [n, L, d] is the
main model's last block's output before its final norm (Megatron-LM's multi_token_prediction.py feeds
that; the paper's "representation given by the main model"). Module k at position i combines h^{k-1}_i
with Emb(t_{i+k}) = embed_fn(input_ids[:, i + k]) (eq. 21), runs its block (eq. 22: h^k) and predicts
t_{i+k+1} = targets[:, i + k] through norm and head_fn (eq. 23-24). The last k positions of a row have no
t_{i+k}: their input is token 0 and their target ignore_index, so each module's loss is the mean
cross-entropy over the positions 0 .. L-k-1 that have a target (L_MTP^k, eq. 24), and a position whose
t_{i+k} lies in another document (doc_ids) is ignored too. As the block is causal, the padded tail feeds
no position that has a target. The concatenation is [enorm(Emb(t_{i+k})); hnorm(h_i)], embedding first,
as DeepSeek's released MTP weights are laid out (SGLang's DeepseekModelNextN, Megatron-LM), where the
paper's eq. 21 writes h first.

Whole rows only: under context parallelism a rank's tokens are not contiguous and the shift needs the
rows gathered first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runlib.model.norms import make_norm
from runlib.spec.models import ModelSpec

IGNORE_INDEX = -100  # torch.nn.functional.cross_entropy's default


class MTPModule(nn.Module):
    """One multi-token prediction module: enorm, hnorm, eh_proj, block, norm (module docstring)."""

    def __init__(self, model: ModelSpec, block: nn.Module) -> None:
        super().__init__()
        d = model.d_model
        self.enorm = make_norm(model, d)
        self.hnorm = make_norm(model, d)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.block = block
        self.norm = make_norm(model, d)

    def forward(self, h: torch.Tensor, embedded: torch.Tensor, rope: Any, mask: Any) -> torch.Tensor:
        """h^{k-1} [n, L, d] and Emb(t_{i+k}) [n, L, d] -> h^k [n, L, d] (eq. 21-22)."""
        combined = self.eh_proj(torch.cat([self.enorm(embedded), self.hnorm(h)], dim=-1))
        out: torch.Tensor = self.block(combined, rope, mask)
        return out


def shifted(rows: torch.Tensor, k: int, fill: int) -> torch.Tensor:
    """rows [n, L] moved k positions left, the last k filled with `fill`: out[:, i] = rows[:, i + k]."""
    tail = rows.new_full((rows.shape[0], min(k, rows.shape[1])), fill)
    return torch.cat([rows[:, k:], tail], dim=1)


class MultiTokenPrediction(nn.Module):
    """model.mtp.depth MTPModules; forward returns the mean of their cross-entropy losses."""

    def __init__(self, model: ModelSpec, block_factory: Callable[[], nn.Module]) -> None:
        super().__init__()
        if model.mtp is None:
            raise ValueError("MultiTokenPrediction needs model.mtp")
        self.depth = model.mtp.depth
        self.layers = nn.ModuleList(MTPModule(model, block_factory()) for _ in range(self.depth))
        self.module_losses = torch.zeros(self.depth)  # the last forward's loss of each module, detached

    def forward(
        self,
        h: torch.Tensor,
        embed_fn: Callable[[torch.Tensor], torch.Tensor],
        head_fn: Callable[[torch.Tensor], torch.Tensor],
        input_ids: torch.Tensor,
        targets: torch.Tensor,
        rope: Any = None,
        mask: Any = None,
        doc_ids: torch.Tensor | None = None,
        ignore_index: int = IGNORE_INDEX,
    ) -> torch.Tensor:
        """The mean over the modules of their mean cross-entropy (module docstring: shapes and shift).
        embed_fn(ids [n, L]) -> [n, L, d] (the main model's embedding, its multiplier included);
        head_fn(x [n, L, d]) -> logits [n, L, V] (the main model's head, its soft-cap included)."""
        losses = []
        for k, module in enumerate(self.layers, start=1):
            assert isinstance(module, MTPModule)
            h = module(h, embed_fn(shifted(input_ids, k, 0)), rope, mask)
            target = shifted(targets, k, ignore_index)
            if doc_ids is not None:  # t_{i+k} of another document: nothing to predict from position i
                target = target.masked_fill(shifted(doc_ids, k, -1) != doc_ids, ignore_index)
            logits = head_fn(module.norm(h)).float()
            total = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=ignore_index, reduction="sum"
            )
            counted = (target != ignore_index).sum().clamp(min=1)
            losses.append(total / counted)
        loss = torch.stack(losses)
        self.module_losses = loss.detach()
        return loss.mean()
