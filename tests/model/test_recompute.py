"""Activation recomputation changes memory, never the numbers: every mode gives the gradients of `none`;
selective_op keeps exactly the attention kernel's output and every other matmul's output per block."""

import pytest
import torch

from runlib.model import parallelize
from runlib.model.transformer import Transformer
from runlib.plan.memory import op_selective_bytes_per_layer
from runlib.spec.models import ModelSpec

SPEC = ModelSpec(layers=2, d_model=64, heads=4, kv_heads=2, d_ff=160, seq_len=32)


def gradients(mode: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Transformer(SPEC, 128, SPEC.seq_len)
    parallelize.set_recompute(model, mode)
    tokens = torch.randint(0, 128, (2, SPEC.seq_len), generator=torch.Generator().manual_seed(1))
    doc_ids = (torch.arange(SPEC.seq_len) >= 12).long().expand(2, -1)  # two documents per row: a mask
    model(tokens, doc_ids=doc_ids).logsumexp(-1).mean().backward()
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode", ["selective", "selective_op", "full"])
def test_recomputation_gives_the_same_gradients(mode):
    reference, recomputed = gradients("none"), gradients(mode)
    for name, grad in reference.items():
        torch.testing.assert_close(recomputed[name], grad, rtol=0, atol=1e-6, msg=name)


def test_op_selective_keeps_the_kernel_and_every_other_matmul(monkeypatch):
    kept: list[str] = []
    real = parallelize.op_selective_policy

    def recording():
        policy = real()

        def record(ctx, op, *args, **kwargs):
            decision = policy(ctx, op, *args, **kwargs)
            if not ctx.is_recompute and decision.name == "MUST_SAVE":
                kept.append(str(op).split(".")[-2] if "." in str(op) else str(op))
            return decision

        return record

    monkeypatch.setattr(parallelize, "op_selective_policy", recording)
    gradients("selective_op")
    per_block = len(kept) // SPEC.layers
    assert len(kept) == SPEC.layers * per_block
    # q, v, the MLP's gate and down projection (4 of 7 matmuls) and the attention kernel, per block
    assert sorted(kept[:per_block]) == sorted(["mm"] * 4 + ["_scaled_dot_product_flash_attention_for_cpu"])


def test_the_memory_model_counts_what_the_policy_keeps():
    """input h + kernel output a*hd + q a*hd + v kv*hd + gate f + down h values per token (16-bit)."""
    h, f, hd = SPEC.d_model, SPEC.d_ff, SPEC.d_model // SPEC.heads
    per_token = h + SPEC.heads * hd + SPEC.heads * hd + 2 * hd + f + h
    assert op_selective_bytes_per_layer(SPEC, 32, 2, 1, 1, 2, True) == 32 * 2 * 2 * per_token
