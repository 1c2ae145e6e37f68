"""MinHash signatures and LSH near-duplicate clusters (curate.dedup.minhash {ngram, bands, rows}).

As datatrove's MinhashDedup* (shared/research/curation.md 1.1.4), on numpy in one process:
  * text simplified before shingling (datatrove utils/text.py simplify_text): NFD with combining marks
    dropped, lowercase, digit runs (with an optional decimal part) -> "0", punctuation -> space, whitespace
    collapsed; words are whitespace tokens (deviation: datatrove tokenizes with NLTK/spaCy);
  * shingles: word `ngram`-grams (FineWeb: 5); a document with fewer words is one shingle (datatrove gives
    such a document no shingles at all);
  * shingle hash: a stable 64-bit hash (each distinct word hashed once with BLAKE2b-64, the n word hashes
    combined by a multiply-add fold and a splitmix64 finaliser; datatrove: sha1 or xxhash, 64-bit);
  * bands * rows permutations h_i(x) = (a_i * x + b_i) mod (2^61 - 1), with uint64 wrap-around in a_i * x as
    in datatrove, a_i and b_i drawn from np.random.RandomState(1) (datatrove's seed); a signature is the
    minimum of each permutation over the document's shingles;
  * LSH: documents whose `rows` values agree in any of the `bands` bands are candidate pairs (FineWeb 14 x 8,
    threshold ~ (1/14)^(1/8) = 0.72); no Jaccard verification (as datatrove); candidate pairs are joined with
    union-find and the first document of each cluster (in order) is kept.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

MERSENNE_PRIME = np.uint64((1 << 61) - 1)
SEED = 1
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)?")
_WORD_RE = re.compile(r"[^\W_]+")  # punctuation (and "_") -> space, whitespace collapsed, then split
_FOLD = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime, as the fold multiplier
_CHUNK = 1 << 14  # shingles per vectorised block (block x permutations x 8 bytes of working memory)


def simplify_text(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.lower()
    text = _NUMBER_RE.sub("0", text)
    return " ".join(_WORD_RE.findall(text))


def simplified_words(text: str) -> list[str]:
    """simplify_text(text).split(), without building the string."""
    if not text.isascii():
        text = unicodedata.normalize("NFD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    return _WORD_RE.findall(_NUMBER_RE.sub("0", text.lower()))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _word_hash(word: str, cache: dict[str, int]) -> int:
    value = cache.get(word)
    if value is None:
        value = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
        cache[word] = value
    return value


def shingle_hashes(text: str, ngram: int, cache: dict[str, int] | None = None) -> np.ndarray:
    """uint64 hashes of the document's word n-gram shingles (at least one)."""
    cache = {} if cache is None else cache
    words = simplified_words(text)
    hashes = np.array([cache[w] if w in cache else _word_hash(w, cache) for w in words], dtype=np.uint64)
    n = min(ngram, len(hashes))
    if n == 0:
        return _splitmix64(np.zeros(1, dtype=np.uint64))
    count = len(hashes) - n + 1
    with np.errstate(over="ignore"):
        folded = np.full(count, np.uint64(n), dtype=np.uint64)
        for k in range(n):
            folded = folded * _FOLD + hashes[k : k + count]
        return _splitmix64(folded)


def permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.RandomState(seed=SEED)
    a = gen.randint(1, int(MERSENNE_PRIME), size=num_perm, dtype=np.uint64)
    b = gen.randint(0, int(MERSENNE_PRIME), size=num_perm, dtype=np.uint64)
    return a, b


def _permute(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(x), len(a)) array of (a * x + b) mod (2^61 - 1), a * x + b wrapping at 2^64 (as datatrove)."""
    values = np.multiply(x[:, None], a[None, :])
    values += b[None, :]
    high = values >> np.uint64(61)  # mod a Mersenne prime without a division: (v & p) + (v >> 61), then
    values &= MERSENNE_PRIME  # one conditional subtraction
    values += high
    np.subtract(values, MERSENNE_PRIME, out=values, where=values >= MERSENNE_PRIME)
    return values


def signatures(texts: list[str], ngram: int, num_perm: int) -> np.ndarray:
    """(len(texts), num_perm) uint64 MinHash signatures."""
    a, b = permutations(num_perm)
    out = np.empty((len(texts), num_perm), dtype=np.uint64)
    cache: dict[str, int] = {}
    pending: list[np.ndarray] = []
    first = size = 0  # first document of the pending block, shingles in it

    def flush(end: int) -> None:
        if not pending:
            return
        shingles = np.concatenate(pending)
        starts = np.cumsum([0] + [len(p) for p in pending[:-1]])
        out[first:end] = np.minimum.reduceat(_permute(shingles, a, b), starts, axis=0)
        pending.clear()

    for i, text in enumerate(texts):
        hashes = shingle_hashes(text, ngram, cache)
        if pending and size + len(hashes) > _CHUNK:
            flush(i)
            first, size = i, 0
        pending.append(hashes)
        size += len(hashes)
    flush(len(texts))
    return out


def duplicates(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Boolean mask: True for documents in a cluster whose first (lowest-index) document is another one."""
    n = len(sigs)
    if sigs.ndim != 2 or sigs.shape[1] != bands * rows:
        raise ValueError(f"signatures of shape {sigs.shape} do not have bands * rows = {bands * rows} columns")
    parent = np.arange(n)

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    if n > 1:
        for band in range(bands):
            block = np.ascontiguousarray(sigs[:, band * rows : (band + 1) * rows])
            keys = block.view(np.dtype((np.void, block.dtype.itemsize * rows))).ravel()
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            leader = first[inverse.ravel()]  # lowest index with the same band values
            for i in np.nonzero(leader != np.arange(n))[0].tolist():
                ri, rj = find(i), find(int(leader[i]))
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)  # the root is the cluster's lowest index
    roots = np.fromiter((find(i) for i in range(n)), dtype=np.int64, count=n)
    return roots != np.arange(n)
