"""Token shards: exact documents back, dtype choice and limits, atomic files."""

from __future__ import annotations

import numpy as np
import pytest

from runlib.data import shards
from runlib.data.shards import ShardWriter, TokenShard, token_dtype, write_shard
from runlib.errors import UserError


def random_docs(n: int, high: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, size=int(rng.integers(0, 50))).tolist() for _ in range(n)]


@pytest.mark.parametrize("dtype", ["uint16", "uint32", np.uint16, np.dtype(np.uint32)])
def test_roundtrip(tmp_path, dtype):
    high = 65536 if np.dtype(dtype) == np.uint16 else 2**32
    docs = random_docs(200, high) + [[], [high - 1, 0]]
    info = write_shard(tmp_path, "train", docs, dtype)
    assert info == {
        "split": "train",
        "docs": len(docs),
        "tokens": sum(map(len, docs)),
        "dtype": np.dtype(dtype).name,
        "bin": "train.bin",
        "idx": "train.idx.npy",
    }
    shard = TokenShard(tmp_path, "train")
    assert len(shard) == len(docs)
    assert shard.n_tokens == sum(map(len, docs)) == shard.tokens.size
    assert shard.dtype == np.dtype(dtype)
    for i, doc in enumerate(docs):
        assert shard.doc(i).tolist() == doc
    assert shard.doc(-1).tolist() == docs[-1]
    assert shard.doc_lengths().tolist() == [len(d) for d in docs]
    with pytest.raises(IndexError):
        shard.doc(len(docs))
    assert (tmp_path / "train.bin").stat().st_size == shard.n_tokens * np.dtype(dtype).itemsize
    offsets = np.load(tmp_path / "train.idx.npy")
    assert offsets.dtype == np.int64 and offsets.size == len(docs) + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.bin", "train.idx.npy"]  # no temporary left


def test_numpy_documents_and_many_flushes(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "FLUSH_TOKENS", 7)
    docs = [np.arange(i, dtype=np.int64) for i in range(30)]
    write_shard(tmp_path, "heldout", iter(docs), "uint16")
    shard = TokenShard(tmp_path, "heldout")
    assert [shard.doc(i).tolist() for i in range(len(shard))] == [d.tolist() for d in docs]


def test_add_chunk(tmp_path):
    with ShardWriter(tmp_path, "train", np.uint16) as writer:
        writer.add([1, 2, 3])
        writer.add_chunk(np.array([4, 5, 6, 7], dtype=np.uint16), np.array([1, 3]))
        writer.add([])
        info = writer.close()
    assert info["docs"] == 4 and info["tokens"] == 7
    shard = TokenShard(tmp_path, "train")
    assert [shard.doc(i).tolist() for i in range(4)] == [[1, 2, 3], [4], [5, 6, 7], []]
    with ShardWriter(tmp_path, "x", np.uint16) as writer, pytest.raises(ValueError, match="lengths"):
        writer.add_chunk(np.array([1, 2], dtype=np.uint16), np.array([3]))


def test_empty_shard(tmp_path):
    write_shard(tmp_path, "heldout", [], "uint32")
    shard = TokenShard(tmp_path, "heldout")
    assert len(shard) == 0 and shard.n_tokens == 0 and shard.tokens.size == 0


def test_id_too_large_for_dtype(tmp_path):
    with pytest.raises(ValueError, match="65536"):
        write_shard(tmp_path, "train", [[1, 65536]], "uint16")
    with pytest.raises(ValueError):
        write_shard(tmp_path, "train", [[-1]], "uint32")
    assert not list(tmp_path.iterdir())  # nothing half-written stays


def test_only_uint16_and_uint32(tmp_path):
    with pytest.raises(ValueError):
        write_shard(tmp_path, "train", [[1]], "int32")


def test_token_dtype():
    assert token_dtype("auto", 100) == np.uint16
    assert token_dtype("auto", 65535) == np.uint16
    assert token_dtype("auto", 65536) == np.uint32
    assert token_dtype("uint16", 65535) == np.uint16
    assert token_dtype("uint32", 10) == np.uint32
    with pytest.raises(UserError, match="data.token_dtype"):
        token_dtype("uint16", 65536)
    with pytest.raises(UserError, match="data.token_dtype"):
        token_dtype("uint8", 10)


def test_corrupt_shard_is_refused(tmp_path):
    write_shard(tmp_path, "train", [[1, 2, 3]], "uint16")
    with open(tmp_path / "train.bin", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ValueError, match="do not hold"):
        TokenShard(tmp_path, "train")
