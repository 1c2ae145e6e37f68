"""runlib.curate.ngram_lm: CCNet's normalization, interpolated modified Kneser-Ney checked against the
formulas (by hand on a tiny corpus, and against a plain dict-based re-derivation on a small one), every
context's distribution summing to 1, perplexities that rank text as expected, and a file that is
byte-for-byte deterministic and refuses to load when damaged."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from functools import cache

import numpy as np
import pytest

from runlib.curate import ngram_lm
from runlib.curate.ngram_lm import (
    BOS,
    FALLBACK_DISCOUNTS,
    load_ngram_lm,
    next_word_log10_probs,
    normalize_for_lm,
    perplexities,
    perplexity,
    perplexity_bucket,
    perplexity_cutoffs,
    save_ngram_lm,
    train_ngram_lm,
)


def names(first: str, n: int) -> list[str]:
    return [first + chr(97 + i // 26) + chr(97 + i % 26) for i in range(n)]  # letters: digits would become 0


NOUNS, VERBS, ADJECTIVES = ["cat", "dog", *names("n", 28)], ["sees", *names("v", 11)], ["big", *names("j", 9)]


def pick(rng: random.Random, words: list[str]) -> str:
    return rng.choices(words, weights=[1 / rank for rank in range(1, len(words) + 1)])[0]  # Zipf's law


def sentence(rng: random.Random) -> str:
    """A toy grammar: structured, so that the order matters, and Zipfian, so that the count-of-counts give
    modified Kneser-Ney's three discounts at every order rather than the fallback."""
    words = ["the", *([pick(rng, ADJECTIVES)] if rng.random() < 0.5 else []), pick(rng, NOUNS), pick(rng, VERBS)]
    words += ["a", pick(rng, NOUNS)] if rng.random() < 0.7 else []
    return " ".join(words)


def corpus(seed: int, sentences: int) -> list[str]:
    rng = random.Random(seed)
    return ["\n".join(sentence(rng) for _ in range(rng.randint(1, 4))) for _ in range(sentences // 2)]


@pytest.fixture(scope="module")
def toy() -> ngram_lm.NgramLM:
    return train_ngram_lm(corpus(0, 400), order=3)


def test_normalization_is_ccnets_with_words_and_punctuation_split():
    text = (
        "Élan, 1984! İstanbul \u2014 \u201cQuoted\u201d naïve\tcafé\u2019s x\x00y \u0661\u0662\u0663 日本語、テキスト。"
    )
    assert normalize_for_lm(text) == [
        *["elan", ",", "0000", "!", "istanbul", "-", '"', "quoted", '"', "naive", "cafe", "'", "s"],
        *["xy", "000", "日本語", ",", "テキスト", "."],
    ]
    # the special tokens cannot come from text: "<" and ">" are tokens of their own
    assert normalize_for_lm("<s> </s> <unk>") == ["<", "s", ">", "<", "/", "s", ">", "<", "unk", ">"]
    assert normalize_for_lm("") == normalize_for_lm(" \n\t\n") == []
    assert normalize_for_lm("ONE\ntwo\r\nthree") == ["one", "two", "three"]


def test_a_bigram_by_hand():
    """Order 2 on three sentences: <s> a b </s>, <s> a c </s>, <s> b </s>.

    Bigram counts (the highest order: raw): <s> a 2, <s> b 1, a b 1, a c 1, b </s> 2, c </s> 1.
    Count-of-counts n1 = 4, n2 = 2, n3 = 0: no D3+ estimate, so KenLM's fallback D = 0.5, 1, 1.5.
    Unigram adjusted counts (distinct left neighbours): a 1 {<s>}, b 2 {<s>, a}, c 1 {a}, </s> 2 {b, c},
    <unk> 0, <s> 0; n3 = 0 again: fallback. Sum 6; discounts 0.5 + 1 + 0.5 + 1 = 3, gamma() = 3/6 = 1/2;
    the uniform is over a b c </s> <unk>: 1/5. So p(a) = (1 - 0.5)/6 + 1/2 * 1/5 = 11/60,
    p(b) = (2 - 1)/6 + 1/10 = 16/60, p(</s>) = 16/60, p(<unk>) = 6/60.
    Context "a": a b 1, a c 1; sum 2, gamma(a) = (0.5 + 0.5)/2 = 1/2:
        p(b | a) = (1 - 0.5)/2 + 1/2 * p(b) = 1/4 + 8/60 = 23/60.
    Context "<s>": <s> a 2, <s> b 1; sum 3, gamma(<s>) = (1 + 0.5)/3 = 1/2: p(a | <s>) = 1/3 + 11/120 = 51/120.
    Context "b": b </s> 2; gamma(b) = 1/2: p(</s> | b) = (2 - 1)/2 + 1/2 * 16/60 = 38/60.
    Unseen bigram a a: gamma(a) p(a) = 11/120. Perplexity of "a b": (51/120 * 23/60 * 38/60) ** (-1/3)."""
    model = train_ngram_lm(["a b\na c", "b"], order=2)
    assert model.vocab == ("<unk>", "<s>", "</s>", "a", "b", "c")
    assert model.discounts == (FALLBACK_DISCOUNTS, FALLBACK_DISCOUNTS) and all(model.discount_fallback)
    unigram = 10 ** next_word_log10_probs(model, [])
    assert unigram == pytest.approx([6 / 60, 0, 16 / 60, 11 / 60, 16 / 60, 11 / 60], abs=1e-7)
    after_a = 10 ** next_word_log10_probs(model, ["a"])
    assert after_a[model.word_ids["b"]] == pytest.approx(23 / 60, rel=1e-6)
    assert after_a[model.word_ids["a"]] == pytest.approx(11 / 120, rel=1e-6)
    assert 10 ** next_word_log10_probs(model, ["<s>"])[model.word_ids["a"]] == pytest.approx(51 / 120, rel=1e-6)
    assert perplexity(model, "a b") == pytest.approx((51 / 120 * 23 / 60 * 38 / 60) ** (-1 / 3), rel=1e-6)
    assert perplexity(model, "A, B") != perplexity(model, "a b")  # "," is a token (unknown here)
    assert perplexity(model, "A B\n\n") == pytest.approx(perplexity(model, "a b"), rel=1e-12)


def test_discounts_follow_chen_and_goodman_equation_26():
    # n1 = 10, n2 = 5, n3 = 3, n4 = 2: Y = 10 / (10 + 2 * 5) = 1/2;
    # D1 = 1 - 2 Y n2/n1 = 0.5, D2 = 2 - 3 Y n3/n2 = 1.1, D3+ = 3 - 4 Y n4/n3 = 5/3
    counts = np.asarray([1] * 10 + [2] * 5 + [3] * 3 + [4] * 2 + [9, 0], dtype=np.int64)
    (d1, d2, d3), fallback = ngram_lm._discounts(counts)
    assert (d1, d2, d3) == pytest.approx((0.5, 1.1, 5 / 3)) and not fallback
    assert ngram_lm._discounts(counts[counts != 3]) == (FALLBACK_DISCOUNTS, True)  # n3 = 0
    # D1 = n1 / (n1 + 2 n2) is always in (0, 1]; D2 = 2 - 3 Y n3/n2 is not: n1 = 10, n2 = 1, n3 = 10 give
    # Y = 10/12 and D2 = 2 - 25 < 0, out of range: the fallback
    assert ngram_lm._discounts(np.asarray([1] * 10 + [2] + [3] * 10, dtype=np.int64)) == (FALLBACK_DISCOUNTS, True)


def reference_kn(sentences: list[list[str]], order: int):
    """Interpolated modified Kneser-Ney straight from the definitions, on dicts: the model's arrays,
    searches and backoff form are checked against this, not against themselves."""
    raw: Counter[tuple[str, ...]] = Counter()
    for words in sentences:
        tokens = ["<s>", *words, "</s>"]
        for k in range(1, order + 1):
            raw.update(tuple(tokens[i : i + k]) for i in range(len(tokens) - k + 1))
    left: dict[tuple[str, ...], set[str]] = {}
    for gram in raw:
        left.setdefault(gram[1:], set()).add(gram[0])

    def adjusted(gram: tuple[str, ...]) -> int:
        if gram == ("<s>",):
            return 0
        return raw[gram] if len(gram) == order or gram[0] == "<s>" else len(left.get(gram, ()))

    discounts = {}
    for k in range(1, order + 1):
        n = Counter(adjusted(g) for g in raw if len(g) == k)  # n[j]: how many have exactly j
        y = n[1] / (n[1] + 2 * n[2]) if n[1] and n[2] and n[3] else math.nan
        d = [j - (j + 1) * y * n[j + 1] / n[j] if n[j] else math.nan for j in (1, 2, 3)]
        discounts[k] = [
            0.0,
            *(d if all(0 <= dj <= j for j, dj in zip((1, 2, 3), d, strict=True)) else FALLBACK_DISCOUNTS),
        ]
    followers: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for gram in raw:
        followers.setdefault(gram[:-1], []).append(gram)
    predicted = sorted({w for g in raw for w in g if w != "<s>"} | {"<unk>"})

    @cache
    def prob(context: tuple[str, ...], word: str) -> float:
        grams = followers.get(context, [])
        if context and not grams:
            return prob(context[1:], word)  # nothing seen after this context
        d = discounts[len(context) + 1]
        total = sum(adjusted(g) for g in grams)
        gamma = sum(d[min(adjusted(g), 3)] for g in grams) / total
        a = adjusted((*context, word)) if (*context, word) in raw else 0
        lower = prob(context[1:], word) if context else 1 / len(predicted)
        return (a - d[min(a, 3)]) / total + gamma * lower

    return prob, discounts, predicted, followers


@pytest.mark.parametrize("order", [3, 4])
def test_probabilities_equal_the_reference_derivation(order):
    texts = corpus(2, 200)
    model = train_ngram_lm(texts, order=order)
    prob, discounts, predicted, followers = reference_kn([line.split() for t in texts for line in t.split("\n")], order)
    assert not any(model.discount_fallback)  # the three-discount estimate, not the fallback, at every order
    for k in range(1, order + 1):
        assert model.discounts[k - 1] == pytest.approx(discounts[k][1:], rel=1e-12)
    assert set(model.vocab) - {"<s>"} == set(predicted)
    contexts = sorted(c for c in followers if len(c) < order)[::6] + [("zzz",), ("the", "zzz"), ("zzz", "the")]
    for context in contexts:
        got = 10 ** next_word_log10_probs(model, list(context))
        want = [prob(context, w) if w != "<s>" else 0.0 for w in model.vocab]
        assert got == pytest.approx(want, rel=2e-6, abs=1e-12), context


@pytest.mark.parametrize("order", [2, 3, 5])
def test_every_context_sums_to_one(order):
    model = train_ngram_lm(corpus(2, 200), order=order)
    words = [w for w in model.vocab if w != "<s>"]
    rng = random.Random(order)
    contexts = [[], ["<s>"], ["<unk>"], ["zzz"], ["</s>"], ["the", "</s>"], ["a"] * 7]
    contexts += [["<s>", *sentence(rng).split()][: rng.randint(1, order)] for _ in range(20)]  # seen, mostly
    contexts += [[rng.choice(words) for _ in range(rng.randint(1, order))] for _ in range(20)]  # unseen, mostly
    for context in contexts:
        log_p = next_word_log10_probs(model, context)
        assert log_p[BOS] == -math.inf
        assert float(np.sum(10.0**log_p)) == pytest.approx(1.0, abs=1e-5), context


def test_document_scores_are_the_conditionals_of_its_lines(toy):
    """perplexities() (vectorised, longest match + backoffs) agrees with next_word_log10_probs (per context,
    order by order), on lines with unknown words, blank lines and a line longer than the order."""
    text = "The dog chases a cat\n\nthe zebra sees a small dog a big fish\nFISH"
    log10, tokens = 0.0, 0
    for line in text.split("\n"):
        words = normalize_for_lm(line)
        if not words:
            continue
        context = ["<s>"]
        for w in [*words, "</s>"]:
            log10 += float(next_word_log10_probs(toy, context)[toy.word_ids.get(w, 0)])
            context.append(w)
            tokens += 1
    assert perplexity(toy, text) == pytest.approx(10 ** (-log10 / tokens), rel=1e-5)


def test_text_like_the_reference_scores_lower(toy):
    rng = random.Random(7)
    held_out = corpus(3, 60)
    shuffled = []
    for text in held_out:
        words = normalize_for_lm(text)
        rng.shuffle(words)
        shuffled.append(" ".join(words))
    noise = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(len(t))) for t in held_out]
    good, bad, worse = (np.median(perplexities(toy, texts)) for texts in (held_out, shuffled, noise))
    assert good < bad < worse
    assert good < 10  # a toy grammar: a few choices per word


def test_empty_documents_score_inf_and_batches_do_not_matter(toy, monkeypatch):
    assert perplexity(toy, "") == math.inf
    assert perplexity(toy, " \n\t\n ") == math.inf
    assert len(perplexities(toy, [])) == 0
    texts = ["", *corpus(4, 40), "", "\n\n", "zebra"]
    once = perplexities(toy, texts)
    assert once[0] == once[-3] == once[-2] == math.inf and np.isfinite(once[1:-3]).all() and np.isfinite(once[-1])
    monkeypatch.setattr(ngram_lm, "_SCORE_BATCH_TOKENS", 7)
    monkeypatch.setattr(ngram_lm, "_CHUNK_CACHE_MAX_ENTRIES", 3)
    assert np.array_equal(perplexities(toy, texts), once)
    assert [perplexity(toy, t) for t in texts] == pytest.approx(list(once), rel=1e-12)


def test_order_out_of_range_and_no_text():
    for order in (0, 1, 6, True, 3.0, "3"):
        with pytest.raises(ValueError, match="order must be an integer from 2 to 5"):
            train_ngram_lm(["a b c"], order=order)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no tokens"):
        train_ngram_lm(["", " \n "])
    short = train_ngram_lm(["a", "b"], order=5)  # no sentence long enough for 4- or 5-grams
    assert short.ngram_counts[3:] == (0, 0)
    assert math.isfinite(perplexity(short, "a b a b a b"))


def test_saved_files_are_deterministic_and_round_trip(tmp_path):
    texts = corpus(5, 200)
    first, second = tmp_path / "a.lm", tmp_path / "b.lm"
    save_ngram_lm(train_ngram_lm(texts, order=4), first)
    save_ngram_lm(train_ngram_lm(texts, order=4), second)
    assert first.read_bytes() == second.read_bytes()
    loaded = load_ngram_lm(first)
    save_ngram_lm(loaded, second)
    assert first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.lm", "b.lm"]  # no temporary file left behind
    header = json.loads(first.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "runlib-ngram-lm" and header["order"] == 4
    assert header["vocab_size"] == len(loaded.vocab) and header["ngram_counts"] == list(loaded.ngram_counts)
    assert np.array_equal(perplexities(loaded, texts[:20]), perplexities(train_ngram_lm(texts, order=4), texts[:20]))


def test_damaged_files_raise_value_error_naming_the_file(tmp_path):
    path = tmp_path / "model.lm"
    save_ngram_lm(train_ngram_lm(corpus(6, 100), order=3), path)
    good = path.read_bytes()
    head, payload = good.split(b"\n", 1)
    header = json.loads(head)

    def rewritten(**fields: object) -> bytes:
        return json.dumps({**header, **fields}).encode() + b"\n" + payload

    flipped = bytearray(good)
    flipped[len(head) + 1 + len(payload) // 2] ^= 0x01
    cases = {
        "empty": b"",
        "garbage": bytes(random.Random(0).randrange(256) for _ in range(5000)),
        "truncated header": good[:20],
        "truncated payload": good[: len(good) // 2],
        "one byte short": good[:-1],
        "one byte more": good + b"\0",
        "a payload bit flipped": bytes(flipped),
        "not json": b"{not json\n" + payload,
        "json but a list": b"[1, 2]\n" + payload,
        "deeply nested json": b"[" * 200_000 + b"\n" + payload,
        "another format": rewritten(format="kenlm-arpa"),
        "a newer version": rewritten(format_version=2),
        "another normalization": rewritten(normalization="sentencepiece"),
        "an order its arrays lack": rewritten(order=5),
        "a manifest out of range": rewritten(arrays=[{**a, "offset": 1 << 40} for a in header["arrays"]]),
        "a manifest of strings": rewritten(arrays=["x"]),
    }
    for what, data in cases.items():
        path.write_bytes(data)
        with pytest.raises(ValueError, match="model.lm") as raised:
            load_ngram_lm(path)
        assert str(path) in str(raised.value), what
        assert raised.value.__cause__ is None and raised.value.__suppress_context__, what


def test_buckets_split_at_ccnets_percentiles():
    values = [*range(1, 101), math.inf, math.nan]
    head, tail = perplexity_cutoffs(values)
    assert (head, tail) == pytest.approx((30.7, 60.4))
    assert [perplexity_bucket(v, (head, tail)) for v in (1, 30.7, 45, 60.4, 1e9, math.inf, math.nan)] == [
        *["head", "middle", "middle", "tail", "tail", "tail", "tail"]
    ]
    with pytest.raises(ValueError, match="no finite perplexity"):
        perplexity_cutoffs([math.inf])
