"""The transformer: exact parameter counts, causality, document masking, attention backends, RoPE, init groups."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from runlib.model.attention import (
    apply_rope,
    capped_attention,
    document_causal_mask,
    document_causal_mask_mod,
    has_documents,
)
from runlib.model.norms import RMSNorm
from runlib.model.transformer import Transformer
from runlib.plan import derive
from runlib.plan.params import count_params
from runlib.spec import load_spec
from runlib.spec.models import ModelSpec
from runlib.train.config import build_train_phase_configs
from runlib.train.optim import decay_groups

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
VOCAB = 97

TINY = dict(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, seq_len=32)


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(ModelSpec(**(TINY | overrides)), VOCAB, 32)
    return model.eval()


def packed(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """doc_ids and restarted position_ids [1, sum(lengths)] of documents of these lengths packed in one row."""
    doc = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    pos = torch.cat([torch.arange(n) for n in lengths])
    return doc[None], pos[None]


# ----------------------------------------------------------------------------------------- parameter counts

VARIANTS = {
    "llama": {},
    "gpt2": dict(activation="gelu", norm="layernorm", bias=True, position="learned", tie_embeddings=True),
    "layernorm-nobias": dict(norm="layernorm", bias=False),
    "qk_norm": dict(qk_norm=True, head_dim=12),
    "swiglu-bias": dict(bias=True),
    "mha": dict(kv_heads=None),
    # the architectures of BLOOM, Falcon, MPT and OPT, and squared ReLU
    "bloom": dict(
        position="alibi", norm="layernorm", bias=True, activation="gelu", embedding_norm=True, tie_embeddings=True
    ),
    "falcon": dict(parallel_block=True, norm="layernorm", norm_bias=True, kv_heads=1, activation="gelu"),
    # GPT-NeoX (Pythia): a parallel block with a norm per branch, LayerNorm and biases, 25% rotary
    "neox": dict(
        parallel_block=True, parallel_norms=2, norm="layernorm", bias=True, activation="gelu", rope_fraction=0.25
    ),
    "mpt": dict(position="alibi", norm="layernorm", bias=False, activation="gelu", kv_heads=None),
    "opt": dict(position="learned", norm="layernorm", bias=True, activation="relu", dropout=0.1, kv_heads=None),
    "relu2": dict(activation="relu2", norm="layernorm", bias=True, norm_bias=False),
    # the blocks of Qwen2 (q/k/v biases), Qwen3 (QK-norm per head), OLMo 2 (norms after the sublayers) and
    # Gemma 2 (norms before and after)
    "qwen2": dict(qkv_bias=True),
    "qwen3": dict(qk_norm="per_head", head_dim=12),
    "olmo2": dict(qk_norm=True, norm_position="output"),
    "sandwich": dict(norm_position="sandwich"),
    "nemotron-like": dict(rope_fraction=0.5, nope_every=2, activation="relu2", norm="layernorm1p", norm_bias=True),
    # Gemma 2's block: GeGLU, sandwich norms, scaled embeddings, its query scale, soft-capped logits, windows
    "gemma2": dict(
        activation="geglu",
        norm_position="sandwich",
        embedding_multiplier=32**0.5,
        attention_scale_dim=6,
        attention_softcap=5.0,
        final_softcap=3.0,
        sliding_window=5,
        global_every=2,
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_parameter_count_of_variants(name: str) -> None:
    spec = ModelSpec(**(TINY | VARIANTS[name]))
    with torch.device("meta"):
        model = Transformer(spec, VOCAB, 48)
    assert sum(p.numel() for p in model.parameters()) == count_params(spec, VOCAB, 48).total


def trainer_model(spec, plan) -> Transformer:
    """The model as the first training phase builds it (runlib.train.engine), from its stage config."""
    cfg = build_train_phase_configs(spec, plan)[0]
    model = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows)
    if spec.model.position == "rope":
        model.set_rope(cfg.rope_theta, cfg.seq_len)
    return model


@pytest.mark.parametrize("spec_file", SPECS, ids=[p.name for p in SPECS])
def test_parameter_count_equals_plan(spec_file: Path) -> None:
    spec = load_spec(spec_file).spec
    plan = derive(spec)
    if spec.model.position == "relative":  # planned, not built: refused (RUN008)
        with pytest.raises(ValueError, match="RUN008"), torch.device("meta"):
            trainer_model(spec, plan)
        return
    with torch.device("meta"):  # 8B parameters cost nothing on meta
        model = trainer_model(spec, plan)
    assert sum(p.numel() for p in model.parameters()) == plan.params.trained  # with the MTP modules
    if spec.model.position == "rope":  # the first phase's table
        assert model.rope_cos.shape[0] == plan.phases[0].settings.seq_len


def test_demo_model_builds_on_cpu() -> None:
    spec = load_spec(ROOT / "specs" / "demo.yaml").spec
    plan = derive(spec)
    torch.manual_seed(0)
    model = trainer_model(spec, plan)
    assert sum(p.numel() for p in model.parameters()) == plan.params.total == 1_311_872
    assert model.lm_head.weight is model.tok_embeddings.weight
    logits = model(torch.randint(0, plan.vocab_rows, (2, 16)))
    assert logits.shape == (2, 16, plan.vocab_rows) and logits.dtype == torch.float32


# ----------------------------------------------------------------------------------------- initialisation


def test_initialisation_is_deterministic_and_gpt2_scaled() -> None:
    a, b = tiny(bias=True), tiny(bias=True)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    layers = TINY["layers"]
    with torch.no_grad():
        assert a.tok_embeddings.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert a.layers[0].attention.wq.weight.std().item() == pytest.approx(0.02, rel=0.15)
        residual = torch.cat([a.layers[i].attention.wo.weight.flatten() for i in range(layers)])
        assert residual.std().item() == pytest.approx(0.02 / math.sqrt(2 * layers), rel=0.15)
        assert torch.equal(a.layers[0].attention.wq.bias, torch.zeros_like(a.layers[0].attention.wq.bias))
        assert torch.equal(a.norm.weight, torch.ones_like(a.norm.weight))


# ----------------------------------------------------------------------------------------- causality, documents


@pytest.mark.parametrize(
    "name",
    ["llama", "gpt2", "qk_norm", "bloom", "falcon", "opt", "relu2", "qwen2", "qwen3", "olmo2", "sandwich", "gemma2"],
)
def test_changing_a_future_token_never_changes_earlier_logits(name: str) -> None:
    model = tiny(**VARIANTS[name])
    x = torch.randint(0, VOCAB, (2, 20))
    y = x.clone()
    y[:, 12] = (y[:, 12] + 1) % VOCAB
    with torch.no_grad():
        lx, ly = model(x), model(y)
    assert torch.equal(lx[:, :12], ly[:, :12])
    assert not torch.allclose(lx[:, 12:], ly[:, 12:])


@pytest.mark.parametrize("name", ["llama", "gpt2", "bloom", "falcon"])
def test_document_a_never_changes_document_b(name: str) -> None:
    model = tiny(**VARIANTS[name])
    doc, pos = packed([7, 9, 4])
    x = torch.randint(0, VOCAB, (1, 20))
    y = x.clone()
    y[0, :7] = (y[0, :7] + 3) % VOCAB  # rewrite document A
    with torch.no_grad():
        lx, ly = model(x, pos, doc), model(y, pos, doc)
        # document B alone, at its own positions, gives the same logits as inside the packed row
        alone = model(x[:, 7:16])
    assert torch.allclose(lx[:, 7:], ly[:, 7:], atol=1e-6)
    assert not torch.allclose(lx[:, :7], ly[:, :7])
    assert torch.allclose(lx[:, 7:16], alone, atol=1e-5)
    with torch.no_grad():  # without document ids the row is one sequence: A leaks into B
        leak_x, leak_y = model(x, pos), model(y, pos)
    assert not torch.allclose(leak_x[:, 7:], leak_y[:, 7:], atol=1e-4)


def test_single_document_rows_take_the_causal_path() -> None:
    model = tiny()
    x = torch.randint(0, VOCAB, (3, 16))
    same = torch.zeros(3, 16, dtype=torch.long) + torch.arange(3)[:, None]  # one document per row
    assert not has_documents(same) and has_documents(packed([4, 12])[0]) and not has_documents(None)
    with torch.no_grad():
        assert torch.equal(model(x, None, same), model(x))


def naive_attention(attn, x: torch.Tensor, rope, mask: torch.Tensor) -> torch.Tensor:
    """Softmax attention written out: repeat kv heads, scores, mask with -inf, softmax, weighted values."""
    from runlib.model.attention import apply_rope

    n, length, _ = x.shape
    q = attn.wq(x).view(n, length, attn.heads, attn.head_dim).transpose(1, 2)
    k = attn.wk(x).view(n, length, attn.kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.wv(x).view(n, length, attn.kv_heads, attn.head_dim).transpose(1, 2)
    q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    group = attn.heads // attn.kv_heads
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)
    scores = scores.masked_fill(~mask, float("-inf"))
    y = scores.softmax(-1) @ v
    return attn.wo(y.transpose(1, 2).reshape(n, length, -1))


def test_sdpa_mask_path_equals_naive_attention() -> None:
    from runlib.model.attention import AttentionMask

    model = tiny()
    attn = model.layers[0].attention
    doc, pos = packed([5, 11, 8])
    x = torch.randn(1, 24, TINY["d_model"])
    rope = (model.rope_cos[pos][:, None], model.rope_sin[pos][:, None])
    mask = document_causal_mask(doc)
    with torch.no_grad():
        got = attn(x, rope, AttentionMask(bool_mask=mask))
        want = naive_attention(attn, x, rope, mask)
        causal = attn(x, rope, AttentionMask())
        want_causal = naive_attention(attn, x, rope, torch.ones(24, 24, dtype=torch.bool).tril())
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(causal, want_causal, atol=1e-6)


def test_flex_mask_mod_equals_sdpa_mask() -> None:
    doc = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3], [0] * 4 + [1] * 6])
    n, length = doc.shape
    b = torch.arange(n)[:, None, None]
    q_idx = torch.arange(length)[None, :, None]
    kv_idx = torch.arange(length)[None, None, :]
    h = torch.zeros(())
    got = document_causal_mask_mod(doc)(b, h, q_idx, kv_idx)
    assert torch.equal(got, document_causal_mask(doc)[:, 0])
    causal = document_causal_mask_mod(None)(b, h, q_idx, kv_idx).expand(n, length, length)
    assert torch.equal(causal, torch.ones(length, length, dtype=torch.bool).tril().expand(n, -1, -1))


def test_flex_forward_equals_sdpa_forward_on_cpu() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny(qk_norm=True)
    doc = torch.cat([packed([10, 22])[0], packed([32])[0]])
    pos = torch.cat([packed([10, 22])[1], packed([32])[1]])
    x = torch.randint(0, VOCAB, (2, 32))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": the eager reference
        model.attention_backend = "sdpa"
        want = model(x, pos, doc)
        model.attention_backend = "flex"
        got = model(x, pos, doc)
        got_causal = model(x)
        model.attention_backend = "sdpa"
        want_causal = model(x)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got_causal, want_causal, atol=1e-5)


@pytest.mark.parametrize("every", [None, 2])
def test_a_sliding_window_layer_sees_only_its_window(every) -> None:
    """A windowed layer's query sees its `sliding_window` latest keys: with every layer windowed, token 0 cannot
    reach position >= layers x (window - 1) + 1; with alternate global layers it reaches every later position."""
    model = tiny(layers=2, sliding_window=4, global_every=every)
    x = torch.randint(0, VOCAB, (1, 32))
    y = x.clone()
    y[0, 0] = (x[0, 0] + 1) % VOCAB
    with torch.no_grad():
        moved = (model(x) - model(y)).abs().amax(-1)[0] > 1e-6
    reach = 2 * 3 + 1  # two windowed layers of 4 keys: positions 0..6 may move
    if every is None:
        assert moved[:reach].any() and not moved[reach:].any()
    else:
        assert moved[reach:].all()
    assert [b.windowed for b in model.blocks()] == ([True, True] if every is None else [True, False])


def test_windows_soft_capping_and_documents_flex_equals_sdpa_on_cpu() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny(**VARIANTS["gemma2"])
    doc, pos = (torch.cat(t) for t in zip(packed([10, 22]), packed([32]), strict=True))
    x = torch.randint(0, VOCAB, (2, 32))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()": the eager reference
        model.attention_backend = "sdpa"
        want, want_causal = model(x, pos, doc), model(x)
        model.attention_backend = "flex"
        got, got_causal = model(x, pos, doc), model(x)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(got_causal, want_causal, atol=1e-5)
    assert want.abs().max() <= 3.0  # the final soft-cap bounds the logits


def test_capped_attention_is_sdpa_when_the_cap_is_far() -> None:
    q, k, v = torch.randn(2, 4, 16, 8), torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
    mask = torch.rand(2, 1, 16, 16) > 0.3
    mask |= torch.eye(16, dtype=torch.bool)
    for m in (None, mask):
        far = capped_attention(q, k, v, m, 0.2, 1e6, 0.0)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None, scale=0.2, enable_gqa=True)
        assert torch.allclose(far, sdpa, atol=1e-5)
        near = capped_attention(q, k, v, m, 0.2, 0.5, 0.0)
        assert not torch.allclose(near, sdpa, atol=1e-3)


def test_partial_rope_rotates_the_first_dims_only() -> None:
    model = tiny(rope_fraction=0.5)  # head_dim 8: 4 rotated
    assert model.rope_cos.shape[-1] == 4
    x = torch.randn(1, 2, 5, 8)
    pos = torch.arange(5)
    out = apply_rope(x, model.rope_cos[pos][None, None], model.rope_sin[pos][None, None])
    assert torch.equal(out[..., 4:], x[..., 4:]) and not torch.allclose(out[..., :4], x[..., :4])
    full = apply_rope(x[..., :4], model.rope_cos[pos][None, None], model.rope_sin[pos][None, None])
    assert torch.equal(out[..., :4], full)
    with pytest.raises(ValueError, match="even number"):
        ModelSpec(**(TINY | {"rope_fraction": 0.375}))  # 3 of 8 dimensions


def test_nope_layers_ignore_positions() -> None:
    """NoPE in every layer: positions change nothing; in every 2nd, the first layer still sees them."""
    x = torch.randint(0, VOCAB, (1, 16))
    shifted = torch.arange(16)[None] * 2  # other distances (RoPE is blind to a shift of all positions)
    for every, moves in ((1, False), (2, True)):
        model = tiny(nope_every=every)
        with torch.no_grad():
            changed = not torch.allclose(model(x), model(x, shifted), atol=1e-6)
        assert changed == moves
        assert [b.nope for b in model.blocks()] == ([True, True] if every == 1 else [False, True])


def test_geglu_gates_with_tanh_gelu() -> None:
    mlp = tiny(activation="geglu").layers[0].mlp
    x = torch.randn(3, 32)
    with torch.no_grad():
        want = mlp.w2(F.gelu(mlp.w1(x), approximate="tanh") * mlp.w3(x))
        assert torch.allclose(mlp(x), want, atol=1e-6)
        assert not torch.allclose(tiny().layers[0].mlp(x), want, rtol=1e-2, atol=0)  # SiLU gates otherwise


def test_auto_backend_is_sdpa_on_cpu() -> None:
    model = tiny()
    assert model.attention_backend == "auto"
    mask = model.attention_mask(packed([3, 5])[0], 1, 8, torch.device("cpu"), torch.float32)
    assert mask.block_mask is None and mask.bool_mask is not None


# ----------------------------------------------------------------------------------------- RoPE, GQA, backward


def test_rope_theta_changes_logits_and_set_rope_restores_them() -> None:
    model = tiny()
    x = torch.randint(0, VOCAB, (1, 24))
    with torch.no_grad():
        before = model(x)
        model.set_rope(40_000.0, 64)
        assert model.rope_cos.shape == (64, model.head_dim) and model.rope_theta == 40_000.0
        after = model(x)
        model.set_rope(TINY.get("rope_theta", 10_000.0), 32)
        again = model(x)
    assert not torch.allclose(before, after, atol=1e-4)
    assert torch.allclose(before, again, atol=1e-6)
    assert "rope_cos" not in model.state_dict()  # non-persistent: a phase sets it, checkpoints do not carry it


def test_rope_is_relative() -> None:
    """Shifting every position of a sequence by the same amount leaves the logits unchanged."""
    model = tiny()
    x = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        a = model(x, torch.arange(12)[None])
        b = model(x, torch.arange(12)[None] + 9)
    assert torch.allclose(a, b, atol=1e-4)


def test_positions_beyond_the_rope_table_are_an_error() -> None:
    with pytest.raises(ValueError, match="set_rope"):
        tiny()(torch.zeros(1, 4, dtype=torch.long), torch.tensor([[0, 1, 2, 40]]))


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_query_attention(kv_heads: int) -> None:
    model = tiny(kv_heads=kv_heads)
    assert model.layers[0].attention.wk.out_features == kv_heads * 8
    doc, pos = packed([6, 10])
    with torch.no_grad():
        logits = model(torch.randint(0, VOCAB, (1, 16)), pos, doc)
    assert logits.shape == (1, 16, VOCAB) and torch.isfinite(logits).all()


def test_backward_with_document_masks_on_cpu() -> None:
    model = tiny(qk_norm=True).train()
    doc, pos = packed([5, 9, 10])
    x = torch.randint(0, VOCAB, (1, 25))
    logits = model(x[:, :-1], pos, doc)
    loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.layers[0].attention.q_norm.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "olmo2", "sandwich", "gemma2", "nemotron-like"])
def test_a_few_steps_lower_the_loss(name: str) -> None:
    model = tiny(**VARIANTS[name]).train()
    opt = torch.optim.AdamW(decay_groups(list(model.parameters()), 0.1), lr=3e-3)
    x = torch.randint(0, VOCAB, (4, 17))
    losses = []
    for _ in range(20):
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0


def test_layernorm1p_stores_the_scale_as_its_offset_from_one() -> None:
    """Megatron-LM's apply_layernorm_1p: weight 0 at init, the same function as LayerNorm's weight 1; a
    trained offset w scales by 1 + w."""
    one_p = tiny(norm="layernorm1p", norm_bias=True, activation="relu2")
    plain = tiny(norm="layernorm", norm_bias=True, activation="relu2")
    norms = [m for m in one_p.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(torch.equal(m.weight, torch.zeros_like(m.weight)) for m in norms)
    x = torch.randint(0, VOCAB, (2, 16))
    with torch.no_grad():
        for (name, a), b in zip(one_p.named_parameters(), plain.parameters(), strict=True):
            assert a.shape == b.shape, name
            if "norm" not in name:
                b.copy_(a)
        assert torch.allclose(one_p(x), plain(x), atol=1e-6)
        norm = norms[0]
        norm.weight.fill_(0.5)
        h = torch.randn(3, TINY["d_model"])
        expected = F.layer_norm(h, (TINY["d_model"],), torch.full((TINY["d_model"],), 1.5), norm.bias, norm.eps)
        assert torch.allclose(norm(h), expected, atol=1e-6)


# ----------------------------------------------------------------------------------------- param groups


@pytest.mark.parametrize(
    "name", ["llama", "gpt2", "qk_norm", "swiglu-bias", "qwen2", "qwen3", "sandwich", "nemotron-like"]
)
def test_param_groups_put_norms_and_biases_and_nothing_else_in_no_decay(name: str) -> None:
    model = tiny(**VARIANTS[name])
    decay, no_decay = decay_groups(list(model.parameters()), 0.1)  # a tied weight is listed once
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    norm_or_bias = set()
    for module in model.modules():
        if isinstance(module, (RMSNorm, torch.nn.LayerNorm)):
            norm_or_bias |= {id(p) for p in module.parameters(recurse=False)}
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            norm_or_bias.add(id(module.bias))
    assert {id(p) for p in no_decay["params"]} == norm_or_bias
    assert norm_or_bias  # every variant has norms
    assert all(p.ndim == 2 for p in decay["params"])
    assert id(model.tok_embeddings.weight) in {id(p) for p in decay["params"]}
    everything = {id(p) for p in model.parameters()}
    listed = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(listed) == len(set(listed)) and set(listed) == everything  # the tied weight once
    torch.optim.AdamW([decay, no_decay], lr=1e-3)  # accepted as given


# ----------------------------------------------------------------------------------------- the fields of BLOOM, Falcon, MPT and OPT


def test_alibi_slopes_are_the_papers() -> None:
    from runlib.model.attention import alibi_slopes

    # Press et al. 2022, section 3: 8 heads -> 1/2, 1/4, ..., 1/256
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    # a non-power of two (BLOOM's 112 heads; here 12): the 8 slopes of 8 heads, then every other of 16's
    want = [2.0**-i for i in range(1, 9)] + [2.0 ** -(i - 0.5) for i in (1, 2, 3, 4)]
    assert alibi_slopes(12).tolist() == pytest.approx(want, rel=1e-6)


def test_alibi_attention_equals_scores_minus_slope_times_distance() -> None:
    model = tiny(**VARIANTS["mpt"])
    attn = model.layers[0].attention
    x = torch.randn(1, 12, TINY["d_model"])
    n, length = 1, 12
    with torch.no_grad():
        got = attn(x, None, model.attention_mask(None, 1, length, x.device, x.dtype))
        q = attn.wq(x).view(n, length, attn.heads, attn.head_dim).transpose(1, 2)
        k = attn.wk(x).view(n, length, attn.heads, attn.head_dim).transpose(1, 2)
        v = attn.wv(x).view(n, length, attn.heads, attn.head_dim).transpose(1, 2)
        i = torch.arange(length)
        distance = (i[:, None] - i[None, :]).float()
        scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim) - model.alibi[:, None, None] * distance
        scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
        want = attn.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(n, length, -1))
        plain = attn(x, None, AttentionMaskForTest())
    assert torch.allclose(got, want, atol=1e-6)
    assert not torch.allclose(got, plain, atol=1e-3)  # the bias is there
    assert sum(p.numel() for p in model.parameters()) == count_params(model.spec, VOCAB, 32).total


def AttentionMaskForTest():
    from runlib.model.attention import AttentionMask

    return AttentionMask()


def test_alibi_flex_equals_sdpa_on_cpu() -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    model = tiny(**VARIANTS["bloom"])
    doc, pos = packed([10, 22])
    x = torch.randint(0, VOCAB, (1, 32))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.attention_backend = "sdpa"
        want = model(x, pos, doc)
        model.attention_backend = "flex"
        got = model(x, pos, doc)
    assert torch.allclose(got, want, atol=1e-5)


def block_inputs(model: Transformer) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], Any]:
    """A block's input (2 rows of 8 positions), its RoPE tables and the causal mask."""
    x = torch.randn(2, 8, TINY["d_model"])
    mask = model.attention_mask(None, 2, 8, x.device, x.dtype)
    return x, (model.rope_cos[:8][None, None], model.rope_sin[:8][None, None]), mask


def distinct_norm_weights(block: torch.nn.Module) -> None:
    """Norm weights apart from 1 (and from each other), so that each norm's place shows in the output."""
    for p in block.parameters():
        if p.ndim == 1:
            p.normal_(1.0, 0.3)


def test_parallel_block_is_one_norm_and_two_branches() -> None:
    model = tiny(**VARIANTS["falcon"])
    block = model.layers[0]
    assert block.mlp_norm is None
    x, rope, mask = block_inputs(model)
    with torch.no_grad():
        h = block.attention_norm(x)
        want = x + block.attention(h, rope, mask) + block.mlp(h)
        assert torch.allclose(block(x, rope, mask), want, atol=1e-6)
    assert block.attention_norm.bias is not None and block.attention.wq.bias is None  # norm_bias apart from bias


def test_a_neox_parallel_block_has_a_norm_per_branch() -> None:
    """parallel_norms 2 (GPT-NeoX's use_parallel_residual): x + attn(norm1(x)) + mlp(norm2(x))."""
    model = tiny(**VARIANTS["neox"])
    block = model.layers[0]
    assert block.mlp_norm is not None
    x, rope, mask = block_inputs(model)
    with torch.no_grad():
        distinct_norm_weights(block)
        want = x + block.attention(block.attention_norm(x), rope, mask) + block.mlp(block.mlp_norm(x))
        assert torch.allclose(block(x, rope, mask), want, atol=1e-6)
        shared = x + block.attention(block.attention_norm(x), rope, mask) + block.mlp(block.attention_norm(x))
        assert not torch.allclose(block(x, rope, mask), shared, atol=1e-4)


@pytest.mark.parametrize("name", ["olmo2", "sandwich"])
def test_norms_after_the_sublayers(name: str) -> None:
    """norm_position output: x + norm(attention(x)), then x + norm(mlp(x)) (OLMo 2); sandwich: a norm before and
    one after each sublayer (Gemma 2)."""
    model = tiny(**VARIANTS[name])
    block = model.layers[0]
    x, rope, mask = block_inputs(model)
    with torch.no_grad():
        distinct_norm_weights(block)
        if name == "olmo2":
            h = x + block.attention_norm(block.attention(x, rope, mask))
            want = h + block.mlp_norm(block.mlp(h))
        else:
            h = x + block.attention_post_norm(block.attention(block.attention_norm(x), rope, mask))
            want = h + block.mlp_post_norm(block.mlp(block.mlp_norm(h)))
        assert torch.allclose(block(x, rope, mask), want, atol=1e-6)
        pre = tiny(**{**VARIANTS[name], "norm_position": "pre"}).layers[0]
        pre.load_state_dict({k: v for k, v in block.state_dict().items() if "post_norm" not in k})
        assert not torch.allclose(pre(x, rope, mask), want, atol=1e-3)


def test_qk_norm_per_head_normalises_each_head_with_one_weight() -> None:
    model = tiny(**VARIANTS["qwen3"])
    attention = model.layers[0].attention
    assert attention.q_norm.weight.shape == attention.k_norm.weight.shape == (12,)
    x = torch.randn(2, 8, TINY["d_model"])
    with torch.no_grad():
        attention.q_norm.weight.normal_(1.0, 0.3)
        q = attention.wq(x).view(2, 8, -1, 12)
        want = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + 1e-5) * attention.q_norm.weight
        assert torch.allclose(attention.q_norm(q), want, atol=1e-5)
    qwen2 = tiny(**VARIANTS["qwen2"]).layers[0]
    assert all(getattr(qwen2.attention, w).bias is not None for w in ("wq", "wk", "wv"))
    assert qwen2.attention.wo.bias is None and qwen2.mlp.w1.bias is None


def test_embedding_norm_normalises_the_embedding() -> None:
    model = tiny(**VARIANTS["bloom"])
    assert isinstance(model.embedding_norm, torch.nn.LayerNorm)
    with torch.no_grad():
        model.embedding_norm.weight.fill_(2.0)
        changed = model(torch.randint(0, VOCAB, (1, 8)))
        model.embedding_norm.weight.fill_(1.0)
        assert not torch.allclose(changed, model(torch.randint(0, VOCAB, (1, 8))))
    assert tiny().embedding_norm is None


@pytest.mark.parametrize(("activation", "fn"), [("relu", F.relu), ("relu2", lambda h: F.relu(h).square())])
def test_relu_activations(activation: str, fn) -> None:
    model = tiny(activation=activation)
    mlp = model.layers[0].mlp
    x = torch.randn(3, TINY["d_model"])
    with torch.no_grad():
        assert torch.allclose(mlp(x), mlp.w2(fn(mlp.w1(x))))
    assert mlp.w3 is None


def test_dropout_in_training_only_and_reproducible_from_the_seed() -> None:
    model = tiny(**VARIANTS["opt"])
    x = torch.randint(0, VOCAB, (2, 16))
    with torch.no_grad():
        a, b = model(x), model(x)  # eval: no dropout
        model.train()
        torch.manual_seed(1)
        c = model(x)
        torch.manual_seed(1)
        d = model(x)
        e = model(x)
    assert torch.equal(a, b) and torch.equal(c, d)
    assert not torch.allclose(a, c) and not torch.allclose(c, e)
    nodrop = tiny(**(VARIANTS["opt"] | {"dropout": 0.0}))
    nodrop.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.allclose(nodrop(x), a, atol=1e-6)


def test_relative_positions_are_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="RUN008"):
        tiny(position="relative")


@pytest.mark.parametrize("name", ["bloom", "falcon", "opt"])
def test_published_architectures_train_with_the_specs_optimizer(name: str) -> None:
    """Each new architecture learns (dropout on, in training mode) with runlib's optimizer builder; MPT's
    Lion (optimizer.kind lion, lion-pytorch) on the BLOOM-style ALiBi model."""

    from runlib.spec.models import OptimizerSpec, PrecisionSpec
    from runlib.train.optim import build_optimizer

    model = tiny(**VARIANTS[name]).train()
    kind, lr = ("lion" if name == "bloom" else "adamw"), 3e-3
    opt = build_optimizer(model, OptimizerSpec(kind=kind, lr=lr), PrecisionSpec(compute="fp32"))
    assert type(opt).__name__ == ("Lion" if kind == "lion" else "AdamW")
    torch.manual_seed(0)
    x = torch.randint(0, VOCAB, (4, 17))
    losses = []
    for _ in range(15):
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, (name, losses[0], losses[-1])
