"""Tokenizer training: layout, determinism, digits, domain and drop tokens, literal specials, pretrained."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from runlib.errors import UserError
from runlib.spec.models import TokenizerSpec
from runlib.tokenizer.config import TokenizerConfig
from runlib.tokenizer.special import EOS, FIM_PREFIX, PAD, special_ids, special_tokens
from runlib.tokenizer.train import byte_level, decode, load_tokenizer, train_tokenizer
from tests.curated import write_curated

CODE_MODULES = (
    "json/encoder.py",
    "json/decoder.py",
    "textwrap.py",
    "string.py",
    "fractions.py",
    "shlex.py",
    "bisect.py",
)
WORDS = (
    "the of and to in is was for on that with as by at from his her which have an are this be not or but had "
    "it they were their one all we can there been has more if will would who so no when also into time year "
    "river city model data train token patient dose amoxicillin café naïve résumé über 東京 数据 emoji 🙂"
).split()

SAMPLES = {
    "code": 'def f(x, y=12345):\n    """Doc: <|endoftext|> stays text."""\n    return x + y  # 3.14159\n\tpass\n',
    "prose": "The river, 2024 km long, ran past 12345 houses; naïve café-goers paid €3.50 — 東京 🙂\n\n  end.",
    "special": "before <|endoftext|><|pad|> <|fim_prefix|>x<|reserved_7|> after",
}


def stdlib_texts() -> list[str]:
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    return [(root / m).read_text(encoding="utf-8") for m in CODE_MODULES]


def prose_texts(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 15))]
            if rng.random() < 0.5:
                words.insert(rng.randrange(len(words)), rng.choice(["12345", "2024", "45", "123", "3.14", "100000"]))
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append(" ".join(sentences))
    return docs


def make_curated(root: Path) -> dict[str, Path]:
    code, prose = stdlib_texts(), prose_texts()
    return {
        "code": write_curated(root / "code", code[1:] + [SAMPLES["code"]], [code[0], SAMPLES["special"]]),
        "prose": write_curated(root / "prose", prose[20:], prose[:20] + [SAMPLES["prose"]]),
    }


def make_config(**tokenizer) -> TokenizerConfig:
    """The train_tokenizer config of a spec whose tokenizer section holds these fields."""
    fields = {
        "vocab_size": 512,
        "reserved_tokens": 8,
        "train_on": {"code": 0.5, "prose": 0.5},
        "train_bytes": 200_000,
    } | tokenizer
    return TokenizerConfig(**TokenizerSpec(**fields).model_dump())


DOMAIN = ["amoxicillin", "café"]
DROP = ["return"]


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> dict[str, Path]:
    return make_curated(tmp_path_factory.mktemp("curated"))


@pytest.fixture(scope="module")
def trained(curated, tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    summary = train_tokenizer(make_config(domain_tokens=DOMAIN, drop_tokens=DROP), curated, out)
    return summary, out / "tokenizer.json"


@pytest.fixture(scope="module")
def tok(trained):
    return load_tokenizer(trained[1])


def test_special_token_layout():
    assert special_tokens(1) == [EOS]
    assert special_tokens(2) == [EOS, PAD]
    names = special_tokens(8)
    assert names[:5] == [EOS, PAD, FIM_PREFIX, "<|fim_middle|>", "<|fim_suffix|>"]
    assert names[5:] == ["<|reserved_5|>", "<|reserved_6|>", "<|reserved_7|>"]
    assert special_ids(3) == {EOS: 0, PAD: 1, FIM_PREFIX: 2}
    with pytest.raises(ValueError):
        special_tokens(0)


def test_deterministic_bytes(curated, trained, tmp_path):
    train_tokenizer(make_config(domain_tokens=DOMAIN, drop_tokens=DROP), curated, tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == trained[1].read_bytes()


def test_vocab_layout(trained, tok):
    summary, _ = trained
    assert summary["counts"]["learned"] == 512
    assert tok.get_vocab_size(with_added_tokens=True) == 512 + 8 + len(DOMAIN)
    assert summary["counts"]["vocab_size"] == 512 + 8 + len(DOMAIN)
    for i, name in enumerate(special_tokens(8)):
        assert tok.token_to_id(name) == i
    assert summary["eos_id"] == 0 == tok.token_to_id(EOS)
    assert summary["special_ids"] == special_ids(8)
    assert json.loads(json.dumps(summary)) == summary  # the summary is plain JSON


def test_train_bytes_follow_the_weights(curated, tmp_path):
    summary = train_tokenizer(make_config(train_on={"code": 3, "prose": 1}, train_bytes=100_000), curated, tmp_path)
    assert summary["train_bytes_per_source"] == {"code": 75_000, "prose": 25_000}
    assert summary["counts"]["train_bytes"] == 100_000


def test_small_source_cycles(tmp_path):
    tiny = write_curated(tmp_path / "tiny", ["ab cd ef 12"] * 3, [])
    big = write_curated(tmp_path / "big", prose_texts(50), [])
    config = make_config(vocab_size=300, train_on={"tiny": 0.5, "big": 0.5}, train_bytes=20_000)
    summary = train_tokenizer(config, {"tiny": tiny, "big": big}, tmp_path / "out")
    assert summary["train_bytes_per_source"] == {"big": 10_000, "tiny": 10_000}  # 33 bytes of text, repeated


def test_without_train_bytes_no_document_repeats(curated, tmp_path):
    summary = train_tokenizer(make_config(train_bytes=None), curated, tmp_path)
    sizes = {
        n: sum(len(json.loads(line)["text"].encode()) for line in open(d / "train.jsonl")) for n, d in curated.items()
    }
    smaller = min(sizes, key=sizes.get)
    assert summary["train_bytes_per_source"] == dict.fromkeys(sorted(sizes), sizes[smaller])


def test_small_corpus_learns_fewer_tokens_and_says_so(tmp_path):
    src = write_curated(tmp_path / "s", ["the cat sat on the mat"] * 5, [])
    summary = train_tokenizer(
        make_config(vocab_size=5000, train_on={"s": 1}, train_bytes=1000), {"s": src}, tmp_path / "o"
    )
    assert summary["counts"]["learned"] < 5000
    assert summary["counts"]["vocab_size"] == summary["counts"]["learned"] + 8
    assert any("learned" in note for note in summary["notes"])


def test_digits_single(tok):
    assert tok.encode("12345").tokens == ["1", "2", "3", "4", "5"]
    assert tok.encode("x=2024").tokens[-4:] == ["2", "0", "2", "4"]


def test_digits_triplets_and_none(curated, tmp_path):
    train_tokenizer(make_config(digits="triplets"), curated, tmp_path / "t")
    triplets = load_tokenizer(tmp_path / "t" / "tokenizer.json")
    assert [p for p, _ in triplets.pre_tokenizer.pre_tokenize_str("12345")] == ["123", "45"]
    assert triplets.encode("12345").tokens == ["123", "45"]  # both frequent in the prose corpus
    assert all(len(t) <= 3 for t in triplets.encode("1234567890").tokens)
    train_tokenizer(make_config(digits="none"), curated, tmp_path / "n")
    plain = load_tokenizer(tmp_path / "n" / "tokenizer.json")
    assert [p for p, _ in plain.pre_tokenizer.pre_tokenize_str("x 12345")] == ["x", "Ġ12345"]


def test_domain_tokens_are_one_token(trained, tok):
    summary, _ = trained
    for word in DOMAIN:
        ids = tok.encode(word).ids
        assert len(ids) == 1 and ids[0] == summary["domain_ids"][word]
        assert ids[0] >= 512 + 8
        assert decode(tok, ids) == word
    text = "take amoxicillin at the café daily"
    ids = tok.encode(text).ids
    assert summary["domain_ids"]["amoxicillin"] in ids and summary["domain_ids"]["café"] in ids
    assert decode(tok, ids) == text


def test_drop_tokens_never_produced(curated, trained, tok, tmp_path):
    summary, _ = trained
    plain = train_tokenizer(make_config(), curated, tmp_path)  # same corpus, no drop: " return" is learned
    plain_tok = load_tokenizer(tmp_path / "tokenizer.json")
    learned = {i for t, i in plain_tok.get_vocab().items() if "return" in decode(plain_tok, [i])}
    assert plain_tok.token_to_id(byte_level(" return")) in learned
    assert learned == set(summary["dropped_ids"])
    assert plain["counts"]["vocab_size"] + len(DOMAIN) == summary["counts"]["vocab_size"]  # ids are kept
    dropped = set(summary["dropped_ids"])
    assert summary["counts"]["dropped_tokens"] == len(dropped) > 0
    texts = [*stdlib_texts(), "return", " return", "returned returns\nreturn(x)", SAMPLES["code"]]
    for text, enc in zip(texts, tok.encode_batch(texts), strict=True):
        assert not dropped & set(enc.ids)
        assert all("return" not in decode(tok, [i]) for i in enc.ids)
        assert decode(tok, enc.ids) == text


def test_literal_special_strings_stay_text(trained, tok):
    text = SAMPLES["special"]
    ids = tok.encode(text).ids
    assert not set(ids) & set(range(8))
    assert decode(tok, ids) == text
    naive = Tokenizer.from_file(str(trained[1]))  # without load_tokenizer the string becomes the EOS id
    assert 0 in naive.encode(text).ids


@pytest.mark.parametrize("name", ["code", "prose", "special"])
def test_roundtrip(tok, name):
    text = SAMPLES[name]
    assert decode(tok, tok.encode(text).ids) == text
    # tokenizers' own decode too, except on the domain token "café" (HF issue #1392: see runlib.tokenizer.train)
    plain = text.replace("café", "cafe")
    assert tok.decode(tok.encode(plain).ids) == plain


def test_roundtrip_stdlib(tok):
    texts = stdlib_texts()
    assert [decode(tok, e.ids) for e in tok.encode_batch(texts)] == texts


def test_compression_on_heldout(trained):
    summary, _ = trained
    assert set(summary["compression"]) == {"code", "prose"}
    for figures in summary["compression"].values():
        assert figures["docs"] > 0 and figures["tokens"] > 0
        assert figures["chars_per_token"] > 1.0
        assert figures["bytes_per_token"] >= figures["chars_per_token"]


def test_pretrained_copy(curated, trained, tmp_path):
    summary = train_tokenizer(make_config(vocab_size=None, pretrained=str(trained[1])), curated, tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == trained[1].read_bytes()
    assert summary["eos_id"] == 0
    assert summary["counts"]["vocab_size"] == trained[0]["counts"]["vocab_size"]
    assert summary["compression"]["code"]["tokens"] == trained[0]["compression"]["code"]["tokens"]


def test_pretrained_with_domain_and_drop_tokens(curated, tmp_path):
    train_tokenizer(make_config(), curated, tmp_path / "base")
    config = make_config(
        pretrained=str(tmp_path / "base" / "tokenizer.json"), domain_tokens=["penicillin"], drop_tokens=["def"]
    )
    summary = train_tokenizer(config, curated, tmp_path / "edited")
    tok = load_tokenizer(tmp_path / "edited" / "tokenizer.json")
    assert summary["counts"]["vocab_size"] == 512 + 8 + 1
    assert tok.encode("penicillin").ids == [summary["domain_ids"]["penicillin"]]
    text = stdlib_texts()[0]
    ids = tok.encode(text).ids
    assert summary["dropped_ids"] and not set(summary["dropped_ids"]) & set(ids)
    assert decode(tok, ids) == text


def test_pretrained_errors(curated, tmp_path):
    with pytest.raises(UserError, match="tokenizer.pretrained"):
        train_tokenizer(make_config(pretrained=str(tmp_path / "missing.json")), curated, tmp_path / "a")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(UserError, match="tokenizer.pretrained"):
        train_tokenizer(make_config(pretrained=str(bad)), curated, tmp_path / "b")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"train_on": {"code": 1, "web": 1}}, "tokenizer.train_on"),
        ({"train_on": {}}, "tokenizer.train_on"),
        ({"vocab_size": None}, "tokenizer.vocab_size"),
        ({"vocab_size": 100}, "tokenizer.vocab_size"),
        ({"reserved_tokens": 0}, "tokenizer.reserved_tokens"),
        ({"drop_tokens": ["x"]}, "tokenizer.drop_tokens"),
        ({"domain_tokens": ["returnable"], "drop_tokens": ["return"]}, "tokenizer.domain_tokens"),
        ({"domain_tokens": [EOS]}, "tokenizer.domain_tokens"),
    ],
)
def test_user_errors(curated, tmp_path, fields, field):
    with pytest.raises(UserError, match=field):
        train_tokenizer(make_config(**fields), curated, tmp_path)


def test_byte_level_spelling():
    assert byte_level(" ab") == "Ġab"
    assert byte_level("é") == "Ã©"
