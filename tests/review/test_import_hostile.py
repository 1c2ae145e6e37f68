"""Malformed and hostile import configs: each is refused with exit 2 naming the
file (and the field, where one is at fault), never a traceback (exit 1 means "the audit found errors"),
never a hang.

The configs are the shipped fixtures with one hostile change each: sizes past any real run (1e12
layers), negative or zero counts, NaN and infinity, integers of thousands of digits, nesting past the
parser's stack, and nanoGPT arithmetic that grows without bound (`x = x*x`, which the evaluator once
computed to a 2^26-bit integer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runlib.review.importers import import_file
from runlib.review.importers.draft import UnmappableConfig
from tests.helpers import cli_refused, refused

FIX = Path(__file__).parent.parent / "fixtures" / "imports"


def _hf(**changes) -> str:
    config = json.loads((FIX / "hf" / "llama3-8b.config.json").read_text())
    config.update(changes)
    return json.dumps(config)


def _hf_raw(key: str, raw: str) -> str:
    """The llama config with `key`'s value replaced by raw JSON text (NaN, a huge integer)."""
    return _hf(**{key: "__RAW__"}).replace('"__RAW__"', raw)


def _toml(old: str, new: str) -> str:
    text = (FIX / "llama3_8b.toml").read_text()
    assert old in text, old
    return text.replace(old, new, 1)


def _nanogpt(extra: str) -> str:
    return (FIX / "train_gpt2.py").read_text() + "\n" + extra + "\n"


def _megatron(old: str, new: str) -> str:
    text = (FIX / "gpt3_175b_megatron.sh").read_text()
    assert old in text, old
    return text.replace(old, new, 1)


SQUARING = "x = 2\n" + "x = x * x\n" * 26 + "n_layer = x\n"

# name -> (file name, text, what the message must name besides the file)
HOSTILE = {
    "hf_layers_1e12": ("config.json", _hf(num_hidden_layers=10**12), "num_hidden_layers"),
    "hf_layers_float_1e12": ("config.json", _hf_raw("num_hidden_layers", "1e12"), "num_hidden_layers"),
    "hf_heads_negative": ("config.json", _hf(num_attention_heads=-32), "num_attention_heads"),
    "hf_heads_zero": ("config.json", _hf(num_attention_heads=0), "config"),
    "hf_hidden_nan": ("config.json", _hf_raw("hidden_size", "NaN"), "NaN"),
    "hf_theta_infinity": ("config.json", _hf_raw("rope_theta", "Infinity"), "Infinity"),
    "hf_theta_1e999": ("config.json", _hf_raw("rope_theta", "1e999"), "rope_theta"),
    "hf_vocab_5000_digits": ("config.json", _hf_raw("vocab_size", "9" * 5000), "5,000 digits"),
    "hf_deep_json": ("config.json", _hf_raw("extra", "[" * 100_000 + "]" * 100_000), "nested"),
    "hf_nested_30": ("config.json", _hf_raw("extra", "[" * 30 + "]" * 30), "extra"),
    "hf_layers_text": ("config.json", _hf(num_hidden_layers="many"), "num_hidden_layers"),
    "toml_deep_arrays": (
        "job.toml",
        _toml("[training]", "deep = " + "[" * 50_000 + "]" * 50_000 + "\n[training]"),
        "nested",
    ),
    "toml_inline_tables_deep": (
        "job.toml",
        _toml("[training]", "deep = " + "{a = " * 40 + "1" + "}" * 40 + "\n[training]"),
        "deep",
    ),
    "toml_steps_nan": ("job.toml", _toml("steps = 1000", "steps = nan"), "training.steps"),
    "toml_steps_negative": ("job.toml", _toml("steps = 1000", "steps = -5"), "job.toml"),
    "toml_integer_huge": ("job.toml", _toml("steps = 1000", "steps = 1_000_000_000_000_000_000"), "training.steps"),
    "toml_seq_len_zero": ("job.toml", _toml("seq_len = 8192", "seq_len = 0"), "job.toml"),
    "nanogpt_repeated_squaring": ("sq.py", SQUARING, "x"),
    "nanogpt_layers_1e12": ("big.py", _nanogpt("n_layer = 1000000000000"), "n_layer"),
    "nanogpt_heads_negative": ("neg.py", _nanogpt("n_head = -12"), "n_head"),
    "nanogpt_nan": ("nan.py", _nanogpt("learning_rate = float('nan')\nbatch_size = 1e400"), "batch_size"),
    "nanogpt_block_zero": ("zero.py", _nanogpt("block_size = 0\nbatch_size = 0"), "zero.py"),
    "megatron_layers_nan": ("args.sh", _megatron("--num-layers 96", "--num-layers nan"), "--num-layers"),
    "megatron_lr_inf": ("args.sh", _megatron("--lr 6.0e-5", "--lr inf"), "--lr"),
    "megatron_layers_1e12": ("args.sh", _megatron("--num-layers 96", "--num-layers 1000000000000"), "--num-layers"),
    "nanogpt_dataset_5000_chars": ("long.py", _nanogpt("dataset = '" + "d" * 5000 + "'\nn_layer = -1"), "n_layer"),
    "megatron_word_900kb": (
        "args.sh",
        _megatron("--lr 6.0e-5", "--lr 6.0e-5 --x " + "y" * 900_000),
        "16,384 characters",
    ),
    # int() truncated a fractional count without a word: a model other than the config's
    "hf_hidden_fraction": ("config.json", _hf(hidden_size=4096.5), "hidden_size = 4096.5 is not a whole number"),
    "toml_steps_fraction": ("job.toml", _toml("steps = 1000", "steps = 1000.5"), "training.steps = 1000.5"),
    "toml_seq_len_date": ("job.toml", _toml("seq_len = 8192", "seq_len = 1979-05-27"), "training.seq_len"),
    "nanogpt_layers_fraction": ("frac.py", _nanogpt("n_layer = 12.5"), "n_layer = 12.5 is not a whole number"),
    "megatron_heads_zero": ("args.sh", _megatron("--num-attention-heads 96", "--num-attention-heads 0"), "args.sh"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_config_is_refused_naming_file_and_field(name, tmp_path):
    file_name, text, field = HOSTILE[name]
    path = tmp_path / file_name
    path.write_text(text)
    # under 2,000 characters: a message that quotes a hostile value whole is refused too
    refused(lambda: import_file(path), str(path), field, error=UnmappableConfig, max_chars=2000)


def test_cli_exit_2_without_traceback(tmp_path, capsys):
    for name in ("hf_deep_json", "nanogpt_repeated_squaring", "toml_deep_arrays", "hf_hidden_nan"):
        file_name, text, _ = HOSTILE[name]
        path = tmp_path / file_name
        path.write_text(text)
        cli_refused(["import", str(path), "-o", str(tmp_path / "out.yaml")], capsys, str(path))
        assert not (tmp_path / "out.yaml").exists(), "nothing written for a refused config"


def test_a_5000_character_dataset_name_imports_with_a_short_source_name(tmp_path, hang_guard):
    """It was refused as "YAML syntax error: mapping values are not allowed here" (a plain YAML key is at most
    1,024 characters): names an importer derives are cut to the schema's 100."""
    path = tmp_path / "long.py"
    path.write_text(_nanogpt("dataset = '" + "d" * 5000 + "'"))
    imported = import_file(path)
    (source,) = imported.loaded.spec.data.sources
    assert source == "d" * 100
