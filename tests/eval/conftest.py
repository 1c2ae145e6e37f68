"""A tiny trained tokenizer, a tokenized source with a held-out shard, and tiny models, shared by the eval tests."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from runlib.audit.cases import case_data
from runlib.data.config import TokenizeConfig
from runlib.data.tokenize import tokenize_part
from runlib.graph.configs import tokenizer_config
from runlib.model.transformer import Transformer
from runlib.spec.loader import validate_data
from runlib.spec.models import ModelSpec
from runlib.tokenizer.train import TOKENIZER_FILE, eos_id, load_tokenizer, train_tokenizer
from tests.curated import write_curated

WORDS = (
    "the of and to in is was for on that with as by at from his her which have an are this be not or but had "
    "it they were their one all we can there been has more if will would who so no when also into time year "
    "river city model data train token quick brown fox jumps over lazy dog"
).split()


def prose(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize() + "."
            for _ in range(rng.randint(3, 7))
        ]
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> SimpleNamespace:
    """A source "web": 300 training documents, 12 held-out ones, a 400-token BPE, and its token shards."""
    root = tmp_path_factory.mktemp("eval-source")
    heldout = prose(12, seed=1)
    curated = write_curated(root / "curated" / "web", prose(300, seed=0), heldout)
    spec = validate_data(
        case_data(
            {
                "tokenizer.vocab_size": 400,
                "tokenizer.reserved_tokens": 8,
                "tokenizer.train_on": {"web": 1.0},
                "tokenizer.train_bytes": 200_000,
            }
        )
    ).spec
    train_tokenizer(tokenizer_config(spec), {"web": curated}, root / "tokenizer")
    tokens = TokenizeConfig(token_dtype=spec.data.token_dtype)
    summary = tokenize_part(tokens, curated, root / "tokenizer", root / "tokens" / "web")
    tok = load_tokenizer(root / "tokenizer" / TOKENIZER_FILE)
    return SimpleNamespace(
        tokenizer=tok,
        token_dir=root / "tokens" / "web",
        heldout_texts=heldout,
        eos=eos_id(tok),
        bytes_per_token=summary["compression"]["bytes_per_token"],
        vocab=tok.get_vocab_size(with_added_tokens=True),
    )


def tiny_model(vocab: int, seed: int = 0, max_seq_len: int = 256) -> Transformer:
    torch.manual_seed(seed)
    spec = ModelSpec(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, seq_len=64, tie_embeddings=True)
    return Transformer(spec, vocab, max_seq_len)


@pytest.fixture
def make_model():
    return tiny_model
