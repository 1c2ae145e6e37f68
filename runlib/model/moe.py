"""Mixture-of-experts MLPs (model.moe), built from a ModelSpec, written to be read.

    moe = MoE(model_spec, ep_group=None, ep_mesh=None)
    y = moe(x [n, L, d]) -> [n, L, d]        # moe.aux_loss: what the trainer adds to the loss (or None)
    moe.tokens_per_expert                    # LongTensor [E]: the last forward's assignments per expert
    update_expert_bias(moe.router, counts, moe_spec.bias_update_rate)   # after the optimizer step

The parts, by the papers that introduced them:
  * token-choice top-k routing (Shazeer et al. 2017, arXiv 1701.06538; Switch Transformer, Fedus et al.
    2021, arXiv 2101.03961): a bias-free linear router d_model -> E, computed in float32 (as transformers'
    DeepseekV3TopkRouter and torchtitan's router); scores softmax over the experts (Switch, Mixtral, OLMoE,
    DeepSeek-V2) or a sigmoid per expert (DeepSeek-V3, arXiv 2412.19437 section 2.1.2 eq. 15); each token
    takes the top_k scores, and its weights are those scores (renormalized over the top_k when
    moe.normalize_top_k, which for softmax is Mixtral's softmax over the top-k logits) times
    moe.route_scale (DeepSeek-V3's routed_scaling_factor);
  * node-limited routing (DeepSeek-V2 section 2.1.3, V3 section 2.1.2): the experts fall in moe.groups
    equal groups, a group scores the sum of its two best scores for sigmoid (DeepSeek-V3's modeling code,
    transformers' DeepseekV3TopkRouter) or its best one for softmax (DeepSeek-V2's group_limited_greedy),
    and each token picks its top_k among the experts of its groups_per_token best groups;
  * auxiliary-loss-free balancing (DeepSeek-V3 section 2.1.2 eq. 16; Wang et al. 2024, arXiv 2408.15664):
    a bias per expert (the buffer `Router.expert_bias`, float32, zeros; transformers'
    e_score_correction_bias) added to the scores for the choice only, group scores included, never to the
    weights; `update_expert_bias` moves it by rate x sign(mean load - load) after each step;
  * the load-balancing loss (Switch eq. 4) alpha x E x sum_i f_i P_i, f_i the share of the T x top_k
    assignments that chose expert i (before any capacity drop) and P_i the mean over the tokens of the
    router probability of expert i: the softmax for a softmax router, and for a sigmoid router the scores
    normalized to sum to 1 per token (DeepSeek-V3 eq. 19). With moe.aux_loss_scope sequence, f_i and P_i
    are taken per sequence and the losses averaged over the sequences (DeepSeek-V3 eq. 17-20, whose
    f_i = E / (top_k T) x count_i makes the same alpha x E x sum_i share_i P_i);
  * the router z-loss (ST-MoE, Zoph et al. 2022, arXiv 2202.08906 eq. 5): coefficient x the mean over
    tokens of logsumexp(router logits)^2;
  * shared experts (DeepSeekMoE, Dai et al. 2024, arXiv 2401.06066 section 3.2): one dense MLP of
    moe.shared_d_ff (or shared_experts x expert_d_ff) hidden units every token passes through, scaled by
    sigmoid(shared_gate(x)) with moe.shared_gate (Qwen2-MoE's shared_expert_gate);
  * capacity (Switch section 2.2): with moe.capacity_factor, an expert takes at most
    ceil(capacity_factor x T x top_k / E) of the micro-batch's assignments, the earliest tokens first, and
    drops the rest (a dropped assignment adds nothing: the token keeps its residual and the other
    experts); without it dropless (MegaBlocks, Gale et al. 2022; OLMoE, DeepSeek-V3);
  * grouped GEMM experts (`GroupedExperts`): the expert weights are 3-D parameters [E, in, out] and the
    token copies, sorted by expert, go through torch._grouped_mm where it works for the device and dtype
    (a cached probe), else a loop over the experts' slices; the two agree (tests/model/test_moe.py);
  * expert parallelism (GShard, Lepikhin et al. 2020, arXiv 2006.16668 section 2.2): with an ep_group of
    ep ranks a rank holds experts rank x E/ep to (rank + 1) x E/ep - 1; the per-expert counts go through
    one all_to_all_single, the token copies through another (variable splits, autograd-aware: the
    backward sends the gradients back the other way), the local experts run, and a third all-to-all brings
    the outputs home. Router and shared experts are replicated: their gradients are summed by the
    data-parallel all-reduce as any replicated parameter's. Given an ep_mesh instead (the expert mesh of
    runlib.model.expert_parallel: dims ("edp", "ep")), the group is its "ep" dimension and the experts'
    weights are DTensors sharded Shard(0) over it (torchtitan's ExpertParallel,
    torchtitan/distributed/expert_parallel.py, shards GroupedExperts' w1/w2/w3 the same way): a checkpoint
    then holds each rank's experts as shards of one [E, ...] tensor, and the forward runs on the local ones.

Initialisation: the router and shared-expert linears are nn.Linear (Transformer.reset_parameters covers
them); GroupedExperts.reset_parameters(std, residual_std) draws w1 and w3 from N(0, std) and w2, which
writes into the residual stream, from N(0, residual_std), zero biases: Transformer.reset_parameters must
call it with INIT_STD and its residual std. It takes one seed from the global RNG (the same on every rank)
and draws expert e's weights from a generator of its own seeded from (that seed, e), so a rank holding
experts i..j under expert parallelism initialises exactly the rows i..j one process draws, and the global
RNG stream after it is the same whatever the layout.
"""

from __future__ import annotations

import concurrent.futures
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

from runlib.model.aux_loss import with_aux_loss
from runlib.model.mlp import MLP
from runlib.spec.models import ModelSpec, MoeSpec

INIT_STD = 0.02  # transformer.INIT_STD (GPT-2); the Transformer re-initialises with its own residual std


def activate(activation: str, h: torch.Tensor, up: torch.Tensor | None) -> torch.Tensor:
    """The MLP's nonlinearity as runlib.model.mlp.MLP applies it: SwiGLU silu(h) * up, GeGLU tanh-GELU(h) * up
    (Shazeer 2020), ReLU, squared ReLU (So et al. 2021) or exact GELU of h alone."""
    if up is not None:
        gate = F.silu(h) if activation == "swiglu" else F.gelu(h, approximate="tanh")
        return gate * up
    if activation == "relu":
        return F.relu(h)
    if activation == "relu2":
        return F.relu(h).square()
    return F.gelu(h)


# ----------------------------------------------------------------------------------------- routing


@dataclass(frozen=True, slots=True)
class Routing:
    """One forward's routing of T tokens over E experts, top_k each."""

    weights: torch.Tensor  # [T, k] float32: the selected scores (renormalized, times route_scale)
    experts: torch.Tensor  # [T, k] int64: the selected experts
    logits: torch.Tensor  # [T, E] float32: the router's logits (the z-loss's)
    probs: torch.Tensor  # [T, E] float32: per-token probabilities summing to 1 (the load-balancing loss's P)


class Router(nn.Module):
    """Token-choice top-k router (module docstring): a bias-free linear `gate` d_model -> E in float32."""

    expert_bias: torch.Tensor  # buffer [E], float32: the choice's balancing bias (DeepSeek-V3 eq. 16)
    tokens_per_expert: torch.Tensor  # [E] int64: the last forward's assignments per expert (detached)

    def __init__(self, d_model: int, moe: MoeSpec) -> None:
        super().__init__()
        self.experts, self.top_k, self.score = moe.experts, moe.top_k, moe.score
        self.normalize_top_k, self.route_scale = moe.normalize_top_k, moe.route_scale
        self.groups = moe.groups or 1
        self.groups_per_token = moe.groups_per_token or self.groups
        if self.experts % self.groups:
            raise ValueError(f"moe.groups {self.groups} does not divide moe.experts {self.experts}")
        reachable = self.groups_per_token * (self.experts // self.groups)
        if self.top_k > reachable:
            raise ValueError(
                f"moe.top_k {self.top_k} is above the {reachable} experts a token can reach "
                f"({self.groups_per_token} of {self.groups} groups of {self.experts} experts)"
            )
        self.gate = nn.Linear(d_model, self.experts, bias=False)
        self.register_buffer("expert_bias", torch.zeros(self.experts, dtype=torch.float32))
        self.tokens_per_expert = torch.zeros(self.experts, dtype=torch.long)

    def forward(self, x: torch.Tensor) -> Routing:
        """x [T, d] -> the Routing of its tokens; sets tokens_per_expert."""
        with torch.autocast(device_type=x.device.type, enabled=False):  # the router in float32 (autocast off)
            logits = F.linear(x.float(), self.gate.weight.float())
        if self.score == "softmax":
            scores = logits.softmax(dim=-1)
            probs = scores
        else:
            scores = logits.sigmoid()
            probs = scores / scores.sum(dim=-1, keepdim=True)  # DeepSeek-V3 eq. 19's normalized s'
        choice = scores.detach() + self.expert_bias  # the bias picks, it never weights (eq. 16)
        if self.groups_per_token < self.groups:
            choice = self.group_limited(choice)
        experts = choice.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, experts)
        if self.normalize_top_k:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if self.route_scale != 1.0:
            weights = weights * self.route_scale
        self.tokens_per_expert = torch.bincount(experts.flatten(), minlength=self.experts).detach()
        return Routing(weights, experts, logits, probs)

    def group_limited(self, choice: torch.Tensor) -> torch.Tensor:
        """choice [T, E] with the experts outside each token's groups_per_token best groups at -inf: a
        group scores the sum of its two best choice scores (sigmoid, DeepSeek-V3) or its best (softmax,
        DeepSeek-V2)."""
        grouped = choice.view(choice.shape[0], self.groups, -1)
        if self.score == "sigmoid":
            group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(dim=-1)
        else:
            group_scores = grouped.amax(dim=-1)
        best = group_scores.topk(self.groups_per_token, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
        return grouped.masked_fill(~keep[..., None], float("-inf")).view_as(choice)


def load_balancing_loss(probs: torch.Tensor, experts: torch.Tensor, alpha: float, sequences: int = 1) -> torch.Tensor:
    """alpha x E x sum_i f_i P_i (Switch eq. 4), probs [T, E], experts [T, k]: f_i the share of the T x k
    assignments to expert i, P_i the mean probability of expert i; with `sequences` > 1 the T tokens are
    that many equal sequences, f and P taken per sequence and the losses averaged (DeepSeek-V3 eq. 17-20).
    Only P carries a gradient (f counts a discrete choice)."""
    tokens, num_experts = probs.shape
    if tokens % sequences:
        raise ValueError(f"{tokens} tokens do not split into {sequences} sequences")
    assignments = experts.reshape(sequences, -1)
    counts = torch.zeros(sequences, num_experts, device=probs.device, dtype=torch.float32)
    counts.scatter_add_(1, assignments, torch.ones_like(assignments, dtype=torch.float32))
    share = counts / assignments.shape[1]  # f_i per sequence: sums to 1
    mean_prob = probs.reshape(sequences, -1, num_experts).mean(dim=1)  # P_i per sequence
    return alpha * num_experts * (share * mean_prob).sum(dim=-1).mean()


def z_loss(logits: torch.Tensor, coefficient: float) -> torch.Tensor:
    """coefficient x mean over tokens of logsumexp(logits)^2 (ST-MoE eq. 5), logits [T, E]."""
    return coefficient * torch.logsumexp(logits.float(), dim=-1).square().mean()


@torch.no_grad()
def update_expert_bias(router: Router, tokens_per_expert: torch.Tensor, rate: float) -> None:
    """DeepSeek-V3's auxiliary-loss-free update (section 2.1.2): b_i += rate x sign(mean load - load_i),
    lowering the bias of the overloaded experts and raising the underloaded ones'. tokens_per_expert [E]:
    the step's assignments per expert, summed over its micro-batches (and all-reduced over the
    data-parallel ranks by the caller)."""
    load = tokens_per_expert.to(router.expert_bias.device, torch.float32)
    router.expert_bias.add_(rate * torch.sign(load.mean() - load))


# ----------------------------------------------------------------------------------------- experts

_GROUPED_MM_WORKS: dict[tuple[str, int | None, torch.dtype, int, int], bool] = {}


def grouped_mm_works(device: torch.device, dtype: torch.dtype, d_model: int, d_ff: int) -> bool:
    """Whether torch._grouped_mm runs forward and backward for [*, d_model] x [E, d_model, d_ff] and back in
    this device and dtype and agrees with per-expert matmuls (a probe, cached; a CUDA kernel wants sm90 and
    aligned widths, the CPU one float32/bfloat16/float16)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if device.type == "meta":
        return True  # shapes only
    key = (device.type, device.index, dtype, d_model, d_ff)
    if key not in _GROUPED_MM_WORKS:
        # on a thread of its own: the first forward may run inside activation checkpointing, whose dispatch
        # mode (selective recomputation's op counts) and saved-tensor hooks are thread-local; the probe's ops
        # must not count as the forward's, or the recomputed forward (cached: no probe) would not match it
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            _GROUPED_MM_WORKS[key] = pool.submit(_probe_grouped_mm, device, dtype, d_model, d_ff).result()
    return _GROUPED_MM_WORKS[key]


@torch.compiler.disable  # type: ignore[untyped-decorator]  # torch leaves it untyped; no probe inside a graph
def _probe_grouped_mm(device: torch.device, dtype: torch.dtype, d_model: int, d_ff: int) -> bool:
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(5, d_model, generator=generator).to(device, dtype).requires_grad_()
    w = torch.randn(3, d_model, d_ff, generator=generator).to(device, dtype).requires_grad_()
    counts = torch.tensor([2, 0, 3], device=device)
    try:
        with torch.enable_grad():
            out = torch._grouped_mm(x, w, offs=counts.cumsum(0).to(torch.int32))
            back = torch._grouped_mm(out, w.transpose(1, 2), offs=counts.cumsum(0).to(torch.int32))
            grads = torch.autograd.grad(back, (x, w), torch.ones_like(back))
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    with torch.no_grad():
        ref = torch.cat([x[:2] @ w[0], x[2:] @ w[2]]).float()
        tolerance = 1e-4 if dtype == torch.float32 else 5e-2
        scale = ref.abs().max().clamp(min=1.0)
        return bool(((out.float() - ref).abs().max() / scale) < tolerance) and grads[0].shape == x.shape


_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: SplitMix64's seed increment


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (this rank's experts), or the tensor itself."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _contiguous_grad(out: torch.Tensor) -> torch.Tensor:
    """out whose incoming gradient is made contiguous: torch._grouped_mm's backward refuses an expanded
    one (the gradient of a .sum())."""
    if out.requires_grad:
        out.register_hook(lambda grad: grad.contiguous())  # type: ignore[no-untyped-call]  # torch: unannotated
    return out


class GroupedExperts(nn.Module):
    """E expert MLPs as 3-D weights, x @ w1[e] -> activation (x @ w3[e] gating) -> @ w2[e]:
    w1 [E, d_model, d_ff], w2 [E, d_ff, d_model], w3 [E, d_model, d_ff] for SwiGLU/GeGLU only, and with
    `bias` b1 [E, d_ff], b2 [E, d_model], b3 [E, d_ff] (runlib.model.mlp.MLP's biases, model.bias). The
    weights are the transposes of nn.Linear's ([in, out]), as torch._grouped_mm takes them.

    Under expert parallelism `experts` is this rank's count, `first_expert` the global index of its first,
    and with `mesh` (the expert mesh's 1-D "ep" dimension) each weight is a DTensor Shard(0) over it: the
    local [experts, ...] rows of the global [experts x ep, ...] tensor."""

    use_grouped_mm: bool | None = None  # None: torch._grouped_mm where the probe says it works; a bool forces

    def __init__(
        self,
        experts: int,
        d_model: int,
        expert_d_ff: int,
        activation: str,
        bias: bool = False,
        first_expert: int = 0,
        mesh: DeviceMesh | None = None,
    ) -> None:
        super().__init__()
        self.experts, self.d_model, self.d_ff, self.activation = experts, d_model, expert_d_ff, activation
        self.first_expert, self.mesh = first_expert, mesh
        gated = activation in ("swiglu", "geglu")
        self.w1 = self._param(experts, d_model, expert_d_ff)
        self.w2 = self._param(experts, expert_d_ff, d_model)
        self.w3 = self._param(experts, d_model, expert_d_ff) if gated else None
        self.b1 = self._param(experts, expert_d_ff) if bias else None
        self.b2 = self._param(experts, d_model) if bias else None
        self.b3 = self._param(experts, expert_d_ff) if bias and gated else None
        self.reset_parameters()

    def _param(self, *shape: int) -> nn.Parameter:
        local = torch.empty(*shape)
        if self.mesh is None:
            return nn.Parameter(local)
        return nn.Parameter(DTensor.from_local(local, self.mesh, [Shard(0)], run_check=False))

    @torch.no_grad()
    def reset_parameters(self, std: float = INIT_STD, residual_std: float = INIT_STD) -> None:
        """N(0, std) for w1 and w3, N(0, residual_std) for w2 (it writes into the residual stream), zero biases;
        expert e's weights from a generator seeded from (one seed of the global RNG, e): the module docstring."""
        seed = int(torch.randint(0, 2**62, (), device="cpu"))  # one draw, whatever the layout
        for bias in (self.b1, self.b2, self.b3):
            if bias is not None:
                _local(bias).zero_()
        draws = [(w, s) for w, s in ((self.w1, std), (self.w3, std), (self.w2, residual_std)) if w is not None]
        if any(_local(w).is_meta for w, _ in draws):
            return  # shapes only
        for i in range(self.experts):
            # SplitMix64's increment spaces the experts' seeds (Steele et al. 2014, "Fast splittable
            # pseudorandom number generators", OOPSLA)
            generator = torch.Generator(device="cpu").manual_seed((seed + (self.first_expert + i) * _GOLDEN) % 2**64)
            for weight, scale in draws:
                row = _local(weight)[i]
                row.copy_(torch.empty(row.shape, device="cpu").normal_(0.0, scale, generator=generator))

    def forward(self, x: torch.Tensor, tokens_per_expert: torch.Tensor) -> torch.Tensor:
        """x [N, d_model], sorted by expert: the first tokens_per_expert[0] rows for expert 0, and so on
        (N = their sum) -> [N, d_model], in the compute dtype (autocast's, else the weights')."""
        device_type = x.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else self.w1.dtype
        with torch.autocast(device_type=device_type, enabled=False):
            x = x.to(dtype)
            grouped = self.use_grouped_mm
            if grouped is None:
                grouped = grouped_mm_works(x.device, dtype, self.d_model, self.d_ff)
            if grouped:
                return self._grouped(x, tokens_per_expert, dtype)
            return self._looped(x, tokens_per_expert, dtype)

    def _weights(self, dtype: torch.dtype) -> list[torch.Tensor | None]:
        """The local experts' weights in `dtype` (a DTensor's local shard: its gradient comes back as a DTensor)."""
        return [
            None if p is None else _local(p).to(dtype) for p in (self.w1, self.w3, self.w2, self.b1, self.b3, self.b2)
        ]

    def _grouped(self, x: torch.Tensor, counts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        w1, w3, w2, b1, b3, b2 = self._weights(dtype)
        assert w1 is not None and w2 is not None
        offsets = counts.cumsum(0).to(torch.int32)

        def mm(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
            out = _contiguous_grad(torch._grouped_mm(a, w, offs=offsets))
            if bias is None:
                return out
            expert = torch.repeat_interleave(torch.arange(len(counts), device=a.device), counts, output_size=len(a))
            return out + bias[expert]

        h = mm(x, w1, b1)
        up = mm(x, w3, b3) if w3 is not None else None
        return mm(activate(self.activation, h, up), w2, b2)

    def _looped(self, x: torch.Tensor, counts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        w1, w3, w2, b1, b3, b2 = self._weights(dtype)
        assert w1 is not None and w2 is not None
        outputs, start = [], 0
        for e, count in enumerate(counts.tolist()):  # empty slices too: every output hangs on every expert's
            rows = x[start : start + count]  # weights, so a rank with no tokens still joins the backward all-to-all
            start += count
            h = rows @ w1[e] + (b1[e] if b1 is not None else 0)
            up = rows @ w3[e] + (b3[e] if b3 is not None else 0) if w3 is not None else None
            outputs.append(activate(self.activation, h, up) @ w2[e] + (b2[e] if b2 is not None else 0))
        return torch.cat(outputs)


# ----------------------------------------------------------------------------------------- expert parallelism


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with variable splits; the backward sends the gradients back with the splits swapped."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, output_splits: list[int], input_splits: list[int], group: dist.ProcessGroup
    ) -> torch.Tensor:
        ctx.splits, ctx.group = (output_splits, input_splits), group
        out = x.new_empty(sum(output_splits), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        output_splits, input_splits = ctx.splits
        out = grad.new_empty(sum(input_splits), *grad.shape[1:])
        dist.all_to_all_single(out, grad.contiguous(), input_splits, output_splits, group=ctx.group)
        return out, None, None, None


def all_to_all(
    x: torch.Tensor, output_splits: list[int], input_splits: list[int], group: dist.ProcessGroup
) -> torch.Tensor:
    """x [sum(input_splits), ...] -> [sum(output_splits), ...]: rows input_splits[r] go to rank r, and
    output_splits[r] rows come from it; differentiable."""
    out: torch.Tensor = _AllToAll.apply(x, output_splits, input_splits, group)  # type: ignore[no-untyped-call]
    return out


# ----------------------------------------------------------------------------------------- the layer


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The token copies of one forward, sorted by expert: copy j of token t is assignment t x k + j."""

    assignments: torch.Tensor  # [N] the kept assignments (indices into T x k), sorted by expert, earliest first
    counts: torch.Tensor  # [E] kept assignments per expert
    dropped: torch.Tensor  # [E] assignments dropped per expert (capacity)


class MoE(nn.Module):
    """A mixture-of-experts MLP (module docstring): router, routed GroupedExperts and the shared experts.
    With ep_group (a torch.distributed ProcessGroup of ep ranks) this rank holds only its E / ep experts
    and exchanges token copies with the others by all-to-all; with ep_mesh (dims ("edp", "ep"):
    runlib.model.expert_parallel.build_expert_mesh) the group is its "ep" dimension and the experts'
    weights are DTensors Shard(0) over it."""

    aux_loss: torch.Tensor | None  # the last forward's load-balancing + z-loss, with their coefficients
    dropped_per_expert: torch.Tensor  # [E] int64: the last forward's assignments dropped by capacity
    # set by the trainer before each training forward: the weight of this micro-batch's aux_loss in the step's
    # loss (runlib.train.step); None: the aux_loss is not backpropagated (evaluation, a bare forward)
    aux_loss_scale: float | None = None

    def __init__(
        self, model: ModelSpec, ep_group: dist.ProcessGroup | None = None, ep_mesh: DeviceMesh | None = None
    ) -> None:
        super().__init__()
        if model.moe is None:
            raise ValueError("MoE needs model.moe")
        moe = model.moe
        self.spec = moe
        self.ep_mesh = ep_mesh
        ep_dim = ep_mesh["ep"] if ep_mesh is not None else None
        self.ep_group = ep_dim.get_group() if ep_dim is not None else ep_group
        self.ep_rank = dist.get_rank(self.ep_group) if self.ep_group is not None else 0
        self.ep_size = dist.get_world_size(self.ep_group) if self.ep_group is not None else 1
        if moe.experts % self.ep_size:
            raise ValueError(f"moe.experts {moe.experts} do not divide over {self.ep_size} expert-parallel ranks")
        self.local_experts = moe.experts // self.ep_size
        self.router = Router(model.d_model, moe)
        self.experts = GroupedExperts(
            self.local_experts,
            model.d_model,
            moe.expert_d_ff,
            model.activation,
            model.bias,
            first_expert=self.ep_rank * self.local_experts,
            mesh=ep_dim,
        )
        shared_d_ff = moe.shared_d_ff or moe.shared_experts * moe.expert_d_ff
        self.shared_experts = self._shared_mlp(model, shared_d_ff) if shared_d_ff else None
        self.shared_gate = nn.Linear(model.d_model, 1, bias=False) if moe.shared_gate else None
        self.aux_loss = None
        self.dropped_per_expert = torch.zeros(moe.experts, dtype=torch.long)

    @staticmethod
    def _shared_mlp(model: ModelSpec, d_ff: int) -> nn.Module:
        """The dense MLP of d_ff hidden units (runlib.model.mlp)."""
        return MLP(model.model_copy(update={"d_ff": d_ff}))

    @property
    def tokens_per_expert(self) -> torch.Tensor:
        """[E] int64, detached: the last forward's assignments per expert over this rank's tokens, before
        capacity drops (what update_expert_bias and the load logs take)."""
        return self.router.tokens_per_expert

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [n, L, d] (or [T, d]) -> the same shape; sets aux_loss, tokens_per_expert, dropped_per_expert."""
        tokens = x.reshape(-1, x.shape[-1])
        routing: Routing = self.router(tokens)
        dispatch = self.dispatch(routing.experts)
        self.dropped_per_expert = dispatch.dropped.detach()
        k = routing.experts.shape[1]
        copies = tokens[dispatch.assignments // k]
        if self.ep_group is None:
            y: torch.Tensor = self.experts(copies, dispatch.counts)
        else:
            y = self.expert_parallel(copies, dispatch.counts, self.ep_group)
        # every copy back to its (token, slot); dropped ones stay zero; the weighted sum over slots in float32
        slots = y.new_zeros(tokens.shape[0] * k, y.shape[-1]).index_copy(0, dispatch.assignments, y)
        out = (slots.view(-1, k, y.shape[-1]).float() * routing.weights[..., None]).sum(dim=1).to(x.dtype)
        if self.shared_experts is not None:
            shared: torch.Tensor = self.shared_experts(tokens)
            if self.shared_gate is not None:
                shared = shared * torch.sigmoid(self.shared_gate(tokens))
            out = out + shared
        self.aux_loss = self.auxiliary_loss(routing, sequences=x.shape[0] if x.dim() == 3 else 1)
        if self.aux_loss is not None and self.aux_loss_scale is not None and torch.is_grad_enabled():
            # the balancing and z-losses backpropagated with the output (runlib.model.aux_loss), weighted
            # as the trainer weighs this micro-batch's tokens (runlib.train.step)
            return with_aux_loss(out.view(x.shape), self.aux_loss, self.aux_loss_scale)
        return out.view(x.shape)

    def dispatch(self, experts: torch.Tensor) -> Dispatch:
        """The assignments experts [T, k] sorted by expert (stable: earliest tokens first), past each
        expert's capacity dropped when moe.capacity_factor is set."""
        flat = experts.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.spec.experts)
        factor = self.spec.capacity_factor
        if factor is None:
            return Dispatch(order, counts, torch.zeros_like(counts))
        capacity = math.ceil(factor * flat.numel() / self.spec.experts)
        starts = counts.cumsum(0) - counts
        rank_in_expert = torch.arange(flat.numel(), device=flat.device) - starts[flat[order]]
        kept = counts.clamp(max=capacity)
        return Dispatch(order[rank_in_expert < capacity], kept, counts - kept)

    def expert_parallel(self, copies: torch.Tensor, counts: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        """The token copies [N, d] sorted by (global) expert, counts [E], through the experts of every rank
        of `group` (ep_group): -> their outputs [N, d] in the same order."""
        ep, local = self.ep_size, self.local_experts
        received_counts = torch.empty_like(counts)
        dist.all_to_all_single(received_counts, counts, group=group)  # [ep x local]: per source rank
        received_counts = received_counts.view(ep, local)
        send = counts.view(ep, local).sum(dim=1).tolist()
        receive = received_counts.sum(dim=1).tolist()
        received = all_to_all(copies, receive, send, group)  # by source rank, then local expert
        local_expert = torch.arange(local, device=copies.device).repeat(ep)
        local_expert = local_expert.repeat_interleave(received_counts.flatten(), output_size=received.shape[0])
        order = torch.argsort(local_expert, stable=True)
        y: torch.Tensor = self.experts(received[order], received_counts.sum(dim=0))
        return all_to_all(y[torch.argsort(order)], send, receive, group)

    def auxiliary_loss(self, routing: Routing, sequences: int) -> torch.Tensor | None:
        """moe.aux_loss's load-balancing loss (per micro-batch, or per sequence with aux_loss_scope
        sequence) plus moe.z_loss's z-loss; None when both coefficients are 0."""
        losses: list[torch.Tensor] = []
        if self.spec.aux_loss > 0:
            per = sequences if self.spec.aux_loss_scope == "sequence" else 1
            losses.append(load_balancing_loss(routing.probs, routing.experts, self.spec.aux_loss, per))
        if self.spec.z_loss > 0:
            losses.append(z_loss(routing.logits, self.spec.z_loss))
        if not losses:
            return None
        return losses[0] if len(losses) == 1 else losses[0] + losses[1]


def moe_modules(model: nn.Module) -> list[MoE]:
    """The MoE layers of a model (for the trainer's aux losses and bias updates)."""
    return [m for m in model.modules() if isinstance(m, MoE)]
