"""A source tokenized in parts reads as the same stream as the source tokenized whole: the parts' shards
concatenated (SourceShard) equal the one shard, and the loader's batches are the same for any number of
parts, FIM and every packing included; a curated source tokenized shard by shard is the source tokenized whole."""

from __future__ import annotations

import numpy as np
import pytest

from runlib.data.config import TokenizeConfig
from runlib.data.loader import PhaseLoader
from runlib.data.loader_config import build_loader_config
from runlib.data.shards import SourceShard, TokenShard, open_split, token_inputs, write_shard
from runlib.data.tokenize import tokenize_part
from tests.data.test_loader import IDS, assert_batches_equal, make_docs, make_spec, phase


def split_dirs(tmp_path, docs, cuts, name="src"):
    """docs written as parts: part i holds docs[cuts[i]:cuts[i + 1]] (an empty part where two cuts meet)."""
    dirs = []
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:], strict=False)):
        write_shard(tmp_path / f"{name}{i}", "train", docs[lo:hi], "uint16")
        dirs.append(tmp_path / f"{name}{i}")
    return dirs


def test_parts_concatenate_into_the_whole(tmp_path):
    docs = make_docs(50, 3)
    whole = tmp_path / "whole"
    write_shard(whole, "train", docs, "uint16")
    one = TokenShard(whole, "train")
    many = SourceShard(split_dirs(tmp_path, docs, [0, 7, 7, 31, 50]), "train")
    assert len(many) == len(one) == 50 and many.n_tokens == one.n_tokens
    assert np.array_equal(many.offsets, one.offsets)
    positions = np.random.default_rng(0).integers(0, one.n_tokens, size=(40, 9))
    assert np.array_equal(many.tokens[positions], one.tokens[positions])
    assert np.array_equal(np.asarray(many.tokens), np.asarray(one.tokens))
    assert np.array_equal(many.tokens[5:300], one.tokens[5:300])
    assert [many.doc(i).tolist() for i in range(50)] == docs
    with pytest.raises(IndexError):
        many.tokens[np.array([one.n_tokens])]


@pytest.mark.parametrize(
    "packing, fim",
    [("document", None), ("stream", None), ("none", None), ("document", {"rate": 0.5, "spm_rate": 0.5})],
)
def test_batches_do_not_depend_on_the_parts(tmp_path, packing, fim):
    web, code = make_docs(40, 1, 1, 30), make_docs(35, 2, 1, 30)
    whole = {}
    for name, docs in (("web", web), ("code", code)):
        write_shard(tmp_path / name, "train", docs, "uint16")
        whole[name] = tmp_path / name
    parted = {
        "web": split_dirs(tmp_path, web, [0, 13, 40], "web"),
        "code": split_dirs(tmp_path, code, [0, 1, 1, 20, 35], "code"),
    }
    spec, plan = make_spec(
        [phase("a", 6, {"web": 0.5, "code": 0.5}), phase("b", 3, {"web": 0.25, "code": 0.75})], packing=packing, fim=fim
    )
    for index in (0, 1):
        config = build_loader_config(spec, plan, index)
        a, b = PhaseLoader(config, whole, IDS), PhaseLoader(config, parted, IDS)
        for step in range(a.steps):
            assert_batches_equal(a.global_batch_at(step), b.global_batch_at(step))


def test_tokenized_in_parts_equals_tokenized_whole(tmp_path):
    """tokenize_part over curated shards cut from one curated source: the shards' documents, in order, are the
    whole's (the held-out split of the middle shard empty)."""
    from runlib.tokenizer.train import train_tokenizer
    from tests.tokenizer.test_train import make_config, make_curated  # trains a real BPE on these texts

    curated = make_curated(tmp_path / "curated")["prose"]
    train_tokenizer(make_config(train_on={"prose": 1.0}), {"prose": curated}, tmp_path / "tok")
    tokenize_part(TokenizeConfig(token_dtype="auto"), curated, tmp_path / "tok", tmp_path / "whole")
    shards = [tmp_path / f"c{i}" for i in range(3)]
    for split in ("train", "heldout"):
        lines = (curated / f"{split}.jsonl").read_bytes().splitlines(keepends=True)
        cuts = [0, len(lines) // 3, len(lines) // 3 if split == "heldout" else 2 * len(lines) // 3, len(lines)]
        for i, shard in enumerate(shards):
            shard.mkdir(exist_ok=True)
            (shard / f"{split}.jsonl").write_bytes(b"".join(lines[cuts[i] : cuts[i + 1]]))
    dirs = []
    for i, shard in enumerate(shards):
        tokenize_part(TokenizeConfig(token_dtype="auto"), shard, tmp_path / "tok", tmp_path / f"p{i}")
        dirs.append(tmp_path / f"p{i}")
    assert TokenShard(dirs[1], "heldout").n_tokens == 0
    for split in ("train", "heldout"):
        one, many = TokenShard(tmp_path / "whole", split), open_split(dirs, split)
        assert np.array_equal(one.offsets, many.offsets)
        assert np.array_equal(np.asarray(one.tokens), np.asarray(many.tokens))


def test_token_inputs_orders_the_parts(tmp_path):
    roles = {
        "tokens:web/1": tmp_path / "b",
        "tokens:web/0": tmp_path / "a",
        "tokenizer": tmp_path,
        "tokens:x/0": tmp_path,
    }
    assert token_inputs(roles) == {"web": [tmp_path / "a", tmp_path / "b"], "x": [tmp_path]}
    with pytest.raises(ValueError, match="not 0 .. 1"):
        token_inputs({"tokens:web/0": tmp_path, "tokens:web/2": tmp_path})
