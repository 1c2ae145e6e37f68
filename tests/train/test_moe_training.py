"""Mixtures of experts, latent attention and MTP trained through the project's own launcher on CPU: two
DDP processes make the same updates as one (the experts' load all-reduced before DeepSeek-V3's bias
update), a phase stopped and resumed gives bitwise the weights of an uninterrupted one (the expert bias
included), and the interval's load per expert is logged."""

import json

import pytest
import torch

from tests.train.test_phase_training import checkpoint_weights, launch, spec_variant

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("phase_training")]

# the tiny spec's MLP as 4 experts of half its width, top-2, after one dense layer; DeepSeek's latent
# attention and one MTP module; both balancing rules (the bias moves fast enough to see in 4 steps)
SPARSE = (
    "  seq_len: 128\n",
    "  seq_len: 128\n"
    "  moe: {experts: 4, top_k: 2, expert_d_ff: 96, shared_experts: 1, dense_layers: 1, aux_loss: 0.01,"
    " z_loss: 0.001, bias_update_rate: 0.01, score: sigmoid}\n"
    "  attention: {kind: mla, q_lora_rank: 32, kv_lora_rank: 32, qk_rope_head_dim: 8, qk_nope_head_dim: 16,"
    " v_head_dim: 16}\n"
    "  mtp: {depth: 1, loss_weight: 0.3}\n",
    "  kv_heads: 2\n",
    "",
)


@pytest.fixture(autouse=True)
def _tokenized_work_dir(tokenized, monkeypatch):
    """Every test here reads the artifacts of `tokenized`'s work directory."""
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tokenized[2] / "work"))


def expert_biases(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.endswith("expert_bias")}


def test_two_processes_train_the_experts_as_one(tokenized, tmp_path):
    _, spec, graph = spec_variant(tmp_path, *SPARSE)
    node = graph.find("train_phase", phase=0)
    one = launch(graph, node, tmp_path / "o1", tmp_path / "s1", 1, stop_after=3)
    two = launch(graph, node, tmp_path / "o2", tmp_path / "s2", 2, stop_after=3)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = checkpoint_weights(node, tmp_path / "s1" / "step-3"), checkpoint_weights(node, tmp_path / "s2" / "step-3")
    assert any(".mlp.experts." in k for k in a) and any(".attention.kv_a_proj_with_mqa." in k for k in a)
    assert any(k.startswith("mtp.") for k in a)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=2e-6, msg=name)
    # the bias moved (3 updates of 0.01 against the load) and alike on both layouts: the counts were summed
    # over the ranks before the update
    biases = expert_biases(a)
    assert biases and all(v.abs().sum() > 0 for v in biases.values())
    assert all(torch.equal(biases[k], expert_biases(b)[k]) for k in biases)


def test_a_stopped_sparse_phase_resumes_to_the_same_weights(tokenized, tmp_path):
    _, spec, graph = spec_variant(
        tmp_path, *SPARSE, "monitor: {eval_every: 25 steps,", "monitor: {eval_every: 25 steps, log_every: 2 steps,"
    )
    node = graph.find("train_phase", phase=0)
    straight = launch(graph, node, tmp_path / "o", tmp_path / "s", 1, stop_after=4)
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = launch(graph, node, tmp_path / "o2", tmp_path / "s2", 1, stop_after=2)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = launch(graph, node, tmp_path / "o2", tmp_path / "s2", 1, stop_after=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed at step 2" in resumed.stdout
    a, b = checkpoint_weights(node, tmp_path / "s" / "step-4"), checkpoint_weights(node, tmp_path / "s2" / "step-4")
    assert a.keys() == b.keys() and expert_biases(a)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    # the load per expert of each MoE layer (the MTP module's too), logged at each log point: shares of 1
    records = [json.loads(x) for x in (tmp_path / "s" / "metrics.jsonl").read_text().splitlines()]
    loads = [r["expert_load"] for r in records if "expert_load" in r]
    assert loads and set(loads[0]) == {"layers.1.mlp", "mtp.layers.0.block.mlp"}
    for shares in loads[0].values():
        assert len(shares) == 4 and abs(sum(shares) - 1) < 1e-5
