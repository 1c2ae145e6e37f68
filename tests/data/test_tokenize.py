"""The tokenize stage: every document back exactly (ids + EOS), counts, dtype, literal specials."""

from __future__ import annotations

import numpy as np
import pytest

from runlib.data import tokenize
from runlib.data.config import TokenizeConfig
from runlib.data.shards import TokenShard
from runlib.data.tokenize import tokenize_part
from runlib.errors import UserError
from runlib.graph.configs import tokenize_configs, tokenizer_config
from runlib.spec.loader import load_spec, validate_data
from runlib.tokenizer.train import iter_texts, load_tokenizer, train_tokenizer
from tests.conftest import ROOT
from tests.tokenizer.test_train import SAMPLES, make_config, make_curated

AUTO = TokenizeConfig(token_dtype="auto")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    curated = make_curated(tmp_path_factory.mktemp("curated"))
    tok_dir = tmp_path_factory.mktemp("tok")
    train_tokenizer(make_config(domain_tokens=["amoxicillin"]), curated, tok_dir)
    return curated, tok_dir


def expected_docs(tok, path) -> list[list[int]]:
    return [e.ids + [0] for e in tok.encode_batch([t for t in iter_texts(path)])]


@pytest.mark.parametrize("source", ["code", "prose"])
def test_documents_come_back_exactly(setup, tmp_path, source):
    curated, tok_dir = setup
    summary = tokenize_part(AUTO, curated[source], tok_dir, tmp_path)
    tok = load_tokenizer(tok_dir / "tokenizer.json")
    for split in ("train", "heldout"):
        shard = TokenShard(tmp_path, split)
        want = expected_docs(tok, curated[source] / f"{split}.jsonl")
        assert [shard.doc(i).tolist() for i in range(len(shard))] == want
        assert summary["counts"][f"docs_{split}"] == len(want)
        assert summary["counts"][f"tokens_{split}"] == sum(map(len, want)) == shard.n_tokens
        assert shard.dtype == np.uint16
    texts = list(iter_texts(curated[source] / "train.jsonl"))
    assert summary["counts"]["chars_train"] == sum(map(len, texts))
    assert summary["counts"]["bytes_train"] == sum(len(t.encode()) for t in texts)
    assert summary["dtype"] == "uint16" and summary["eos_id"] == 0
    text_tokens = summary["counts"]["tokens_train"] - summary["counts"]["docs_train"]
    assert summary["compression"]["chars_per_token"] == pytest.approx(summary["counts"]["chars_train"] / text_tokens)
    assert summary["compression"]["bytes_per_token"] >= summary["compression"]["chars_per_token"] > 1


def test_special_strings_stay_text(setup, tmp_path):
    curated, tok_dir = setup
    tokenize_part(AUTO, curated["code"], tok_dir, tmp_path)
    shard = TokenShard(tmp_path, "heldout")
    texts = list(iter_texts(curated["code"] / "heldout.jsonl"))
    i = texts.index(SAMPLES["special"])
    doc = shard.doc(i)
    assert doc[-1] == 0
    assert not np.isin(doc[:-1], np.arange(8)).any()  # no special id inside the document


def test_many_small_batches_keep_order(setup, tmp_path, monkeypatch):
    curated, tok_dir = setup
    tokenize_part(AUTO, curated["prose"], tok_dir, tmp_path / "one")
    monkeypatch.setattr(tokenize, "BATCH_BYTES", 500)
    tokenize_part(AUTO, curated["prose"], tok_dir, tmp_path / "many")
    for name in ("train.bin", "train.idx.npy", "heldout.bin", "heldout.idx.npy"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()


def test_token_dtype_uint32(setup, tmp_path):
    curated, tok_dir = setup
    summary = tokenize_part(TokenizeConfig(token_dtype="uint32"), curated["prose"], tok_dir, tmp_path)
    assert summary["dtype"] == "uint32"
    assert TokenShard(tmp_path, "train").dtype == np.uint32
    assert (tmp_path / "train.bin").stat().st_size == 4 * summary["counts"]["tokens_train"]


def test_uint16_overflow_is_a_user_error(tmp_path):
    from tokenizers import Tokenizer, models

    vocab = {"<|endoftext|>": 0} | {f"t{i}": i + 1 for i in range(70_000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    with pytest.raises(UserError, match="data.token_dtype"):
        tokenize_part(TokenizeConfig(token_dtype="uint16"), tmp_path, tmp_path / "tok", tmp_path / "out")


def test_with_a_real_run_spec(setup, tmp_path):
    curated, tok_dir = setup
    data = load_spec(ROOT / "specs" / "demo.yaml").data
    data["tokenizer"] |= {"vocab_size": 512, "reserved_tokens": 8, "train_on": {"docs": 1.0}, "train_bytes": "50K"}
    spec = validate_data(data).spec
    summary = train_tokenizer(tokenizer_config(spec), {"docs": curated["prose"]}, tmp_path / "tok")
    assert summary["train_bytes_per_source"] == {"docs": 50_000}
    result = tokenize_part(tokenize_configs(spec)["docs"], curated["prose"], tmp_path / "tok", tmp_path / "out")
    assert result["counts"]["docs_train"] == len(TokenShard(tmp_path / "out", "train"))
