"""Benchmark MinHash: runlib's signatures against rensa and datasketch, speed and near-duplicate recall.

    python -m runlib.bench.minhash_speed [--docs 4000] [--words 400] [--repeats 5] [--threshold 0.72]

Measures, on one synthetic corpus with planted near-duplicates (documents of Zipf-distributed words with
capitals, punctuation, numbers and accented words; a third of them copied with word substitutions until
the copy's exact word 5-gram Jaccard reaches a drawn level in 0.5..1):
  * speed: signatures per second at bands * rows = 14 * 8 = 112 permutations (FineWeb's, the curate
    default), from the raw text to a (docs, 112) numpy matrix, interleaved (runlib, rensa, datasketch,
    runlib, ...), --repeats rounds, medians and ratios to runlib;
  * quality: each implementation's signatures go through the same LSH (runlib.curate.minhash.duplicates'
    banding and union-find, 14 bands of 8 rows, as the curate_source stage does); a pair is predicted when
    its two documents end in one cluster, and true when its exact 5-gram Jaccard (word tuples, no hashing)
    is >= --threshold. Recall and precision over pairs, per Jaccard band too, and the banding's own
    S-curve 1 - (1 - J^rows)^bands for comparison (the recall ceiling of any exact MinHash).
The shingling is the same for all three: runlib.curate.minhash.simplified_words, word 5-grams joined by a
space (fewer words: one shingle); rensa gets the shingle strings (RMinHash.digest_matrix_from_token_sets,
rensa's bulk path), datasketch gets their UTF-8 bytes (MinHash.update_batch).
Peers: rensa 0.5.0 (Rust, R-MinHash), datasketch 2.0.0 (numpy). Install them with
`pip install rensa==0.5.0 datasketch==2.0.0`; a missing peer is reported and skipped.
Goal (issue 9): runlib >= 0.8x rensa's signatures/s with recall >= 97% of the true pairs.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from runlib.curate import minhash

NGRAM = 5
BANDS, ROWS = 14, 8
SEED = 1
JACCARD_LEVELS = (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
REPORT_BINS = ((0.0, 0.6), (0.6, 0.72), (0.72, 0.8), (0.8, 0.9), (0.9, 1.01))


# ---------------------------------------------------------------------------------------------- corpus


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    accented = "éèàüöçñ"
    words = set()
    while len(words) < size:
        n = min(12, max(1, int(rng.expovariate(1 / 5)) + 1))
        word = "".join(rng.choice(letters) for _ in range(n))
        if rng.random() < 0.03:
            i = rng.randrange(len(word))
            word = word[:i] + rng.choice(accented) + word[i + 1 :]
        words.add(word)
    return sorted(words)


class _Writer:
    def __init__(self, rng: random.Random, vocab_size: int = 20_000) -> None:
        self.rng = rng
        self.vocab = _vocabulary(rng, vocab_size)
        weights = [1 / (rank + 1) ** 1.05 for rank in range(vocab_size)]
        self.cum = list(np.cumsum(weights))

    def word(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.02:
            return str(rng.randrange(10_000)) + (f".{rng.randrange(100)}" if rng.random() < 0.3 else "")
        word = rng.choices(self.vocab, cum_weights=self.cum)[0]
        if r < 0.08:
            word = word.capitalize()
        if rng.random() < 0.08:
            word += rng.choice([",", ".", ";", "!", "?", ":"])
        return word

    def doc(self, mean_words: int) -> list[str]:
        n = max(3, int(self.rng.lognormvariate(np.log(mean_words), 0.5)))
        return [self.word() for _ in range(n)]


def _shingle_set(text: str, ngram: int = NGRAM) -> set[tuple[str, ...]]:
    words = minhash.simplified_words(text)
    n = min(ngram, len(words))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)} or {()}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def make_corpus(docs: int, mean_words: int, seed: int = 0) -> list[str]:
    """docs texts: originals, and near copies of a third of them at a drawn Jaccard level, shuffled."""
    rng = random.Random(seed)
    writer = _Writer(rng)
    originals = max(1, round(docs * 0.75))
    words = [writer.doc(mean_words) for _ in range(originals)]
    texts = [" ".join(w) for w in words]
    while len(texts) < docs:
        source = rng.randrange(originals)
        target = rng.choice(JACCARD_LEVELS)
        copy = list(words[source])
        base = _shingle_set(texts[source])
        # substitute random words, a few at a time, while the copy stays at or above the target
        while True:
            trial = list(copy)
            for _ in range(max(1, len(copy) // 200)):
                trial[rng.randrange(len(trial))] = writer.word()
            if jaccard(base, _shingle_set(" ".join(trial))) < target:
                break
            copy = trial
        texts.append(" ".join(copy))
    rng.shuffle(texts)
    return texts


def true_pairs(texts: list[str], ngram: int = NGRAM) -> dict[tuple[int, int], float]:
    """Exact word n-gram Jaccard of every pair sharing a shingle (word tuples, no hashing)."""
    sets = [_shingle_set(t, ngram) for t in texts]
    postings: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        for shingle in s:
            postings[shingle].append(i)
    shared: dict[tuple[int, int], int] = defaultdict(int)
    for ids in postings.values():
        if 1 < len(ids) <= 200:  # a shingle in > 200 documents is boilerplate; its pairs are checked below
            for x in range(len(ids)):
                for y in range(x + 1, len(ids)):
                    shared[ids[x], ids[y]] += 1
    return {
        (i, j): count / (len(sets[i]) + len(sets[j]) - count)
        for (i, j), count in shared.items()
        if count / (len(sets[i]) + len(sets[j]) - count) >= 0.3
    }


# -------------------------------------------------------------------------------------- implementations


def _shingle_strings(text: str, ngram: int = NGRAM) -> list[str]:
    words = minhash.simplified_words(text)
    n = min(ngram, len(words))
    if n == 0:
        return [""]
    return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]


def runlib_signatures(module) -> Callable[[list[str]], np.ndarray]:
    return lambda texts: module.signatures(texts, NGRAM, BANDS * ROWS)


def rensa_signatures(texts: list[str]) -> np.ndarray:
    from rensa import RMinHash

    matrix = RMinHash.digest_matrix_from_token_sets([_shingle_strings(t) for t in texts], BANDS * ROWS, SEED)
    return np.array(matrix.to_rows(), dtype=np.uint32).reshape(len(texts), BANDS * ROWS)


def datasketch_signatures(texts: list[str]) -> np.ndarray:
    from datasketch import MinHash

    template = MinHash(num_perm=BANDS * ROWS, seed=SEED)  # the permutations, drawn once and shared
    out = np.empty((len(texts), BANDS * ROWS), dtype=template.hashvalues.dtype)
    for i, text in enumerate(texts):  # its default scheme (2.0.0: affine32, SHA-1 of the shingle)
        m = MinHash(num_perm=BANDS * ROWS, permutations=template.permutations, scheme=template.scheme)
        m.update_batch([s.encode("utf-8") for s in _shingle_strings(text)])
        out[i] = m.hashvalues
    return out


def _available(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------------- quality


def cluster_pairs(sigs: np.ndarray) -> set[tuple[int, int]]:
    """Pairs of documents that the curate stage's LSH puts in one cluster."""
    n = len(sigs)
    sigs = np.ascontiguousarray(sigs)
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for band in range(BANDS):
        block = np.ascontiguousarray(sigs[:, band * ROWS : (band + 1) * ROWS])
        keys = block.view(np.dtype((np.void, block.dtype.itemsize * ROWS))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        leader = first[inverse.ravel()]
        for i in np.nonzero(leader != np.arange(n))[0].tolist():
            ri, rj = find(i), find(int(leader[i]))
            if ri != rj:
                parent[max(ri, rj)] = min(ri, rj)
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        members[find(i)].append(i)
    return {(c[x], c[y]) for c in members.values() for x in range(len(c)) for y in range(x + 1, len(c))}


def quality(sigs: np.ndarray, truth: dict[tuple[int, int], float], threshold: float) -> dict:
    predicted = cluster_pairs(sigs)
    positives = {p for p, j in truth.items() if j >= threshold}
    hits = predicted & positives
    by_bin = {}
    for lo, hi in REPORT_BINS:
        pairs = [p for p, j in truth.items() if lo <= j < hi]
        by_bin[(lo, hi)] = (sum(p in predicted for p in pairs), len(pairs))
    return {
        "recall": len(hits) / max(1, len(positives)),
        "precision": len(hits) / max(1, len(predicted)),
        "predicted": len(predicted),
        "positives": len(positives),
        "bins": by_bin,
    }


def s_curve(j: float) -> float:
    return 1 - (1 - j**ROWS) ** BANDS


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--words", type=int, default=400, help="median words per document")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.72)
    parser.add_argument(
        "--runlib-module", default="runlib.curate.minhash", help="module with signatures(texts, ngram, num_perm)"
    )
    args = parser.parse_args(argv)

    texts = make_corpus(args.docs, args.words)
    truth = true_pairs(texts)
    impls: dict[str, Callable[[list[str]], np.ndarray]] = {
        "runlib": runlib_signatures(importlib.import_module(args.runlib_module))
    }
    for name, fn in (("rensa", rensa_signatures), ("datasketch", datasketch_signatures)):
        if _available(name):
            impls[name] = fn
        else:
            print(f"{name}: not installed, skipped (pip install rensa==0.5.0 datasketch==2.0.0)")
    words = sum(len(minhash.simplified_words(t)) for t in texts)
    print(
        f"{len(texts)} documents, {words / len(texts):.0f} words each on average, {BANDS * ROWS} permutations "
        f"({BANDS} bands x {ROWS} rows), {NGRAM}-word shingles; {sum(j >= args.threshold for j in truth.values())} "
        f"true pairs (exact Jaccard >= {args.threshold})"
    )

    seconds: dict[str, list[float]] = {name: [] for name in impls}
    sigs: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for name, fn in impls.items():
            started = time.perf_counter()
            sigs[name] = fn(texts)
            seconds[name].append(time.perf_counter() - started)
    rate = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}

    print(f"\nspeed, median of {args.repeats} interleaved rounds (text -> signature matrix):")
    for name in impls:
        print(f"  {name:<11} {rate[name]:9.0f} signatures/s   runlib / {name}: {rate['runlib'] / rate[name]:5.2f}x")

    print(f"\nquality: LSH {BANDS}x{ROWS} + union-find (the curate stage's), pairs in one cluster")
    header = "".join(f"  J {lo:.2f}-{min(hi, 1):.2f}" for lo, hi in REPORT_BINS)
    print(f"  {'':<11} {'recall':>7} {'precision':>9}{header}")
    for name in impls:
        q = quality(sigs[name], truth, args.threshold)
        bins = "".join(f"  {h:>5}/{n:<5}" for h, n in q["bins"].values())
        print(f"  {name:<11} {q['recall']:7.1%} {q['precision']:9.1%}{bins}")
    expected = {
        (lo, hi): sum(s_curve(j) for j in truth.values() if lo <= j < hi)
        / max(1, sum(lo <= j < hi for j in truth.values()))
        for lo, hi in REPORT_BINS
    }
    positives = [j for j in truth.values() if j >= args.threshold]
    ceiling = sum(s_curve(j) for j in positives) / max(1, len(positives))
    bins = "".join(f"  {v:>11.1%}" for v in expected.values())
    print(f"  {'S-curve':<11} {ceiling:7.1%} {'':>9}{bins}   (expected pair recall of exact MinHash + this LSH)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
