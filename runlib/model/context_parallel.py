"""Context parallelism: one sequence's tokens over the ranks of a context-parallel group.

    cp = ContextParallel(group)                 # the mesh's "cp" dimension
    idx = cp.query_index(L)                     # the global positions this rank computes, [L / cp]
    keys = cp.key_index(L)                      # the positions of the gathered keys, in gathered order
    k_all = cp.gather(k, dim=2)                 # keys (or values) of every rank: autograd all-gather

The all-gather form of Llama 3 (Dubey et al. 2024, arXiv 2407.21783, section 3.3.2): each layer
computes q, k and v for its own tokens, all-gathers k and v over the group and attends with its local
queries to every key. The sequence is cut into 2 x cp chunks and rank r holds chunk r and chunk
2cp - 1 - r, so every rank holds one early and one late chunk and the causal work is balanced (a
rank holding only the last chunk would attend to the whole sequence, the first to nothing). The
keys are not reordered after the gather: attention does not care about the order of its keys, so
the mask (a query at i reads a key at j of the same document with j <= i) is written over the
gathered order with key_index. The gather's backward sums every rank's gradient of the gathered
tensor and gives each rank its own part (a reduce-scatter; gloo has it in torch 2.13).

Each rank computes the loss of its own tokens; the data-parallel wrapper averages gradients over the
data-parallel and context-parallel ranks together (torchtitan's dp_shard_cp mesh,
torchtitan/distributed/parallel_dims.py; Megatron-LM's data-parallel group with context parallelism),
so the step's normalization counts every rank's tokens once (runlib.train.step).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def load_balanced_index(length: int, cp: int, rank: int) -> torch.Tensor:
    """The positions rank `rank` of `cp` holds of a sequence of `length`: chunk rank and chunk 2cp-1-rank of
    2cp equal chunks (ValueError when 2cp does not divide length)."""
    if length % (2 * cp):
        raise ValueError(f"context parallelism {cp}: sequence length {length} is not divisible by 2 x cp = {2 * cp}")
    chunk = length // (2 * cp)
    first = torch.arange(rank * chunk, (rank + 1) * chunk)
    last = torch.arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk)
    return torch.cat([first, last])


class _GatherAlong(torch.autograd.Function):
    """All-gather along `dim` over `group` (rank order); backward: reduce-scatter (sum) of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int, group: dist.ProcessGroup, size: int) -> torch.Tensor:
        ctx.dim, ctx.group, ctx.size = dim, group, size
        moved = x.movedim(dim, 0).contiguous()
        out = torch.empty((size * moved.shape[0], *moved.shape[1:]), dtype=x.dtype, device=x.device)
        dist.all_gather_single(out, moved, group=group)
        return out.movedim(0, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        moved = grad.movedim(ctx.dim, 0).contiguous()
        out = torch.empty((moved.shape[0] // ctx.size, *moved.shape[1:]), dtype=grad.dtype, device=grad.device)
        dist.reduce_scatter_single(out, moved, group=ctx.group)
        return out.movedim(0, ctx.dim), None, None, None


class ContextParallel:
    """This rank's place in its context-parallel group, and the group's collectives."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def query_index(self, length: int, device: torch.device | None = None) -> torch.Tensor:
        """The global positions of this rank's tokens of a sequence of `length` [length / size]."""
        return load_balanced_index(length, self.size, self.rank).to(device)

    def key_index(self, length: int, device: torch.device | None = None) -> torch.Tensor:
        """The global positions of the gathered keys [length]: every rank's query_index, in rank order."""
        return torch.cat([load_balanced_index(length, self.size, r) for r in range(self.size)]).to(device)

    def local(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's tokens of rows [n, L, ...]: rows[:, query_index(L)]."""
        return rows.index_select(1, self.query_index(rows.shape[1], rows.device))

    def gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's x along `dim`, in rank order; gradients flow back to the rank that computed them."""
        out: torch.Tensor = _GatherAlong.apply(x, dim, self.group, self.size)  # type: ignore[no-untyped-call]
        return out
