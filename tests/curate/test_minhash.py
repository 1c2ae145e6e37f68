"""runlib.curate.minhash: the vectorised shingling equals the reference simplification, signatures are
deterministic (across batches, blocks and processes, pinned values) and estimate the Jaccard similarity."""

import random
import subprocess
import sys

import numpy as np

from runlib.bench.minhash_speed import _shingle_set, jaccard, make_corpus
from runlib.curate import minhash
from runlib.curate.minhash import shingle_hashes, signatures, simplified_words, simplify_text

TRICKY = [
    "Ünïcödé \u2014 naïve café\u2019s 3,5 % of 1.000.000 İstanbul x_y\tz\nq \u201cquoted\u201d \u0663\u0664 end",
    "日本語のテキスト、句読点。 Ωμέγα σίγμα! e\u0301te\u0301 \u00a0nbsp\u2003em",
    "___ --- ... 12.5 0,5 a.b a_b CAPS MiXeD",
    "",
    "   \n\t ",
    "single",
]


def test_byte_level_words_are_the_reference_words():
    for text in TRICKY:
        words = simplified_words(text)
        assert " ".join(words) == simplify_text(text)
        if not words:
            continue
        # 1-grams: one hash per word, equal to hashing the reference's simplified text
        assert np.array_equal(shingle_hashes(text, 1), shingle_hashes(simplify_text(text), 1)), text
        assert len(shingle_hashes(text, 1)) == len(words)
        distinct = {w: h for w, h in zip(words, shingle_hashes(text, 1).tolist(), strict=True)}
        assert len(set(distinct.values())) == len(distinct)  # no collision among these words
    assert simplify_text(TRICKY[0]).split()[:4] == ["unicode", "naive", "cafe", "s"]


def test_signatures_do_not_depend_on_batches_or_blocks(monkeypatch):
    rng = random.Random(3)
    texts = make_corpus(40, 60, seed=5) + TRICKY + [" ".join(str(rng.random()) for _ in range(5))]
    expected = signatures(texts, 5, 112)
    monkeypatch.setattr(minhash, "_BATCH_BYTES", 300)
    monkeypatch.setattr(minhash, "_BLOCK", 7)
    assert np.array_equal(signatures(texts, 5, 112), expected)
    assert np.array_equal(signatures(texts[::-1], 5, 112), expected[::-1])


PINNED_TEXT = "The quick brown fox jumps over the lazy dog; 42 times, naïvely!"
PINNED_FIRST_8 = [606120140, 74205394, 320640363, 89113774, 766958685, 395626856, 120649857, 273607898]


def test_signatures_are_pinned_and_equal_in_another_process():
    """Values fixed for seed 1: a change here changes every curate_shard output (bump its STAGE_VERSIONS)."""
    sig = signatures([PINNED_TEXT], 5, 112)
    assert sig.dtype == np.uint64 and int(sig.max()) < 2**32
    assert sig[0, :8].tolist() == PINNED_FIRST_8
    code = (
        "from runlib.curate.minhash import signatures; import sys; "
        f"sys.stdout.write(' '.join(map(str, signatures([{PINNED_TEXT!r}], 5, 112)[0].tolist())))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.split() == [str(v) for v in sig[0].tolist()]


def test_signatures_estimate_the_jaccard_similarity():
    texts = make_corpus(160, 300, seed=11)
    sets = [_shingle_set(t) for t in texts]
    sigs = signatures(texts, 5, 112)
    errors = []
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            exact = jaccard(sets[i], sets[j])
            if exact > 0.3:
                errors.append((sigs[i] == sigs[j]).mean() - exact)
    assert len(errors) >= 20
    errors = np.array(errors)
    # 112 permutations: standard error sqrt(J (1 - J) / 112) <= 0.047 per pair; the mean over >= 20 pairs
    # is unbiased within a few hundredths, and no pair is off by more than 5 standard errors
    assert abs(errors.mean()) < 0.03, errors.mean()
    assert np.abs(errors).max() < 0.24
    unrelated = [
        (sigs[i] == sigs[j]).mean() for i in range(20) for j in range(i + 1, 20) if jaccard(sets[i], sets[j]) == 0
    ]
    assert np.mean(unrelated) < 0.01
