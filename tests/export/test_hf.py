"""The Hugging Face export computes runlib's function: transformers loads it and its logits equal
runlib's model's on the same tokens (fp32), for the Llama and GPT-2 shapes, tied and untied, with
grouped-query attention and biases; shapes without an equivalent are refused."""

import json
import os
import stat

import pytest
import torch

from runlib.errors import UserError
from runlib.export.hf import EXPORT_FORMAT, MARKER, hf_architecture
from runlib.spec.models import RopeScalingSpec
from tests.export import tiny_export
from tests.export.tiny_export import GPT2, LLAMA, SHAPES, VOCAB_ROWS


def export(tmp_path, fields: dict, theta: float | None = None):
    return tiny_export.export(tmp_path / "hf", fields, theta)


@pytest.mark.parametrize("name", SHAPES)
def test_transformers_logits_equal_runlib(tmp_path, name):
    from transformers import AutoModelForCausalLM

    model, out = export(tmp_path, SHAPES[name])
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == hf_architecture(model.spec)
    tokens = torch.randint(0, VOCAB_ROWS, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(tokens), hf(tokens).logits.float()
    assert theirs.shape == ours.shape
    assert (ours - theirs).abs().max().item() < 1e-5
    # the same parameters, bar the zero biases that GPT-2 always has and a bias-free spec does not
    gpt2 = model.spec.position == "learned"
    extra = {n: p for n, p in hf.named_parameters() if gpt2 and n.endswith("bias") and not model.spec.bias}
    assert all(not p.any() for p in extra.values())
    hf_count = sum(p.numel() for n, p in hf.named_parameters() if n not in extra)
    assert hf_count == sum(p.numel() for p in model.parameters())


def test_a_long_context_theta_is_exported(tmp_path):
    """A phase that changed the RoPE base exports its own base, in the keys of transformers 5.x
    (`rope_parameters`) and 4.x (`rope_theta`, test_hf_transformers4.py loads it there): logits equal at
    that base, up to position 299."""
    from transformers import AutoModelForCausalLM

    model, out = export(tmp_path, {**SHAPES["llama-tied-gqa"], "seq_len": 320}, theta=2_000_000.0)
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"]["rope_theta"] == config["rope_theta"] == 2_000_000.0
    assert config["rope_scaling"] is None  # a non-null one would replace rope_parameters in 5.x
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert hf.config.rope_parameters == {"rope_type": "default", "rope_theta": 2_000_000.0}
    tokens = torch.randint(0, VOCAB_ROWS, (1, 300), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    "scaling",
    [
        {"kind": "llama3", "factor": 8.0, "original_seq_len": 32},  # Llama 3.1's, over a 32-token original context
        {"kind": "yarn", "factor": 4.0, "original_seq_len": 64},
    ],
)
def test_a_phase_rope_scaling_is_exported(tmp_path, scaling):
    """A long-context phase's Llama 3.1 or YaRN frequencies (runlib.model.rope) load as transformers' own
    rope_type, and the logits agree past the original context."""
    from transformers import AutoModelForCausalLM

    spec = RopeScalingSpec(**scaling)
    model, out = tiny_export.export(tmp_path / "hf", {**SHAPES["llama-tied-gqa"], "seq_len": 256}, 100_000.0, spec)
    plain, _ = tiny_export.export(tmp_path / "plain", {**SHAPES["llama-tied-gqa"], "seq_len": 256}, 100_000.0)
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert hf.config.rope_parameters["rope_type"] == scaling["kind"]
    tokens = torch.randint(0, VOCAB_ROWS, (1, 256), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model(tokens)
        assert (ours - hf(tokens).logits).abs().max().item() < 1e-5
        assert not torch.allclose(ours, plain(tokens), atol=1e-3)  # the scaling moved the logits


def test_the_tokenizer_loads_with_its_special_tokens(tmp_path):
    from transformers import AutoTokenizer

    _, out = export(tmp_path, SHAPES["llama-tied-gqa"])
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0
    assert tok.pad_token_id == 1
    assert tok("abc")["input_ids"] == [5, 6, 7]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({**LLAMA, "qk_norm": True}, "model.qk_norm"),
        ({**LLAMA, "norm_position": "sandwich"}, "model.norm_position"),
        ({**LLAMA, "attention_softcap": 50.0}, "model.attention_softcap"),
        ({**LLAMA, "rope_fraction": 0.5}, "model.rope_fraction"),
        ({**LLAMA, "nope_every": 2, "qk_norm": "per_head"}, "model.nope_every"),
        ({**LLAMA, "activation": "geglu"}, "activation: geglu"),
        ({**LLAMA, "activation": "geglu", "norm_position": "sandwich"}, "model.embedding_multiplier"),
        ({**LLAMA, "norm_position": "output"}, "model.norm_position"),
        ({**LLAMA, "qk_norm": "per_head", "bias": True}, "model.qk_norm"),
        ({**LLAMA, "qkv_bias": True, "head_dim": 8}, "model.qkv_bias"),
        ({**LLAMA, "norm": "layernorm"}, "norm: layernorm"),
        ({**LLAMA, "norm": "layernorm1p", "activation": "relu2"}, "model.norm_bias"),
        ({**LLAMA, "norm": "layernorm1p", "norm_bias": True, "activation": "relu2", "qk_norm": True}, "model.qk_norm"),
        ({**GPT2, "kv_heads": 2}, "model.kv_heads"),
        ({**LLAMA, "parallel_block": True}, "model.parallel_block"),
        ({**GPT2, "embedding_norm": True}, "model.embedding_norm"),
        ({**LLAMA, "position": "alibi"}, "position: alibi"),
    ],
)
def test_shapes_without_an_equivalent_are_refused(tmp_path, fields, named):
    with pytest.raises(UserError, match="no Hugging Face equivalent") as info:
        export(tmp_path, fields)
    assert named in str(info.value) and "Fix:" in str(info.value)
    assert not (tmp_path / "hf").exists()


def test_an_existing_folder_that_is_not_an_export_is_kept(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not an earlier export"):
        export(tmp_path, SHAPES["gpt2-untied-nobias"])
    assert (tmp_path / "hf" / "notes.txt").read_text() == "mine"
    (tmp_path / "hf" / "notes.txt").unlink()
    _, out = export(tmp_path, SHAPES["gpt2-untied-nobias"])  # an empty folder is fine, and so is a rerun
    _, out = export(tmp_path, SHAPES["gpt2-untied-nobias"])
    assert json.loads((out / MARKER).read_text())["export_format"] == EXPORT_FORMAT
    assert not list(tmp_path.glob(".hf.*"))


def test_the_weights_are_as_readable_as_the_other_files(tmp_path):
    """safetensors writes model.safetensors 0600: a colleague or an inference service that reads the
    export's config.json (0644 under umask 022) was refused the weights."""
    old = os.umask(0o022)
    try:
        _, out = export(tmp_path, SHAPES["llama-tied-gqa"])
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == 0o644, modes
