"""Held-out metrics: finite, deterministic, exact token accounting, document packing, bits per byte."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from runlib.data.shards import TokenShard
from runlib.train.heldout import document_layout, heldout_metrics


def test_document_layout_restarts_positions_after_each_eos() -> None:
    eos = 0
    ids = torch.tensor([[5, 6, 0, 7, 0, 8, 9, 9], [0, 4, 4, 4, 4, 4, 4, 0]])
    positions, docs = document_layout(ids, eos)
    assert positions.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 0, 1, 2, 3, 4, 5, 6]]
    assert docs.tolist() == [[0, 0, 0, 1, 1, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 1]]


def test_metrics_are_finite_deterministic_and_count_every_target_once(source, make_model) -> None:
    model = make_model(source.vocab)
    a = heldout_metrics(model, source.token_dir, 32, source.eos, source.bytes_per_token)
    b = heldout_metrics(model, source.token_dir, 32, source.eos, source.bytes_per_token)
    assert a == b
    assert all(math.isfinite(a[k]) for k in ("loss", "perplexity", "bits_per_byte"))
    assert a["loss"] == pytest.approx(math.log(source.vocab), abs=0.3)  # a fresh model is near uniform
    assert a["perplexity"] == pytest.approx(math.exp(a["loss"]))
    shard = TokenShard(source.token_dir, "heldout")
    n, docs = shard.n_tokens, len(shard)
    # every token but the first is a target once; the first token of each later document is not scored
    assert a["tokens"] == n - docs
    assert a["text_tokens"] == n - 2 * docs  # minus each document's EOS target
    assert a["windows"] == math.ceil((n - 1) / 32)
    c = heldout_metrics(model, source.token_dir, 32, source.eos, source.bytes_per_token, batch_size=3)
    assert c["tokens"] == a["tokens"] and c["loss"] == pytest.approx(a["loss"], rel=1e-6)


def test_bits_per_byte_relation(source, make_model) -> None:
    m = heldout_metrics(make_model(source.vocab), source.token_dir, 48, source.eos, source.bytes_per_token)
    assert m["bytes"] == pytest.approx(m["text_tokens"] * source.bytes_per_token)
    assert m["bits_per_byte"] == pytest.approx(m["loss"] * m["tokens"] / (math.log(2) * m["bytes"]), rel=1e-12)
    # the tokenizer's bytes per token are those of the held-out text too (same generator): bytes ~ real bytes
    real = sum(len(t.encode()) for t in source.heldout_texts)
    assert m["bytes"] == pytest.approx(real, rel=0.1)


def test_one_window_equals_documents_scored_alone(source, make_model) -> None:
    """With the whole shard in one window, document masking makes each document independent of the others."""
    model = make_model(source.vocab).eval()
    shard = TokenShard(source.token_dir, "heldout")
    got = heldout_metrics(model, source.token_dir, shard.n_tokens, source.eos, source.bytes_per_token)
    nats, count = 0.0, 0
    with torch.no_grad():
        for i in range(len(shard)):
            doc = torch.from_numpy(shard.doc(i).astype(np.int64))[None]
            logits = model(doc[:, :-1])
            nats += F.cross_entropy(logits[0], doc[0, 1:], reduction="sum").item()
            count += doc.shape[1] - 1
    assert got["windows"] == 1 and got["tokens"] == count
    assert got["loss"] * got["tokens"] == pytest.approx(nats, rel=1e-5)


def test_max_tokens_and_training_mode(source, make_model) -> None:
    model = make_model(source.vocab).train()
    m = heldout_metrics(model, source.token_dir, 16, source.eos, source.bytes_per_token, max_tokens=100)
    assert model.training
    assert m["windows"] == math.ceil(99 / 16) and m["tokens"] <= 99


def test_a_trained_model_scores_better(source, make_model) -> None:
    model = make_model(source.vocab)
    before = heldout_metrics(model, source.token_dir, 32, source.eos, source.bytes_per_token)
    shard = TokenShard(source.token_dir, "heldout")
    data = torch.from_numpy(np.asarray(shard.tokens[: 33 * 16], dtype=np.int64)).view(16, 33)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(30):
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = heldout_metrics(model, source.token_dir, 32, source.eos, source.bytes_per_token)
    assert after["loss"] < before["loss"] - 0.5 and after["bits_per_byte"] < before["bits_per_byte"]
