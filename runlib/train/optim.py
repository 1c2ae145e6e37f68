"""The optimizer the spec names, over a (possibly parallelised) model.

    optimizer = build_optimizer(model, optimizer_cfg, precision)

`optimizer_cfg` has kind, lr, betas, eps, weight_decay (runlib.spec.models.OptimizerSpec);
`precision` has compute, master_weights, optimizer_states. Build it after
runlib.model.parallelize.parallelize, so that it holds the sharded (DTensor) parameters.
Weight decay is never applied to vectors (norm weights, biases: ndim < 2).

  * adamw: torch.optim.AdamW, decoupled weight decay (Loshchilov & Hutter 2019, arXiv 1711.05101).
  * adam: torch.optim.Adam with weight_decay, an L2 penalty added to the gradient (Kingma & Ba 2015).
  * adafactor: torch.optim.Adafactor (Shazeer & Stern 2018, arXiv 1804.04235): factored second
    moments, no first moment, lr caps the relative step (rho_t = min(lr, 1/sqrt(t))), decoupled
    weight decay; betas and eps are not read (torch's beta2 schedule t^-0.8 and eps (None, 1e-3)).
    Sharded (DTensor) parameters are updated whole, one at a time (GatheredAdafactor).
  * muon: torch.optim.Muon (Jordan et al. 2024, kellerjordan.github.io/posts/muon) on the 2-D
    matrices of the blocks, AdamW on the embeddings, the LM head, norms and biases, as "Muon is
    Scalable for LLM Training" (Liu et al. 2025, arXiv 2502.16982, section 2) does: momentum 0.95,
    Nesterov, 5 Newton-Schulz steps, and the paper's update scale 0.2 * sqrt(max(A, B))
    (adjust_lr_fn="match_rms_adamw"), so the spec's AdamW lr and weight decay apply to both parts
    unchanged. Under FSDP2/TP the Newton-Schulz iteration runs on the sharded DTensor gradient;
    DTensor's matmul gathers what it needs (exact, more traffic than Moonshot's distributed Muon).
  * lion: Lion (Chen et al. 2023, arXiv 2302.06675) from the lion-pytorch package when installed
    (betas, lr, decoupled weight decay); runlib does not depend on it, so without it: an error.

optimizer_states: torch's optimizers keep their states in the dtype of the parameters they update
(zeros_like(param)); their foreach kernels need one dtype per parameter and state. So the states are
bf16 exactly when the optimizer's parameters are bf16 (master_weights none with compute bf16), fp32
when they are fp32 (fp32 master weights, or fp32 compute). Any other request raises ValueError
(runlib.plan.enact refuses it, RUN007, before a job starts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate
from torch.optim._adafactor import adafactor

from runlib.spec.models import OptimizerSpec, PrecisionSpec

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MUON_MOMENTUM = 0.95  # Liu et al. 2025, section 2; Jordan et al. 2024


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _named_trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(name, p) for name, p in _unwrap(model).named_parameters() if p.requires_grad]  # tied: listed once


def decay_groups(
    params: list[nn.Parameter], weight_decay: float, exempt: frozenset[int] = frozenset(), **extra: Any
) -> list[dict[str, Any]]:
    """Decay on matrices (ndim >= 2, embeddings included unless their ids are `exempt`), none on vectors;
    empty groups dropped."""
    decay = [p for p in params if p.ndim >= 2 and id(p) not in exempt]
    no_decay = [p for p in params if p.ndim < 2 or id(p) in exempt]
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": weight_decay, **extra},
        {"params": no_decay, "weight_decay": 0.0, **extra},
    ]
    return [g for g in groups if g["params"]]


def embedding_parameters(model: nn.Module) -> frozenset[int]:
    """ids of the input embedding tables (nn.Embedding: token and learned positions)."""
    return frozenset(id(m.weight) for m in _unwrap(model).modules() if isinstance(m, nn.Embedding))


def muon_parameters(model: nn.Module) -> set[int]:
    """ids of the 2-D hidden matrices: linear weights other than the LM head (embeddings are not nn.Linear)."""
    root = _unwrap(model)
    head = getattr(root, "lm_head", None)
    skip = {id(head.weight)} if head is not None else set()
    skip |= {id(m.weight) for m in root.modules() if isinstance(m, nn.Embedding)}
    return {
        id(m.weight)
        for m in root.modules()
        if isinstance(m, nn.Linear) and m.weight.ndim == 2 and id(m.weight) not in skip and m.weight.requires_grad
    }


def check_state_dtype(model: nn.Module, precision: PrecisionSpec) -> None:
    dtypes = {p.dtype for _, p in _named_trainable(model)}
    wanted = DTYPES[precision.optimizer_states]
    if dtypes != {wanted}:
        held = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
        raise ValueError(
            f"precision.optimizer_states {precision.optimizer_states} cannot be enacted: torch optimizers keep "
            f"their states in the dtype of the parameters they update, here {held} (compute "
            f"{precision.compute}, master_weights {precision.master_weights})"
        )


class GatheredAdafactor(torch.optim.Adafactor):
    """torch.optim.Adafactor that also takes DTensor (FSDP2/TP-sharded) parameters.

    torch 2.13's Adafactor fails on a sharded DTensor (its in-place square_ of a partial column norm:
    "aten.pow_.Scalar: in-place operations that require placement changes are not supported"). Here
    each DTensor parameter and its gradient are gathered whole, torch's own single-tensor Adafactor
    arithmetic (torch.optim._adafactor.adafactor) updates the whole copy, and this rank keeps its
    shard of the result. The factored states (a row and a column vector per matrix) are small and
    kept whole on every rank; the gathered matrix lives for one parameter's update at a time."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            eps1, eps2 = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                sharded = isinstance(p, DTensor)
                full, grad = (p.full_tensor(), p.grad.full_tensor()) if sharded else (p, p.grad)
                state = self.state[p]
                if not state:  # as torch.optim.Adafactor._init_group, on the whole shapes
                    state["step"] = torch.tensor(0.0)
                    if grad.dim() > 1:
                        state["row_var"] = grad.new_zeros((*grad.shape[:-1], 1))
                        state["col_var"] = grad.new_zeros((*grad.shape[:-2], 1, grad.shape[-1]))
                    else:
                        state["variance"] = torch.zeros_like(grad)
                adafactor(
                    [full],
                    [grad],
                    [state.get("row_var")],
                    [state.get("col_var")],
                    [state.get("variance")],
                    [state["step"]],
                    foreach=False,
                    d=group["d"],
                    lr=group["lr"],
                    beta2_decay=group["beta2_decay"],
                    weight_decay=group["weight_decay"],
                    eps1=eps1,
                    eps2=eps2,
                    maximize=group["maximize"],
                )
                if sharded:  # Replicate -> the parameter's placements slices locally, without traffic
                    whole = DTensor.from_local(full, p.device_mesh, [Replicate()] * p.device_mesh.ndim, run_check=False)
                    p.to_local().copy_(whole.redistribute(p.device_mesh, p.placements).to_local())
        return loss


class MuonWithAdamW(torch.optim.Optimizer):
    """One optimizer object (one state_dict, one param_groups list for the LR schedule) over two:
    torch.optim.Muon for the hidden matrices, torch.optim.AdamW for the rest. The groups and the state
    are the inner optimizers' own objects, re-linked after load_state_dict."""

    def __init__(
        self,
        muon_groups: list[dict[str, Any]],
        adamw_groups: list[dict[str, Any]],
        muon_kwargs: dict[str, Any],
        adamw_kwargs: dict[str, Any],
    ) -> None:
        self.muon = torch.optim.Muon(muon_groups, **muon_kwargs)
        self.adamw = torch.optim.AdamW(adamw_groups, **adamw_kwargs)
        self._n_muon = len(self.muon.param_groups)
        super().__init__([{"params": []}], {})  # hooks and bookkeeping of torch.optim.Optimizer
        self._link(self.muon.param_groups + self.adamw.param_groups)

    def _link(self, groups: list[dict[str, Any]]) -> None:
        self.param_groups = groups
        self.muon.param_groups, self.adamw.param_groups = groups[: self._n_muon], groups[self._n_muon :]
        self.muon.state = self.adamw.state = self.state

    def __setstate__(self, state: dict[str, Any]) -> None:  # load_state_dict ends here with fresh group dicts
        super().__setstate__(state)
        if hasattr(self, "muon"):
            self._link(self.param_groups)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()  # type: ignore[no-untyped-call]
        self.adamw.step()
        return loss


def build_optimizer(model: nn.Module, optimizer_cfg: OptimizerSpec, precision: PrecisionSpec) -> torch.optim.Optimizer:
    """The optimizer of optimizer_cfg.kind over the model's trainable parameters (see the module docstring)."""
    check_state_dtype(model, precision)
    kind, lr, wd = optimizer_cfg.kind, optimizer_cfg.lr, optimizer_cfg.weight_decay
    betas, eps = optimizer_cfg.betas, optimizer_cfg.eps
    params = [p for _, p in _named_trainable(model)]
    exempt = frozenset() if optimizer_cfg.decay_embeddings else embedding_parameters(model)
    if kind == "adamw":
        return torch.optim.AdamW(decay_groups(params, wd, exempt), lr=lr, betas=betas, eps=eps)
    if kind == "adam":
        return torch.optim.Adam(decay_groups(params, wd, exempt), lr=lr, betas=betas, eps=eps)
    if kind == "adafactor":
        return GatheredAdafactor(decay_groups(params, wd, exempt), lr=lr)
    if kind == "muon":
        hidden = muon_parameters(model)
        muon = [p for p in params if id(p) in hidden]
        rest = [p for p in params if id(p) not in hidden]
        return MuonWithAdamW(
            [{"params": muon, "weight_decay": wd}],
            decay_groups(rest, wd, exempt),
            dict(lr=lr, momentum=MUON_MOMENTUM, nesterov=True, adjust_lr_fn="match_rms_adamw"),
            dict(lr=lr, betas=betas, eps=eps),
        )
    if kind == "lion":
        try:
            from lion_pytorch import Lion
        except ImportError:
            raise ValueError(
                "optimizer.kind lion cannot be enacted: torch ships no Lion and the lion-pytorch package "
                "is not installed; use adamw, adam, adafactor or muon"
            ) from None
        lion: torch.optim.Optimizer = Lion(decay_groups(params, wd, exempt), lr=lr, betas=betas)
        return lion
    raise ValueError(f"optimizer.kind {kind!r}: expected adamw, adam, adafactor, muon or lion")
