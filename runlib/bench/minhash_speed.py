"""Benchmark MinHash: runlib's signatures against rensa and datasketch, speed and near-duplicate recall.

    python -m runlib.bench.minhash_speed [--docs 4000] [--words 400] [--repeats 5] [--threshold 0.72] [--grid]

Measures, on one synthetic corpus with planted near-duplicates (documents of Zipf-distributed words with
capitals, punctuation, numbers and accented words; a third of them copied with word substitutions until
the copy's exact word 5-gram Jaccard reaches a drawn level in 0.5..1):
  * speed: signatures per second at the curate defaults' bands * rows permutations (MinhashSpec: 20 x 5
    = 100), from the raw text to a (docs, permutations) numpy matrix, interleaved (runlib, rensa,
    datasketch, runlib, ...), --repeats rounds, medians and ratios; runlib and rensa also at FineWeb's
    14 x 8 = 112 (runlib's banding before the verification step), in the same rounds;
  * dedup time: runlib's near-duplicate step after the signatures (LSH candidates, the candidates' texts
    shingled again, exact Jaccard, union-find: runlib.curate.minhash.near_duplicates, as curate_source);
  * quality: each implementation's signatures go through the same LSH and verification (candidate pairs
    of the default banding whose exact shingle Jaccard is >= the default threshold, union-find); a pair is
    predicted when its two documents end in one cluster, and true when its exact 5-gram Jaccard (word
    tuples, no hashing) is >= --threshold. Recall and precision over pairs, recall per Jaccard bucket
    (the recall curve), and the banding's S-curve 1 - (1 - J^rows)^bands (the chance that a pair is a
    candidate). Rows "before" and "LSH only" show FineWeb's 14 x 8 without verification (runlib before)
    and the default banding without verification;
  * --grid: recall, precision, candidates and verification time of other bandings (runlib signatures,
    the first bands * rows columns of a 128-permutation signature), the measurement behind the defaults.
The shingling is the same for all three: runlib.curate.minhash.simplified_words, word 5-grams joined by a
space (fewer words: one shingle); rensa gets the shingle strings (RMinHash.digest_matrix_from_token_sets,
rensa's bulk path), datasketch gets their UTF-8 bytes (MinHash.update_batch).
Peers: rensa 0.5.0 (Rust, R-MinHash), datasketch 2.0.0 (numpy). Install them with
`pip install rensa==0.5.0 datasketch==2.0.0`; a missing peer is reported and skipped.
Goal: runlib >= 0.8x rensa's signatures/s with recall >= 97% of the true pairs.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from runlib.curate import minhash
from runlib.spec.models import MinhashSpec

DEFAULTS = MinhashSpec()
NGRAM = DEFAULTS.ngram
BANDS, ROWS, THRESHOLD = DEFAULTS.bands, DEFAULTS.rows, DEFAULTS.threshold
BEFORE_BANDS, BEFORE_ROWS = 14, 8  # FineWeb's (datatrove examples/fineweb.py), runlib's default before
SEED = 1
JACCARD_LEVELS = (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
REPORT_BINS: tuple[tuple[float, float], ...] = (
    (0.3, 0.5),
    (0.5, 0.6),
    (0.6, 0.65),
    (0.65, 0.7),
    (0.7, 0.72),
    (0.72, 0.75),
    (0.75, 0.8),
    (0.8, 0.9),
    (0.9, 1.01),
)
GRID = ((14, 8), (16, 7), (18, 6), (20, 5), (22, 5), (24, 4), (28, 4))


# ---------------------------------------------------------------------------------------------- corpus


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    accented = "éèàüöçñ"
    words: set[str] = set()
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


def jaccard(a: set[tuple[str, ...]], b: set[tuple[str, ...]]) -> float:
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


Signer = Callable[[list[str]], np.ndarray]  # texts -> their (docs, permutations) signature matrix


def runlib_signatures(module: ModuleType, num_perm: int) -> Signer:
    return lambda texts: module.signatures(texts, NGRAM, num_perm)


def rensa_signatures(num_perm: int) -> Signer:
    def run(texts: list[str]) -> np.ndarray:
        from rensa import RMinHash

        matrix = RMinHash.digest_matrix_from_token_sets([_shingle_strings(t) for t in texts], num_perm, SEED)
        return np.array(matrix.to_rows(), dtype=np.uint32).reshape(len(texts), num_perm)

    return run


def datasketch_signatures(num_perm: int) -> Signer:
    def run(texts: list[str]) -> np.ndarray:
        from datasketch import MinHash

        template = MinHash(num_perm=num_perm, seed=SEED)  # the permutations, drawn once and shared
        out = np.empty((len(texts), num_perm), dtype=template.hashvalues.dtype)
        for i, text in enumerate(texts):  # its default scheme (2.0.0: affine32, SHA-1 of the shingle)
            m = MinHash(num_perm=num_perm, permutations=template.permutations, scheme=template.scheme)
            m.update_batch([s.encode("utf-8") for s in _shingle_strings(text)])
            out[i] = m.hashvalues
        return out

    return run


def _available(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------------- quality


def cluster_pairs(n: int, pairs: np.ndarray) -> set[tuple[int, int]]:
    """Pairs of documents in one connected component of `pairs` (the clusters the curate stage forms)."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in pairs.tolist():
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        members[find(i)].append(i)
    return {(c[x], c[y]) for c in members.values() for x in range(len(c)) for y in range(x + 1, len(c))}


def dedup_pairs(sigs: np.ndarray, texts: list[str], bands: int, rows: int, threshold: float) -> np.ndarray:
    """The pairs runlib's curate_source joins: LSH candidates verified against the threshold."""
    pairs, _ = minhash.verified_pairs(
        np.ascontiguousarray(sigs), bands, rows, threshold, NGRAM, lambda idx: [texts[i] for i in idx.tolist()]
    )
    return pairs


def quality(pairs: np.ndarray, n: int, truth: dict[tuple[int, int], float], threshold: float) -> dict[str, Any]:
    predicted = cluster_pairs(n, pairs)
    positives = {p for p, j in truth.items() if j >= threshold}
    hits = predicted & positives
    by_bin: dict[tuple[float, float], tuple[int, int]] = {}
    for lo, hi in REPORT_BINS:
        in_bin = [p for p, j in truth.items() if lo <= j < hi]
        by_bin[(lo, hi)] = (sum(p in predicted for p in in_bin), len(in_bin))
    return {
        "recall": len(hits) / max(1, len(positives)),
        "precision": len(hits) / max(1, len(predicted)),
        "predicted": len(predicted),
        "positives": len(positives),
        "bins": by_bin,
    }


def s_curve(j: float, bands: int = BANDS, rows: int = ROWS) -> float:
    return 1 - (1 - j**rows) ** bands


def _quality_row(name: str, q: dict[str, Any]) -> str:
    bins = "".join(f"  {h / n if n else float('nan'):>9.1%}" for h, n in q["bins"].values())
    return f"  {name:<14} {q['recall']:7.1%} {q['precision']:9.1%}{bins}"


# ---------------------------------------------------------------------------------------------- main


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--words", type=int, default=400, help="median words per document")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="true pairs: exact Jaccard >= this")
    parser.add_argument("--grid", action="store_true", help="also measure other bands x rows (the defaults' basis)")
    parser.add_argument(
        "--runlib-module", default="runlib.curate.minhash", help="module with signatures(texts, ngram, num_perm)"
    )
    parser.add_argument(
        "--before-module",
        default=None,
        help=f"module timed and used for the {BEFORE_BANDS}x{BEFORE_ROWS} 'before' rows (default: --runlib-module), "
        "e.g. a copy of runlib/curate/minhash.py from an older commit on PYTHONPATH",
    )
    return parser.parse_args(argv)


def _implementations(module: ModuleType, before_module: ModuleType, perms: int, before_perms: int) -> dict[str, Signer]:
    """runlib's signatures and the installed peers', at the defaults' permutations and at the 'before' ones."""
    impls: dict[str, Signer] = {"runlib": runlib_signatures(module, perms)}
    peers = [name for name in ("rensa", "datasketch") if _available(name)]
    for name in {"rensa", "datasketch"} - set(peers):
        print(f"{name}: not installed, skipped (pip install rensa==0.5.0 datasketch==2.0.0)")
    if "rensa" in peers:
        impls["rensa"] = rensa_signatures(perms)
    if "datasketch" in peers:
        impls["datasketch"] = datasketch_signatures(perms)
    impls[f"runlib@{before_perms}"] = runlib_signatures(before_module, before_perms)
    if "rensa" in peers:
        impls[f"rensa@{before_perms}"] = rensa_signatures(before_perms)
    return impls


def _timed_rounds(
    impls: dict[str, Signer], texts: list[str], repeats: int, before_module: ModuleType, before_perms: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, np.ndarray]]:
    """(seconds per implementation, seconds of the dedup step now and before, the last round's signatures)."""
    seconds: dict[str, list[float]] = {name: [] for name in impls}
    dedup_seconds: dict[str, list[float]] = {"now": [], "before": []}
    sigs: dict[str, np.ndarray] = {}
    for fn in impls.values():  # warm-up, untimed: imports, runlib's power tables, rensa's first call
        fn(texts[:20])
    for _ in range(repeats):
        for name, fn in impls.items():
            started = time.perf_counter()
            sigs[name] = fn(texts)
            seconds[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        minhash.near_duplicates(
            sigs["runlib"], BANDS, ROWS, THRESHOLD, NGRAM, lambda idx: [texts[i] for i in idx.tolist()]
        )
        dedup_seconds["now"].append(time.perf_counter() - started)
        started = time.perf_counter()
        before_module.duplicates(sigs[f"runlib@{before_perms}"], BEFORE_BANDS, BEFORE_ROWS)
        dedup_seconds["before"].append(time.perf_counter() - started)
    return seconds, dedup_seconds, sigs


def _print_speed(
    texts: list[str],
    seconds: dict[str, list[float]],
    dedup_seconds: dict[str, list[float]],
    repeats: int,
    before_module: ModuleType,
    before_perms: int,
) -> None:
    rate = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
    print(
        f"\nspeed, median of {repeats} interleaved rounds (text -> signature matrix; "
        f"runlib@{before_perms}: {before_module.__name__}):"
    )
    for name in seconds:
        at = name.partition("@")[2]
        ref = f"runlib@{at}" if at else "runlib"
        print(f"  {name:<14} {rate[name]:9.0f} signatures/s   {ref} / {name}: {rate[ref] / rate[name]:5.2f}x")
    now, before = (statistics.median(dedup_seconds[k]) for k in ("now", "before"))
    print(
        f"  dedup step after the signatures (median): {now:.3f} s ({BANDS}x{ROWS} + exact Jaccard >= {THRESHOLD}), "
        f"before {before:.3f} s ({BEFORE_BANDS}x{BEFORE_ROWS}, no verification)"
    )
    end_to_end = len(texts) / (statistics.median(seconds["runlib"]) + now)
    if "rensa" in rate:
        print(
            f"  runlib signatures + dedup: {end_to_end:.0f} docs/s = {end_to_end / rate['rensa']:.2f}x "
            "rensa's signatures alone"
        )


def _print_quality(
    sigs: dict[str, np.ndarray],
    texts: list[str],
    truth: dict[tuple[int, int], float],
    threshold: float,
    before_perms: int,
) -> None:
    print(
        f"\nquality: LSH {BANDS}x{ROWS} + exact Jaccard >= {THRESHOLD} + union-find (the curate stage's), "
        "pairs in one cluster; recall by exact Jaccard bucket:"
    )
    header = "".join(f"  {lo:.2f}-{min(hi, 1):.2f}" for lo, hi in REPORT_BINS)
    counts = {(lo, hi): sum(lo <= j < hi for j in truth.values()) for lo, hi in REPORT_BINS}
    print(f"  {'':<14} {'recall':>7} {'precision':>9}{header}")
    print(f"  {'(true pairs)':<14} {'':>7} {'':>9}" + "".join(f"  {counts[b]:>9}" for b in REPORT_BINS))
    n = len(texts)
    for name in [name for name in sigs if "@" not in name]:
        print(_quality_row(name, quality(dedup_pairs(sigs[name], texts, BANDS, ROWS, THRESHOLD), n, truth, threshold)))
    lsh_only = quality(minhash.candidate_pairs(sigs["runlib"], BANDS, ROWS), n, truth, threshold)
    print(_quality_row("runlib LSH only", lsh_only) + f"   ({BANDS}x{ROWS}, no verification)")
    before_pairs = minhash.candidate_pairs(sigs[f"runlib@{before_perms}"], BEFORE_BANDS, BEFORE_ROWS)
    print(
        _quality_row("runlib before", quality(before_pairs, n, truth, threshold))
        + f"   ({BEFORE_BANDS}x{BEFORE_ROWS}, no verification: datatrove's)"
    )
    for label, (b, r) in (
        ("S-curve", (BANDS, ROWS)),
        (f"S-curve {BEFORE_BANDS}x{BEFORE_ROWS}", (BEFORE_BANDS, BEFORE_ROWS)),
    ):
        mean = {
            key: sum(s_curve(j, b, r) for j in truth.values() if key[0] <= j < key[1]) / max(1, counts[key])
            for key in REPORT_BINS
        }
        positives = [j for j in truth.values() if j >= threshold]
        ceiling = sum(s_curve(j, b, r) for j in positives) / max(1, len(positives))
        print(f"  {label:<14} {ceiling:7.1%} {'':>9}" + "".join(f"  {v:>9.1%}" for v in mean.values()))
    print("  (S-curve: the mean chance that a pair of the bucket is an LSH candidate, 1 - (1 - J^rows)^bands)")


def _print_grid(module: ModuleType, texts: list[str], truth: dict[tuple[int, int], float], threshold: float) -> None:
    grid_sigs = module.signatures(texts, NGRAM, 128)
    print(f"\ngrid: runlib signatures (first bands*rows of 128 permutations), verified at Jaccard >= {THRESHOLD}")
    print(
        f"  {'banding':<8} {'perms':>5} {'candidates':>10} {'verify s':>8} {'recall':>7} {'precision':>9}  S({THRESHOLD})"
    )
    for b, r in GRID:
        started = time.perf_counter()
        pairs = dedup_pairs(grid_sigs[:, : b * r], texts, b, r, THRESHOLD)
        spent = time.perf_counter() - started
        candidates = len(minhash.candidate_pairs(np.ascontiguousarray(grid_sigs[:, : b * r]), b, r))
        q = quality(pairs, len(texts), truth, threshold)
        print(
            f"  {f'{b}x{r}':<8} {b * r:>5} {candidates:>10} {spent:>8.3f} {q['recall']:7.1%} "
            f"{q['precision']:9.1%}  {s_curve(THRESHOLD, b, r):.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    texts = make_corpus(args.docs, args.words)
    truth = true_pairs(texts)
    module = importlib.import_module(args.runlib_module)
    perms, before_perms = BANDS * ROWS, BEFORE_BANDS * BEFORE_ROWS
    before_module = importlib.import_module(args.before_module) if args.before_module else module
    impls = _implementations(module, before_module, perms, before_perms)
    words = sum(len(minhash.simplified_words(t)) for t in texts)
    print(
        f"{len(texts)} documents, {words / len(texts):.0f} words each on average, {NGRAM}-word shingles; "
        f"defaults {BANDS} bands x {ROWS} rows = {perms} permutations, verified at Jaccard >= {THRESHOLD}; "
        f"{sum(j >= args.threshold for j in truth.values())} true pairs (exact Jaccard >= {args.threshold})"
    )
    seconds, dedup_seconds, sigs = _timed_rounds(impls, texts, args.repeats, before_module, before_perms)
    _print_speed(texts, seconds, dedup_seconds, args.repeats, before_module, before_perms)
    _print_quality(sigs, texts, truth, args.threshold, before_perms)
    if args.grid:
        _print_grid(module, texts, truth, args.threshold)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
