"""Mixture-of-experts layers: exact parameter counts, routing (scores, groups, the balancing bias), the
auxiliary losses, grouped GEMM against the per-expert loop, capacity drops, and expert parallelism over
two gloo processes against one process with every expert."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from runlib.model.expert_parallel import build_expert_mesh
from runlib.model.moe import (
    GroupedExperts,
    MoE,
    Router,
    grouped_mm_works,
    load_balancing_loss,
    update_expert_bias,
    z_loss,
)
from runlib.model.parallelize import build_mesh, clip_grad_norm_, parallelize
from runlib.model.transformer import Transformer
from runlib.plan.params import moe_mlp_params
from runlib.spec.models import ModelSpec, MoeSpec
from runlib.train.dist_checkpoint import full_state_dicts, load_checkpoint, load_full_state_dicts, save_checkpoint

TINY = dict(layers=2, d_model=16, heads=4, d_ff=32, seq_len=32)
MOE = dict(experts=4, top_k=2, expert_d_ff=8)


def spec(moe: dict | None = None, **model) -> ModelSpec:
    return ModelSpec(**(TINY | model), moe=MOE | (moe or {}))


def imbalance(counts: torch.Tensor) -> float:
    """max / mean of the per-expert loads."""
    load = counts.float()
    return float(load.max() / load.mean())


def dense_expert(experts: GroupedExperts, e: int, x: torch.Tensor) -> torch.Tensor:
    """Expert e on every row of x, written out by hand (SwiGLU, no biases)."""
    assert experts.w3 is not None
    return (F.silu(x @ experts.w1[e]) * (x @ experts.w3[e])) @ experts.w2[e]


# ----------------------------------------------------------------------------------------- parameter counts

VARIANTS = {
    "routed": ({}, {}),
    "shared-experts": (dict(shared_experts=2), {}),
    "shared-d_ff-gate": (dict(shared_experts=1, shared_d_ff=24, shared_gate=True), {}),
    "gelu-bias": (dict(shared_experts=1), dict(activation="gelu", bias=True, norm="layernorm")),
    "swiglu-bias": (dict(shared_experts=1), dict(bias=True)),
    "deepseek-v3": (dict(experts=8, score="sigmoid", groups=4, groups_per_token=2, bias_update_rate=0.001), {}),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_parameter_count_equals_plan(name: str) -> None:
    moe, model = VARIANTS[name]
    s = spec(moe, **model)
    with torch.device("meta"):
        layer = MoE(s)
    assert sum(p.numel() for p in layer.parameters()) == moe_mlp_params(s)[0]
    # the balancing bias is a buffer (kept in checkpoints), not a parameter
    assert "router.expert_bias" in dict(layer.named_buffers())
    assert "router.expert_bias" in layer.state_dict()


# ----------------------------------------------------------------------------------------- grouped GEMM


@pytest.mark.parametrize("activation,bias", [("swiglu", False), ("gelu", True), ("geglu", True)])
def test_grouped_mm_and_loop_agree(activation: str, bias: bool) -> None:
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    assert grouped_mm_works(torch.device("cpu"), torch.float32, 16, 24)  # torch 2.13's CPU kernel runs fp32
    torch.manual_seed(0)
    experts = GroupedExperts(4, 16, 24, activation, bias=bias)
    with torch.no_grad():
        for b in (experts.b1, experts.b2, experts.b3):
            if b is not None:
                b.normal_()  # non-zero biases, so the per-expert bias rows are checked
    counts = torch.tensor([3, 0, 5, 2])  # an expert without tokens
    x = torch.randn(10, 16)
    grad_out = torch.randn(10, 16)
    results = []
    for grouped in (True, False):
        experts.use_grouped_mm = grouped
        xi = x.clone().requires_grad_()
        experts.zero_grad()
        out = experts(xi, counts)
        out.backward(grad_out)
        results.append((out.detach(), xi.grad, [p.grad.clone() for p in experts.parameters()]))
    (out_g, dx_g, dw_g), (out_l, dx_l, dw_l) = results
    torch.testing.assert_close(out_g, out_l, atol=1e-6, rtol=0)
    torch.testing.assert_close(dx_g, dx_l, atol=1e-6, rtol=0)
    for a, b in zip(dw_g, dw_l, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # the loop is the reference: rows of expert 2 are expert 2's MLP
    if activation == "swiglu":
        torch.testing.assert_close(out_l[3:8], dense_expert(experts, 2, x[3:8]).detach(), atol=1e-6, rtol=0)


def test_grouped_mm_backward_takes_an_expanded_gradient() -> None:
    """out.sum().backward() hands torch._grouped_mm an expanded gradient, which its kernel refuses."""
    torch.manual_seed(0)
    experts = GroupedExperts(2, 16, 16, "relu2")
    x = torch.randn(4, 16, requires_grad=True)
    experts(x, torch.tensor([1, 3])).sum().backward()
    assert x.grad is not None and experts.w1.grad is not None


# ----------------------------------------------------------------------------------------- routing


def test_top_k_of_all_experts_is_the_dense_mixture() -> None:
    """top_k = experts, dropless: each token's output is sum_e p_e(x) expert_e(x) (computed by hand), and
    with a zero router the mean of the experts."""
    torch.manual_seed(0)
    layer = MoE(spec(dict(experts=4, top_k=4)))
    x = torch.randn(2, 5, 16)
    tokens = x.reshape(-1, 16)
    dense = torch.stack([dense_expert(layer.experts, e, tokens) for e in range(4)], dim=1)  # [T, E, d]
    probs = torch.softmax(tokens @ layer.router.gate.weight.T, dim=-1)
    expected = (probs[..., None] * dense).sum(dim=1)
    torch.testing.assert_close(layer(x).reshape(-1, 16), expected, atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        layer.router.gate.weight.zero_()
    torch.testing.assert_close(layer(x).reshape(-1, 16), dense.mean(dim=1), atol=1e-6, rtol=1e-5)
    assert layer.tokens_per_expert.tolist() == [10, 10, 10, 10]


def test_softmax_top_k_renormalized_is_mixtral_softmax_over_top_k_logits() -> None:
    torch.manual_seed(0)
    router = Router(16, MoeSpec(experts=8, top_k=2, expert_d_ff=4, route_scale=2.5))
    x = torch.randn(6, 16)
    routing = router(x)
    logits = x @ router.gate.weight.T
    top = logits.topk(2, dim=-1)
    torch.testing.assert_close(routing.experts, top.indices)
    torch.testing.assert_close(routing.weights, 2.5 * torch.softmax(top.values, dim=-1))
    torch.testing.assert_close(routing.probs.sum(dim=-1), torch.ones(6))


def test_sigmoid_scores_weight_unnormalized_and_probs_sum_to_one() -> None:
    torch.manual_seed(0)
    router = Router(16, MoeSpec(experts=8, top_k=3, expert_d_ff=4, score="sigmoid", normalize_top_k=False))
    x = torch.randn(6, 16)
    routing = router(x)
    scores = torch.sigmoid(x @ router.gate.weight.T)
    torch.testing.assert_close(routing.weights, scores.gather(1, routing.experts))
    torch.testing.assert_close(routing.probs, scores / scores.sum(dim=-1, keepdim=True))


def test_expert_bias_chooses_but_does_not_weight() -> None:
    """DeepSeek-V3 eq. 16: the bias enters the top-k choice only; the gating weight is the unbiased score."""
    torch.manual_seed(0)
    router = Router(16, MoeSpec(experts=8, top_k=2, expert_d_ff=4, score="sigmoid", normalize_top_k=False))
    x = torch.randn(20, 16)
    router.expert_bias[5] = 10.0  # every token now picks expert 5
    routing = router(x)
    assert bool((routing.experts == 5).any(dim=-1).all())
    scores = torch.sigmoid(x @ router.gate.weight.T)
    torch.testing.assert_close(routing.weights, scores.gather(1, routing.experts))
    assert float(routing.weights.detach().max()) <= 1.0  # a biased score (about 10.5) never weights an expert
    assert int(router.tokens_per_expert[5]) == 20 and int(router.tokens_per_expert.sum()) == 40


@pytest.mark.parametrize("score,group", [("sigmoid", [2, 3]), ("softmax", [0, 1])])
def test_group_limited_routing(score: str, group: list[int]) -> None:
    """8 experts in 4 groups of 2, one group per token: sigmoid groups score the sum of their top-2
    (group 1: 0.5 + 0.5 beats group 0: 0.9 + 0.0), softmax groups their best (group 0's 0.9)."""
    router = Router(4, MoeSpec(experts=8, top_k=2, expert_d_ff=4, score=score, groups=4, groups_per_token=1))
    choice = torch.tensor([[0.9, 0.0, 0.5, 0.5, 0.6, 0.1, 0.2, 0.2]])
    limited = router.group_limited(choice)
    assert sorted(limited.topk(2).indices[0].tolist()) == group
    assert int(torch.isinf(limited).sum()) == 6


def test_group_limited_routing_keeps_each_tokens_experts_in_its_groups() -> None:
    torch.manual_seed(0)
    moe = MoeSpec(experts=16, top_k=4, expert_d_ff=4, score="sigmoid", groups=4, groups_per_token=2)
    routing = Router(16, moe)(torch.randn(50, 16))
    groups_used = (routing.experts // 4).sort(dim=-1).values
    assert all(len(set(row)) <= 2 for row in groups_used.tolist())
    assert max(len(set(row)) for row in groups_used.tolist()) == 2


def test_router_refuses_top_k_beyond_its_groups() -> None:
    with pytest.raises(ValueError, match="top_k 5"):
        Router(4, MoeSpec(experts=8, top_k=5, expert_d_ff=4, groups=4, groups_per_token=2))


# ----------------------------------------------------------------------------------------- balancing

PLANTED_SEED = 0


def planted_router(moe: MoeSpec) -> tuple[Router, torch.Tensor]:
    """A router whose logits favour expert 0 for the tokens it sees (x has a mean along expert 0's row)."""
    torch.manual_seed(PLANTED_SEED)
    direction = torch.randn(16)
    direction = direction / direction.norm()
    x = torch.randn(512, 16) + direction
    router = Router(16, moe)
    with torch.no_grad():
        router.gate.weight.normal_(0.0, 0.1)
        router.gate.weight[0] = 2 * direction
    return router, x


def test_bias_update_balances_a_planted_imbalance() -> None:
    """DeepSeek-V3 section 2.1.2: lowering the overloaded expert's bias step after step spreads the load."""
    router, x = planted_router(MoeSpec(experts=8, top_k=2, expert_d_ff=4, score="sigmoid"))
    router(x)
    start = imbalance(router.tokens_per_expert)
    assert int(router.tokens_per_expert.argmax()) == 0 and start > 3.0
    for _ in range(100):
        router(x)
        update_expert_bias(router, router.tokens_per_expert, 0.01)
    router(x)
    assert float(router.expert_bias[0]) < 0 and int(router.expert_bias.argmin()) == 0
    assert imbalance(router.tokens_per_expert) < 1.5
    assert router.expert_bias.dtype == torch.float32


def test_bias_update_is_a_signed_step() -> None:
    router = Router(4, MoeSpec(experts=4, top_k=1, expert_d_ff=4))
    update_expert_bias(router, torch.tensor([10, 2, 4, 4]), 0.5)  # mean 5
    assert router.expert_bias.tolist() == [-0.5, 0.5, 0.5, 0.5]


def test_load_balancing_loss_balances_a_planted_imbalance() -> None:
    """Switch Transformer section 2.2: SGD on the auxiliary loss alone spreads the load (its minimum, 1 x
    alpha, is the uniform router)."""
    router, x = planted_router(MoeSpec(experts=8, top_k=2, expert_d_ff=4))
    optimizer = torch.optim.SGD(router.parameters(), lr=0.5)
    router(x)
    start = imbalance(router.tokens_per_expert)
    assert start > 3.0
    for _ in range(30):
        routing = router(x)
        loss = load_balancing_loss(routing.probs, routing.experts, 1.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    router(x)
    assert imbalance(router.tokens_per_expert) < 1.5
    assert 1.0 <= float(loss.detach()) < 1.05


def test_load_balancing_loss_by_hand() -> None:
    """alpha x E x sum_i f_i P_i over the micro-batch, and per sequence averaged (DeepSeek-V3 eq. 17-20)."""
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]])
    experts = torch.tensor([[0], [0], [2], [1]])
    # micro-batch: f = (2/4, 1/4, 1/4), P = (0.4, 0.2, 0.4)
    expected = 0.1 * 3 * (0.5 * 0.4 + 0.25 * 0.2 + 0.25 * 0.4)
    torch.testing.assert_close(load_balancing_loss(probs, experts, 0.1), torch.tensor(expected))
    # sequences (tokens 0-1, 2-3): f = (1, 0, 0), P = (0.65, 0.25, 0.1); f = (0, 1/2, 1/2), P = (0.15, 0.15, 0.7)
    first, second = 3 * 0.65, 3 * (0.5 * 0.15 + 0.5 * 0.7)
    torch.testing.assert_close(
        load_balancing_loss(probs, experts, 1.0, sequences=2), torch.tensor((first + second) / 2)
    )


def test_z_loss_is_non_negative_and_shrinks_the_logits() -> None:
    torch.manual_seed(0)
    logits = (3 * torch.randn(32, 8)).requires_grad_()
    loss = z_loss(logits, 1e-3)
    assert float(loss.detach()) >= 0
    torch.testing.assert_close(loss, 1e-3 * torch.logsumexp(logits, -1).square().mean())
    loss.backward()
    assert logits.grad is not None
    stepped = logits.detach() - 100.0 * logits.grad
    assert float(torch.logsumexp(stepped, -1).abs().mean()) < float(torch.logsumexp(logits.detach(), -1).abs().mean())
    assert float(z_loss(torch.full((4, 8), -math.log(8)), 1.0)) == pytest.approx(0.0, abs=1e-10)


def test_moe_keeps_its_aux_loss() -> None:
    torch.manual_seed(0)
    layer = MoE(spec(dict(aux_loss=0.01, z_loss=0.001, aux_loss_scope="sequence")))
    x = torch.randn(3, 4, 16)
    layer(x)
    routing = layer.router(x.reshape(-1, 16))
    expected = load_balancing_loss(routing.probs, routing.experts, 0.01, sequences=3) + z_loss(routing.logits, 0.001)
    assert layer.aux_loss is not None
    torch.testing.assert_close(layer.aux_loss, expected)
    assert MoE(spec()).aux_loss is None


# ----------------------------------------------------------------------------------------- capacity


def test_capacity_drops_the_latest_assignments() -> None:
    """Every token routed to expert 0 (top 1 of 4), 8 tokens, capacity factor 1: C = ceil(8 / 4) = 2, so
    the first two tokens get expert 0's output and the other six nothing (Switch section 2.2)."""
    torch.manual_seed(0)
    layer = MoE(spec(dict(top_k=1, capacity_factor=1.0)))
    layer.router.expert_bias[0] = 10.0  # the planted choice
    x = torch.randn(1, 8, 16)
    out = layer(x)[0]
    assert layer.tokens_per_expert.tolist() == [8, 0, 0, 0]
    assert layer.dropped_per_expert.tolist() == [6, 0, 0, 0]
    weight = layer.router(x[0]).weights  # top-1 renormalized: 1
    torch.testing.assert_close(out[:2], weight[:2] * dense_expert(layer.experts, 0, x[0, :2]))
    assert float(out[2:].detach().abs().max()) == 0.0


def test_capacity_counts_per_expert() -> None:
    layer = MoE(spec(dict(top_k=2, capacity_factor=1.25)))
    experts = torch.tensor([[0, 1], [0, 1], [0, 2], [0, 1], [0, 3], [1, 0]])  # 12 assignments: C = ceil(3.75) = 4
    dispatch = layer.dispatch(experts)
    assert dispatch.counts.tolist() == [4, 4, 1, 1]
    assert dispatch.dropped.tolist() == [2, 0, 0, 0]
    # kept: expert 0's copies of tokens 0-3 (assignments 0, 2, 4, 6); token 4's and 5's dropped
    assert dispatch.assignments[:4].tolist() == [0, 2, 4, 6]
    assert 8 not in dispatch.assignments.tolist() and 11 not in dispatch.assignments.tolist()


def test_dropless_computes_every_assignment() -> None:
    torch.manual_seed(0)
    layer = MoE(spec(dict(shared_experts=1, shared_gate=True)))
    layer(torch.randn(2, 6, 16))
    assert int(layer.dropped_per_expert.sum()) == 0 and int(layer.tokens_per_expert.sum()) == 24


# ----------------------------------------------------------------------------------------- expert parallelism

EP_SPEC = dict(experts=4, top_k=2, expert_d_ff=8, shared_experts=1)


def _ep_worker(rank: int, world: int, init_file: str) -> None:
    """One rank of the ep=2 check: MoE over the gloo group, against one process with every expert fed
    both ranks' tokens."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        s = spec(EP_SPEC)
        torch.manual_seed(0)
        full = MoE(s)
        x = torch.randn(world, 3, 6, 16)  # rank r feeds x[r]
        grad_out = torch.randn(world, 3, 6, 16)
        local = MoE(s, ep_group=dist.group.WORLD)
        assert local.experts.w1.shape[0] == 2  # 4 experts over 2 ranks
        state = full.state_dict()
        rows = slice(rank * 2, rank * 2 + 2)
        local.load_state_dict({k: v[rows] if k.startswith("experts.") else v for k, v in state.items()})
        # one process: all the tokens (rank order along the batch), the sum of both ranks' losses
        x_full = x.reshape(-1, 6, 16).clone().requires_grad_()
        out_full = full(x_full)
        (out_full * grad_out.reshape(-1, 6, 16)).sum().backward()
        # this rank: its tokens, its loss
        x_local = x[rank].clone().requires_grad_()
        out_local = local(x_local)
        (out_local * grad_out[rank]).sum().backward()
        torch.testing.assert_close(out_local, out_full.view(world, 3, 6, 16)[rank], atol=1e-6, rtol=0)
        assert x_local.grad is not None and x_full.grad is not None
        torch.testing.assert_close(x_local.grad, x_full.grad.view(world, 3, 6, 16)[rank], atol=1e-6, rtol=0)
        full_grads = {name: p.grad for name, p in full.named_parameters()}
        for name, p in local.named_parameters():
            assert p.grad is not None
            if name.startswith("experts."):  # the local experts: all ranks' tokens reached them
                torch.testing.assert_close(p.grad, full_grads[name][rows], atol=1e-6, rtol=0)
            else:  # replicated router and shared expert: summed over ranks (the data-parallel all-reduce)
                grad = p.grad.clone()
                dist.all_reduce(grad)  # two partial sums added in another order: relative rounding too
                torch.testing.assert_close(grad, full_grads[name], atol=1e-6, rtol=1e-6)
        # every rank saw its own tokens' routing; summed over ranks it is the one process's
        counts = local.tokens_per_expert.clone()
        dist.all_reduce(counts)
        assert counts.tolist() == full.tokens_per_expert.tolist()
    finally:
        dist.destroy_process_group()


def test_expert_parallel_equals_one_process(tmp_path: Path) -> None:
    mp.spawn(_ep_worker, args=(2, str(tmp_path / "init")), nprocs=2, join=True)


def test_expert_parallel_initialises_the_rows_one_process_draws(tmp_path: Path) -> None:
    """GroupedExperts draws expert e from a generator of its own: the rows i..j of a 4-expert layer equal a
    2-expert layer's whose first expert is i, and the global RNG moves by one draw either way."""
    torch.manual_seed(3)
    full = GroupedExperts(4, 16, 8, "swiglu", bias=True)
    after_full = torch.rand(1)
    torch.manual_seed(3)
    part = GroupedExperts(2, 16, 8, "swiglu", bias=True, first_expert=2)
    assert torch.equal(torch.rand(1), after_full)
    for name, p in part.named_parameters():
        assert torch.equal(p, getattr(full, name)[2:4]), name


# ----------------------------------------------------------------------------------------- the trainer's layout

EP_MODEL = dict(
    layers=2,
    d_model=16,
    heads=4,
    d_ff=32,
    seq_len=8,
    vocab_size=32,
    moe=dict(EP_SPEC, dense_layers=1, aux_loss=0.01, z_loss=0.001, score="sigmoid"),
    mtp=dict(depth=1, loss_weight=0.3),
)


def _step_losses(model: torch.nn.Module, rows: torch.Tensor, total: float, scale: float) -> None:
    """One micro-batch's backward as runlib.train.step takes it: (token loss sum + aux x tokens) x scale / total,
    the MoE layers' balancing and z-losses with the weight of the micro-batch's tokens (MoE.aux_loss_scale)."""
    inputs, targets = rows[:, :-1], rows[:, 1:]
    for layer in model.modules():
        if isinstance(layer, MoE):
            layer.aux_loss_scale = targets.numel() * scale / total
    logits = model(inputs, None, None, targets)
    inner = model.module if hasattr(model, "module") else model
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
    loss = loss + inner.aux_loss * targets.numel()
    (loss * scale / total).backward()


def _ep_model(s: ModelSpec, sharding: str, world: int) -> tuple[torch.nn.Module, Transformer]:
    """The tiny MoE Transformer on expert parallelism 2 over `world` gloo ranks, parallelized (fp32)."""
    replicas, shards = (world, 1) if sharding == "none" else (1, world)
    parallel = SimpleNamespace(
        dp_replicate=replicas, dp_shard=shards, tp=1, cp=1, pp=1, sharding=sharding,
        activation_checkpointing="none", offload=False,
    )  # fmt: skip
    precision = SimpleNamespace(compute="fp32", master_weights="fp32", grads="fp32", optimizer_states="fp32")
    mesh = build_mesh(parallel)
    torch.manual_seed(0)
    model = Transformer(s, 32, 16, ep=build_expert_mesh(mesh, 2))
    return parallelize(model, mesh, parallel, precision), model


def _ep_layout_worker(rank: int, world: int, init_file: str, ckpt: str) -> None:
    """Expert parallelism 2 on 4 gloo ranks (2 ranks hold each expert: edp 2) under sharding none and fsdp:
    the initial weights, the gradients after runlib's loss scaling and the clipped norm equal one process's;
    a DCP checkpoint loads into one unsharded model with every expert; the full state dicts (final.pt's)
    hold every expert, and load back into an expert-parallel model."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        s = ModelSpec(**EP_MODEL)
        rows = torch.randint(0, 32, (world, 2, 9), generator=torch.Generator().manual_seed(5))
        total = float(world * 2 * 8)
        torch.manual_seed(0)
        full = Transformer(s, 32, 16)
        for r in range(world):  # one process: the ranks' micro-batches accumulated
            _step_losses(full, rows[r], total, 1.0)
        full_norm = clip_grad_norm_(full, 0.05)
        full_state = full.state_dict()
        grads = {n: p.grad for n, p in full.named_parameters()}
        expert_rows = slice((rank % 2) * 2, (rank % 2) * 2 + 2)  # ep consecutive ranks
        for sharding in ("none", "fsdp"):
            wrapped, model = _ep_model(s, sharding, world)
            experts = model.layers[1].mlp.experts
            assert experts.w1.full_tensor().shape[0] == 4 and len(experts.w1.to_local()) <= 2
            assert torch.equal(experts.w1.full_tensor(), full_state["layers.1.mlp.experts.w1"])
            _step_losses(wrapped, rows[rank], total, float(world))
            norm = clip_grad_norm_(wrapped, 0.05)
            assert norm == pytest.approx(full_norm, rel=1e-5), sharding
            for name, p in model.named_parameters():
                grad = p.grad.full_tensor()
                torch.testing.assert_close(grad, grads[name], atol=1e-7, rtol=1e-5, msg=f"{sharding} {name}")
            optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # states, no update
            optimizer.step()
            save_checkpoint(Path(ckpt) / sharding, model, optimizer, {})
            plain = Transformer(s, 32, 16)  # every rank: DCP's load is collective
            load_checkpoint(Path(ckpt) / sharding, plain)
            assert all(torch.equal(v, full_state[k]) for k, v in plain.state_dict().items())
            _check_full_state_dicts(s, sharding, world, wrapped, optimizer, full_state, grads, expert_rows)
    finally:
        dist.destroy_process_group()


def _check_full_state_dicts(s, sharding, world, wrapped, optimizer, full_state, grads, expert_rows) -> None:
    """final.pt's dicts (rank 0's) hold every expert and its Adam state; loaded into another expert-parallel
    model, each rank gets its rows back."""
    model_sd, optim_sd = full_state_dicts(wrapped, optimizer)
    box = [(model_sd, optim_sd)]
    dist.broadcast_object_list(box, src=0)
    model_sd, optim_sd = box[0]
    assert all(torch.equal(v, full_state[k]) for k, v in model_sd.items())
    exp_avg = optim_sd["state"]["layers.1.mlp.experts.w1"]["exp_avg"]
    torch.testing.assert_close(exp_avg, 0.1 * grads["layers.1.mlp.experts.w1"], atol=1e-8, rtol=1e-5)
    again, model = _ep_model(s, sharding, world)
    again_optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.data.zero_()
    load_full_state_dicts(again, again_optimizer, model_sd, optim_sd)
    w1 = model.layers[1].mlp.experts.w1
    assert torch.equal(w1.full_tensor(), full_state["layers.1.mlp.experts.w1"])
    if sharding == "none":  # replicated over edp: the local shard is the ep rank's experts
        assert torch.equal(w1.to_local(), full_state["layers.1.mlp.experts.w1"][expert_rows])


def test_expert_parallel_layouts_equal_one_process(tmp_path: Path) -> None:
    mp.spawn(_ep_layout_worker, args=(4, str(tmp_path / "init"), str(tmp_path / "ckpt")), nprocs=4, join=True)
