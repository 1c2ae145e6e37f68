"""The Hugging Face export computes runlib's function: transformers loads it and its logits equal
runlib's model's on the same tokens (fp32), for the Llama and GPT-2 shapes, tied and untied, with
grouped-query attention and biases; shapes without an equivalent are refused."""

import json

import pytest
import torch

from runlib.errors import UserError
from runlib.export.hf import MARKER, ExportShape, hf_architecture, write_export
from runlib.model.transformer import Transformer
from runlib.spec.models import ModelSpec
from runlib.tokenizer.special import special_ids

VOCAB_ROWS = 384
LLAMA = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 160, "seq_len": 64}
GPT2 = {**LLAMA, "position": "learned", "norm": "layernorm", "activation": "gelu"}
SHAPES = {
    "llama-tied-gqa": {**LLAMA, "kv_heads": 2, "tie_embeddings": True, "rope_theta": 500000.0},
    "llama-untied-bias-headdim": {**LLAMA, "head_dim": 8, "bias": True},
    "gpt2-tied-bias": {**GPT2, "tie_embeddings": True, "bias": True},
    "gpt2-untied-nobias": GPT2,
}


def tiny_tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = special_ids(5)
    vocab = {**specials, **{chr(c): 5 + i for i, c in enumerate(range(97, 123))}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.add_special_tokens(list(specials))
    return tok.to_str()


def export(tmp_path, fields: dict, theta: float | None = None):
    model_spec = ModelSpec(**fields)
    torch.manual_seed(0)
    model = Transformer(model_spec, VOCAB_ROWS, model_spec.seq_len)
    with torch.no_grad():  # non-trivial norm weights and biases, so a mis-mapped one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    theta = theta or model_spec.rope_theta
    if model_spec.position == "rope":
        model.set_rope(theta, model_spec.seq_len)
    shape = ExportShape(model_spec, VOCAB_ROWS, model_spec.seq_len, model_spec.seq_len, theta, eos_id=0, pad_id=1)
    out = write_export(model.state_dict(), shape, tiny_tokenizer_json(), special_ids(5), tmp_path / "hf", {"test": 1})
    return model.eval(), out


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
    extra = {n: p for n, p in hf.named_parameters() if n.endswith("bias") and not model.spec.bias}
    assert all(not p.any() for p in extra.values())
    hf_count = sum(p.numel() for n, p in hf.named_parameters() if n not in extra)
    assert hf_count == sum(p.numel() for p in model.parameters())


def test_a_long_context_theta_is_exported(tmp_path):
    """A phase that changed the RoPE base exports its own base: logits equal at that base."""
    from transformers import AutoModelForCausalLM

    model, out = export(tmp_path, SHAPES["llama-tied-gqa"], theta=2_000_000.0)
    assert json.loads((out / "config.json").read_text())["rope_parameters"]["rope_theta"] == 2_000_000.0
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = torch.arange(60)[None] % VOCAB_ROWS
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max().item() < 1e-5


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
        ({**LLAMA, "norm": "layernorm"}, "norm: layernorm"),
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
    assert (out / MARKER).exists() and not list(tmp_path.glob(".hf.*"))
