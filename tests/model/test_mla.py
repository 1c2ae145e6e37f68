"""Multi-head latent attention: exact parameter counts, transformers' DeepseekV3Attention's outputs with the
same weights (rotate-half RoPE), causality, document masking, and the flex backend against SDPA."""

from __future__ import annotations

import warnings

import pytest
import torch

from runlib.model.attention import AttentionMask, document_causal_mask, flex_block_mask, rope_tables
from runlib.model.mla import MultiHeadLatentAttention
from runlib.plan.params import attention_params
from runlib.spec.models import ModelSpec

TINY = dict(layers=2, d_model=32, heads=4, d_ff=64, seq_len=32)
MLA = dict(kind="mla", q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
ROPE = 8
THETA = 10_000.0


def spec(**mla) -> ModelSpec:
    return ModelSpec(**TINY, attention=MLA | mla)


def attention(**mla) -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    module = MultiHeadLatentAttention(spec(**mla))
    with torch.no_grad():  # norms away from 1, so they count
        for norm in (module.q_a_layernorm, module.kv_a_layernorm):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
    return module.eval()


def rope(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [n, 1, L, r] at positions [n, L], as Transformer.forward indexes its tables."""
    cos, sin = rope_tables(ROPE, 64, THETA)
    return cos[positions][:, None], sin[positions][:, None]


@pytest.mark.parametrize("q_lora_rank", [24, None])
def test_parameter_count_equals_plan(q_lora_rank: int | None) -> None:
    s = spec(q_lora_rank=q_lora_rank)
    with torch.device("meta"):
        module = MultiHeadLatentAttention(s)
    assert sum(p.numel() for p in module.parameters()) == attention_params(s)


@pytest.mark.parametrize("q_lora_rank", [24, None])
def test_equals_transformers_deepseek_v3_attention(q_lora_rank: int | None) -> None:
    """The same weights under the same names give transformers' outputs (rope_interleave false)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    module = attention(q_lora_rank=q_lora_rank)
    config = transformers.DeepseekV3Config(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=16,
        qk_rope_head_dim=ROPE,
        qk_nope_head_dim=12,
        v_head_dim=10,
        rope_interleave=False,
        num_hidden_layers=1,
        vocab_size=50,
    )
    config._attn_implementation = "sdpa"
    reference = DeepseekV3Attention(config, layer_idx=0).eval()
    reference.load_state_dict(module.state_dict())  # strict: the same parameter names
    for norm in (reference.q_a_layernorm, reference.kv_a_layernorm):
        if norm is not None:
            norm.variance_epsilon = module.kv_a_layernorm.eps  # runlib's NORM_EPS, transformers' 1e-6
    x = torch.randn(2, 7, 32)
    positions = torch.arange(7).expand(2, 7)
    cos, sin = rope(positions)
    with torch.no_grad():
        expected, _ = reference(x, (cos[:, 0], sin[:, 0]), None)
        torch.testing.assert_close(module(x, (cos, sin), None), expected, atol=1e-6, rtol=1e-5)


def test_causal() -> None:
    module = attention()
    x = torch.randn(1, 9, 32)
    changed = x.clone()
    changed[:, 5:] = torch.randn(1, 4, 32)
    positions = torch.arange(9)[None]
    with torch.no_grad():
        a, b = module(x, rope(positions), None), module(changed, rope(positions), None)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert float((a[:, 5:] - b[:, 5:]).abs().max()) > 1e-3


def test_packed_documents_equal_separate_rows() -> None:
    """Two documents packed in a row (restarted positions, transformer's document mask) give what each
    gives alone."""
    module = attention()
    x = torch.randn(1, 10, 32)
    doc_ids = torch.tensor([[0] * 4 + [1] * 6])
    positions = torch.cat([torch.arange(4), torch.arange(6)])[None]
    with torch.no_grad():
        packed = module(x, rope(positions), AttentionMask(bool_mask=document_causal_mask(doc_ids)))
        first = module(x[:, :4], rope(torch.arange(4)[None]), None)
        second = module(x[:, 4:], rope(torch.arange(6)[None]), None)
    torch.testing.assert_close(packed, torch.cat([first, second], dim=1), atol=1e-6, rtol=1e-5)


def test_flex_backend_equals_sdpa() -> None:
    """The flex_attention path (eager on the CPU, inference only) with its BlockMask, values narrower than
    the queries and keys."""
    module = attention()
    x = torch.randn(2, 16, 32)
    doc_ids = torch.tensor([[0] * 7 + [1] * 9, [0] * 16])
    positions = torch.arange(16).expand(2, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": the eager reference
        sdpa = module(x, rope(positions), AttentionMask(bool_mask=document_causal_mask(doc_ids)))
        block = flex_block_mask(doc_ids, 2, 16, x.device)
        flex = module(x, rope(positions), AttentionMask(block_mask=block))
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)


def test_rope_tables_must_be_the_rope_part() -> None:
    module = attention()
    cos, sin = rope_tables(20, 8, THETA)  # head_dim wide, not qk_rope_head_dim
    with pytest.raises(ValueError, match="qk_rope_head_dim 8"):
        module(torch.randn(1, 8, 32), (cos[None, None], sin[None, None]), None)


def test_gradients_reach_every_parameter() -> None:
    module = attention().train()
    positions = torch.arange(6)[None]
    module(torch.randn(1, 6, 32), rope(positions), None).square().sum().backward()
    missing = [name for name, p in module.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert missing == []
