"""Multi-token prediction: exact parameter counts, and the loss against DeepSeek-V3's formulation computed by
hand on the truncated sequences h^k_{1:T-k} (section 2.2), with document boundaries and short rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from runlib.model.attention import rope_tables
from runlib.model.mtp import MTPModule, MultiTokenPrediction
from runlib.model.transformer import Block
from runlib.plan.params import count_params
from runlib.spec.models import ModelSpec

TINY = dict(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, seq_len=32)
VOCAB = 23


def spec(depth: int = 2, **model) -> ModelSpec:
    return ModelSpec(**(TINY | model), mtp=dict(depth=depth, loss_weight=0.3))


@pytest.mark.parametrize("model", [{}, dict(norm="layernorm", bias=True, activation="gelu")])
def test_parameter_count_equals_plan(model: dict) -> None:
    s = spec(depth=2, **model)
    with torch.device("meta"):
        mtp = MultiTokenPrediction(s, lambda: Block(s))
        block = Block(s)
    norm = 32 * (2 if model.get("bias") else 1)
    per_module = 3 * norm + 2 * 32 * 32 + sum(p.numel() for p in block.parameters())
    assert sum(p.numel() for p in mtp.parameters()) == 2 * per_module
    assert sum(p.numel() for p in mtp.parameters()) == count_params(s, VOCAB, 32).mtp


class Parts:
    """A main model's embedding and head, a depth-2 MTP of real (causal) blocks, and a batch."""

    def __init__(self, length: int = 9) -> None:
        torch.manual_seed(0)
        self.spec = spec(depth=2)
        self.mtp = MultiTokenPrediction(self.spec, lambda: Block(self.spec)).eval()
        with torch.no_grad():
            for module in self.mtp.modules():
                if isinstance(module, nn.Linear):
                    module.weight.normal_(0, 0.1)
        self.embedding = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB, bias=False)
        tokens = torch.randint(0, VOCAB, (2, length + 1))
        self.input_ids, self.targets = tokens[:, :-1], tokens[:, 1:].clone()
        self.h = torch.randn(2, length, 32)
        cos, sin = rope_tables(8, 64, 10_000.0)
        self.cos, self.sin = cos[:length][None, None], sin[:length][None, None]

    def loss(self, **kwargs) -> torch.Tensor:
        rope = (self.cos, self.sin)
        return self.mtp(self.h, self.embedding, self.head, self.input_ids, self.targets, rope, None, **kwargs)

    def reference(self, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """DeepSeek-V3 eq. 21-25 on the truncated rows: module k runs on positions 0 .. L-k-1 only and
        predicts t_{i+k+1} = targets[:, i + k]; with doc_ids, not across a document boundary."""
        length = self.input_ids.shape[1]
        h, losses = self.h, []
        for k, module in enumerate(self.mtp.layers, start=1):
            assert isinstance(module, MTPModule)
            keep = length - k
            embedded = self.embedding(self.input_ids[:, k:])  # Emb(t_{i+k}), i < L-k
            combined = module.eh_proj(torch.cat([module.enorm(embedded), module.hnorm(h[:, :keep])], dim=-1))
            h = module.block(combined, (self.cos[:, :, :keep], self.sin[:, :, :keep]), None)
            logits = self.head(module.norm(h))
            target = self.targets[:, k:].clone()
            if doc_ids is not None:
                target[doc_ids[:, k:] != doc_ids[:, :keep]] = -100
            losses.append(F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1)))
        return torch.stack(losses).mean()


def test_loss_equals_deepseek_v3_on_truncated_rows() -> None:
    parts = Parts()
    with torch.no_grad():
        torch.testing.assert_close(parts.loss(), parts.reference(), atol=1e-6, rtol=1e-5)
    assert parts.mtp.module_losses.shape == (2,)


def test_targets_in_another_document_are_ignored() -> None:
    """Row 0 packs documents of 4 and 5 tokens: module 1 ignores position 3 (its targets[4] is document
    1's), module 2 positions 2 and 3."""
    parts = Parts()
    doc_ids = torch.tensor([[0] * 4 + [1] * 5, [0] * 9])
    with torch.no_grad():
        masked = parts.loss(doc_ids=doc_ids)
        torch.testing.assert_close(masked, parts.reference(doc_ids), atol=1e-6, rtol=1e-5)
        assert float((masked - parts.loss()).abs()) > 1e-4  # the mask changes the loss


def test_short_rows_have_no_nan() -> None:
    """A row of 2 tokens: module 2 has no position with a target (its loss 0, not nan)."""
    parts = Parts(length=2)
    with torch.no_grad():
        loss = parts.loss()
    assert torch.isfinite(loss)
    assert float(parts.mtp.module_losses[1]) == 0.0


def test_gradients_reach_the_shared_embedding_and_head_and_the_main_hidden_state() -> None:
    parts = Parts()
    parts.h.requires_grad_()
    parts.mtp.train()
    parts.loss().backward()
    assert parts.h.grad is not None and float(parts.h.grad.abs().sum()) > 0
    assert parts.embedding.weight.grad is not None and parts.head.weight.grad is not None
    # the tail's padded positions: no gradient reaches h at a position whose every module is past the row
    assert float(parts.h.grad[:, -1].abs().sum()) == 0.0
