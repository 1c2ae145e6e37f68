"""MinHash signatures and near-duplicate clusters (curate.dedup.minhash {ngram, bands, rows, threshold}).

As datatrove's MinhashDedup* (datatrove src/datatrove/pipeline/dedup/minhash.py), on numpy in one process,
vectorised over batches of documents (no Python loop per word or per shingle):
  * text simplified before shingling (datatrove src/datatrove/utils/text.py simplify_text): NFD with
    combining marks dropped, lowercase, digit runs (with an optional decimal part) -> "0", punctuation ->
    space, whitespace collapsed; words are whitespace tokens (deviation: datatrove tokenizes with
    NLTK/spaCy). simplify_text is the reference; signatures get the same words from _prepared (marks,
    non-ASCII separators and non-ASCII digits handled per maximal non-ASCII run, cached), _collapse_numbers
    (the number rule on the bytes of a whole batch, as re scans) and a byte table over the UTF-8 (ASCII
    letters and digits, and every non-ASCII byte, are word bytes). Per run is exact: canonical decomposition
    is per character and canonical reordering only moves marks of non-zero combining class, all dropped
    (The Unicode Standard, section 3.11);
  * word hash: a 64-bit polynomial over the word's UTF-8 bytes, sum(byte_k * P^k) mod 2^64, computed for all
    words of a batch at once from one prefix sum (and P^-start, P odd hence invertible mod 2^64), plus the
    byte length, through a splitmix64 finaliser (Steele, Lea & Flood, "Fast splittable pseudorandom number
    generators", OOPSLA 2014);
  * shingles: word `ngram`-grams (FineWeb: 5); a document with fewer words is one shingle (datatrove gives
    such a document no shingles at all); shingle hash: the n word hashes combined by a multiply-add fold and
    the splitmix64 finaliser (datatrove: sha1 or xxhash of the joined words, 64-bit);
  * bands * rows permutations h_i(x) = (a_i * x + b_i) mod 2^32 of the shingle hash's high 32 bits, a_i odd
    (a bijection of the 32-bit values), a_i and b_i drawn from np.random.RandomState(1) (datatrove's seed;
    RandomState's stream is frozen across numpy versions, NEP 19): datasketch 2.0.0's default "affine32"
    scheme (datasketch/minhash.py, MinHash._init_permutations). A signature is the minimum of each
    permutation over the document's shingles, stored as uint64. Integer arithmetic with defined wrap-around
    only: the same signatures on every platform and run for the same text and seed;
  * LSH: documents whose `rows` values agree in any of the `bands` bands are candidate pairs, with
    probability 1 - (1 - J^rows)^bands for a pair at Jaccard J (Leskovec, Rajaraman & Ullman, "Mining of
    Massive Datasets", section 3.4); the default 20 x 5 makes 98.6% of the pairs at J = 0.72 candidates,
    FineWeb's 14 x 8 65% (its S-curve is centred on (1/14)^(1/8) = 0.72);
  * verification (curate.dedup.minhash.threshold; datatrove has none): the candidate documents' texts are
    shingled again and a candidate pair is kept only if the exact Jaccard similarity of the two sets of
    64-bit shingle hashes is >= threshold: the soft edge of the S-curve becomes a sharp one, and the extra
    candidates of a wider banding cost a set comparison each, never a wrong removal. Verified pairs are
    joined with union-find and the first document of each cluster (in order) is kept.
Speed and recall against rensa and datasketch, and the recall curve of several bandings:
python -m runlib.bench.minhash_speed --grid.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

SEED = 1
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)?")
_WORD_RE = re.compile(r"[^\W_]+")  # a word: letters and digits
_SEPARATOR_RE = re.compile(r"[\W_]+")  # punctuation (and "_") and whitespace between words -> one space
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")
_POLY = 0x9E3779B97F4A7C15  # the word hash's base P (odd: invertible mod 2^64)
_POLY_INVERSE = pow(_POLY, -1, 1 << 64)
_FOLD = np.uint64(0x100000001B3)  # FNV-1a 64-bit prime, as the shingle fold multiplier
_BATCH_BYTES = 1 << 20  # bytes of _prepared text hashed per vectorised batch
_BLOCK = 4096  # shingles per permutation block (block x permutations x 4 bytes of working memory)
BUCKET_WINDOW = 32  # in an LSH bucket, each document is paired with at most this many before it
_marks_cache: dict[str, str] = {}
_separators_cache: dict[str, str] = {}
_WORD_BYTE = np.zeros(256, dtype=bool)  # ASCII letters (lowercase by then) and digits, and all non-ASCII bytes
_WORD_BYTE[[*range(ord("0"), ord("9") + 1), *range(ord("a"), ord("z") + 1), *range(128, 256)]] = True
_powers: dict[int, np.ndarray] = {}


def _drop_marks(match: re.Match[str]) -> str:
    run = match.group()
    out = _marks_cache.get(run)
    if out is None:
        out = "".join(c for c in unicodedata.normalize("NFD", run) if not unicodedata.combining(c))
        if len(_marks_cache) < 1 << 16:
            _marks_cache[run] = out
    return out


def _drop_marks_and_separators(match: re.Match[str]) -> str:
    """_drop_marks, non-word characters (re's [\\W_], i.e. not str.isalnum()) -> space, and decimal digits
    (re's \\d: Unicode category Nd, str.isdecimal()) -> "0" (then a number in ASCII for _collapse_numbers)."""
    run = match.group()
    out = _separators_cache.get(run)
    if out is None:
        out = "".join("0" if c.isdecimal() else c if c.isalnum() else " " for c in _drop_marks(match))
        if len(_separators_cache) < 1 << 16:
            _separators_cache[run] = out
    return out


def _prepared(text: str) -> bytes:
    """The text as UTF-8 whose words (maximal runs of _WORD_BYTE bytes) are simplify_text's words.

    Marks dropped, non-ASCII separators made spaces and non-ASCII digits "0" per non-ASCII run, lowercase;
    numbers are collapsed to "0" by _collapse_numbers over a whole batch; the ASCII separators are left for
    the byte table (lower() keeps letters letters, except a few characters
    whose lowercase gains a combining mark, e.g. U+0130, which NFD has already decomposed)."""
    if not text.isascii():
        text = _NON_ASCII_RE.sub(_drop_marks_and_separators, text)
    return text.lower().encode("utf-8")


def simplify_text(text: str) -> str:
    """The words of the text (see the module docstring), joined by single spaces."""
    if not text.isascii():
        text = _NON_ASCII_RE.sub(_drop_marks, text)
    text = _NUMBER_RE.sub("0", text.lower())
    return _SEPARATOR_RE.sub(" ", text).strip(" ")


def simplified_words(text: str) -> list[str]:
    """simplify_text(text).split()."""
    if not text.isascii():
        text = _NON_ASCII_RE.sub(_drop_marks, text)
    return _WORD_RE.findall(_NUMBER_RE.sub("0", text.lower()))


def splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The splitmix64 step (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators"):
    the increment, then the finaliser; wraps mod 2^64."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _power_table(base: int, length: int) -> np.ndarray:
    """base^0 .. base^(length - 1) mod 2^64 (cached, grown by doubling)."""
    table = _powers.get(base)
    if table is None or len(table) < length:
        size = max(length, 2 * len(table) if table is not None else 1 << 16)
        table = np.full(size, base, dtype=np.uint64)
        table[0] = 1
        with np.errstate(over="ignore"):
            table = np.cumprod(table, dtype=np.uint64)  # wraps mod 2^64
        _powers[base] = table
    return table[:length]


def _collapse_numbers(data: np.ndarray) -> np.ndarray:
    """Boolean mask of the bytes kept, after writing "0" over the first byte of each number: the bytes of
    _NUMBER_RE.sub("0", text) (ASCII digits; a number is a digit run, and a "." or "," with the next digit
    run when one follows at once). Left to right as re scans: in a chain of runs joined by single "." or
    ",", the 1st, 3rd, 5th, ... runs start a number and each takes the run after it as its fraction."""
    digit = (data >= 0x30) & (data <= 0x39)
    keep = np.ones(len(data), dtype=bool)
    if not digit.any():
        return keep
    before = np.concatenate(([False], digit[:-1]))
    after = np.concatenate((digit[1:], [False]))
    starts = np.flatnonzero(digit & ~before)
    ends = np.flatnonzero(digit & ~after) + 1  # exclusive
    joined = np.zeros(len(starts), dtype=bool)  # run k follows run k - 1 after one "." or ","
    gap = starts[1:] == ends[:-1] + 1
    joined[1:] = gap & np.isin(data[np.minimum(ends[:-1], len(data) - 1)], (0x2C, 0x2E))
    runs = np.arange(len(starts))
    head = np.maximum.accumulate(np.where(joined, 0, runs))  # the first run of each chain
    fraction = (runs - head) % 2 == 1
    number_end = ends.copy()  # exclusive end of the number a run starts
    number_end[:-1] = np.where(fraction[1:], ends[1:], ends[:-1])
    first = starts[~fraction]
    last = number_end[~fraction]
    data[first] = 0x30
    inside = np.zeros(len(data) + 1, dtype=np.int32)  # +1 from the second byte of a number to its end
    np.add.at(inside, first + 1, 1)
    np.add.at(inside, last, -1)
    keep &= np.cumsum(inside[:-1]) == 0
    return keep


def _batch_shingles(prepared: list[bytes], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(document index, shingle hash) of every shingle of the _prepared documents, in document order."""
    docs = len(prepared)
    data = np.frombuffer(b" ".join(prepared) + b" ", dtype=np.uint8).copy()  # a separator after each document
    keep = _collapse_numbers(data)
    if not keep.all():
        kept_per_doc = np.add.reduceat(keep, np.cumsum([0] + [len(p) + 1 for p in prepared[:-1]]))
        data = data[keep]
        ends_of_docs = np.cumsum(kept_per_doc)
    else:
        ends_of_docs = np.cumsum([len(p) + 1 for p in prepared])
    word = _WORD_BYTE[data]
    starts = np.flatnonzero(word & np.concatenate(([True], ~word[:-1])))
    ends = np.flatnonzero(word & np.concatenate((~word[1:], [True]))) + 1
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum(data.astype(np.uint64) * _power_table(_POLY, len(data)), dtype=np.uint64, out=prefix[1:])
        sums = (prefix[ends] - prefix[starts]) * _power_table(_POLY_INVERSE, len(data) + 1)[starts]
        words = splitmix64(sums + (ends - starts).astype(np.uint64))
        doc_of_word = np.searchsorted(ends_of_docs, starts, side="right")
        counts = np.bincount(doc_of_word, minlength=docs)
        parts_doc, parts_hash = [], []
        if len(words) >= ngram:  # documents of >= ngram words: every window inside one document
            count = len(words) - ngram + 1
            folded = np.full(count, np.uint64(ngram), dtype=np.uint64)
            for k in range(ngram):
                folded = folded * _FOLD + words[k : k + count]
            inside = doc_of_word[:count] == doc_of_word[ngram - 1 :]
            parts_doc.append(doc_of_word[:count][inside])
            parts_hash.append(splitmix64(folded[inside]))
        short = np.flatnonzero(counts < ngram)
        if len(short):  # fewer words than ngram: one shingle of all of them (none: the hash of n = 0)
            first = np.concatenate(([0], np.cumsum(counts)))
            hashes = []
            for d in short.tolist():
                whole = np.uint64(counts[d])
                for w in words[first[d] : first[d + 1]]:
                    whole = whole * _FOLD + w
                hashes.append(whole)
            parts_doc.append(short)
            parts_hash.append(splitmix64(np.array(hashes, dtype=np.uint64)))
    doc = np.concatenate(parts_doc)
    order = np.argsort(doc, kind="stable")
    return doc[order], np.concatenate(parts_hash)[order]


def shingle_hashes(text: str, ngram: int) -> np.ndarray:
    """uint64 hashes of the document's word n-gram shingles (at least one)."""
    return _batch_shingles([_prepared(text)], ngram)[1]


def permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The affine32 permutations' a (odd) and b, uint32 (datasketch 2.0.0's draw from RandomState(SEED))."""
    gen = np.random.RandomState(seed=SEED)
    a = gen.randint(0, 1 << 31, size=num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, size=num_perm, dtype=np.uint32)
    return a, b


def _minimum_permuted(out: np.ndarray, doc: np.ndarray, hashes: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out[d] = min(out[d], min over the shingles x of document d of (a * x + b) mod 2^32)."""
    values32 = (hashes >> np.uint64(32)).astype(np.uint32)
    block = np.empty((min(_BLOCK, len(hashes)), len(a)), dtype=np.uint32)
    for lo in range(0, len(hashes), _BLOCK):
        hi = min(lo + _BLOCK, len(hashes))
        part = block[: hi - lo]
        np.multiply(values32[lo:hi, None], a[None, :], out=part)  # wraps mod 2^32
        part += b[None, :]
        docs = doc[lo:hi]
        segments = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
        ids = docs[segments]
        out[ids] = np.minimum(out[ids], np.minimum.reduceat(part, segments, axis=0))


def _prepared_batches(texts: Sequence[str]) -> Iterator[tuple[int, list[bytes]]]:
    """(index of the batch's first document, its _prepared texts), batches of about _BATCH_BYTES each."""
    batch: list[bytes] = []
    first = batch_bytes = 0
    for text in texts:
        prepared = _prepared(text)
        if batch and batch_bytes + len(prepared) > _BATCH_BYTES:
            yield first, batch
            first, batch_bytes, batch = first + len(batch), 0, []
        batch.append(prepared)
        batch_bytes += len(prepared) + 1
    if batch:
        yield first, batch


def signatures(texts: list[str], ngram: int, num_perm: int) -> np.ndarray:
    """(len(texts), num_perm) uint64 MinHash signatures (values below 2^32)."""
    a, b = permutations(num_perm)
    out = np.full((len(texts), num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    for first, batch in _prepared_batches(texts):
        doc, hashes = _batch_shingles(batch, ngram)
        _minimum_permuted(out[first : first + len(batch)], doc, hashes, a, b)
    return out.astype(np.uint64)


def shingle_sets(texts: Sequence[str], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """Each document's distinct shingle hashes, sorted: (offsets, hashes), document d's set being
    hashes[offsets[d] : offsets[d + 1]] (offsets: int64, len(texts) + 1 values; at least one per document)."""
    parts: list[np.ndarray] = []
    counts = np.zeros(len(texts), dtype=np.int64)
    for first, batch in _prepared_batches(texts):
        doc, hashes = _batch_shingles(batch, ngram)
        bounds = np.concatenate(([0], np.cumsum(np.bincount(doc, minlength=len(batch))))).tolist()
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):  # per document: small, cache-resident sorts
            hashes[lo:hi].sort()
        new = np.concatenate(([True], (doc[1:] != doc[:-1]) | (hashes[1:] != hashes[:-1])))
        parts.append(hashes[new])
        counts[first : first + len(batch)] = np.bincount(doc[new], minlength=len(batch))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, (np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64))


def candidate_pairs(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(k, 2) int64 pairs i < j of documents whose `rows` signature values agree in at least one of the
    `bands` bands, sorted, each once. In a bucket of more than BUCKET_WINDOW + 1 documents each one is
    paired with the BUCKET_WINDOW documents before it in index order only (every bucket stays connected,
    and the pairs grow linearly with the bucket, not quadratically)."""
    n = len(sigs)
    if sigs.ndim != 2 or sigs.shape[1] != bands * rows:
        raise ValueError(f"signatures of shape {sigs.shape} do not have bands * rows = {bands * rows} columns")
    found: list[np.ndarray] = []
    if n > 1:
        for band in range(bands):
            block = np.ascontiguousarray(sigs[:, band * rows : (band + 1) * rows])
            keys = block.view(np.dtype((np.void, block.dtype.itemsize * rows))).ravel()
            _, inverse = np.unique(keys, return_inverse=True)
            inverse = inverse.ravel()
            largest = int(np.bincount(inverse).max())
            if largest < 2:
                continue
            order = np.argsort(inverse, kind="stable")  # by bucket, then by document index
            bucket = inverse[order]
            for lag in range(1, min(largest, BUCKET_WINDOW + 1)):
                same = bucket[lag:] == bucket[:-lag]
                found.append(order[:-lag][same] * np.int64(n) + order[lag:][same])
    if not found:
        return np.empty((0, 2), dtype=np.int64)
    codes = np.unique(np.concatenate(found))
    return np.stack((codes // n, codes % n), axis=1)


def pair_jaccard(offsets: np.ndarray, hashes: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Exact Jaccard similarity of the shingle-hash sets (shingle_sets' output) of each pair, float64:
    the smaller set's hashes looked up in the larger (binary search, both sorted and distinct)."""
    out = np.empty(len(pairs), dtype=np.float64)
    bounds = offsets.tolist()
    for k, (i, j) in enumerate(pairs.tolist()):
        small, large = hashes[bounds[i] : bounds[i + 1]], hashes[bounds[j] : bounds[j + 1]]
        if len(small) > len(large):
            small, large = large, small
        found = np.searchsorted(large, small)
        found[found == len(large)] = 0
        both = int(np.count_nonzero(large[found] == small))
        out[k] = both / (len(small) + len(large) - both)
    return out


def first_of_clusters(n: int, pairs: np.ndarray) -> np.ndarray:
    """Boolean mask over n documents: True for those in a cluster (connected component of `pairs`)
    whose first (lowest-index) document is another one."""
    parent = np.arange(n)

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for i, j in pairs.tolist():
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)  # the root is the cluster's lowest index
    roots = np.fromiter((find(i) for i in range(n)), dtype=np.int64, count=n)
    return np.not_equal(roots, np.arange(n))


def duplicates(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Boolean mask, LSH only (no verification, as datatrove): True for documents in a cluster of
    candidate pairs whose first (lowest-index) document is another one."""
    return first_of_clusters(len(sigs), candidate_pairs(sigs, bands, rows))


def verified_pairs(
    sigs: np.ndarray,
    bands: int,
    rows: int,
    threshold: float,
    ngram: int,
    texts: Callable[[np.ndarray], Sequence[str]],
) -> tuple[np.ndarray, dict[str, int]]:
    """The candidate pairs (candidate_pairs) whose exact shingle Jaccard is >= threshold; `texts(indices)`
    gives the texts of the documents at those (sorted) indices, asked once, for the documents of candidate
    pairs only. threshold 0 accepts every candidate (reads no text).
    Returns (pairs, {"candidate_pairs", "verified_pairs", "docs_verified"})."""
    pairs = candidate_pairs(sigs, bands, rows)
    stats = {"candidate_pairs": len(pairs), "verified_pairs": len(pairs), "docs_verified": 0}
    if threshold > 0 and len(pairs):
        needed = np.unique(pairs)
        offsets, hashes = shingle_sets(texts(needed), ngram)
        similarity = pair_jaccard(offsets, hashes, np.searchsorted(needed, pairs))
        pairs = pairs[similarity >= threshold]
        stats.update(verified_pairs=len(pairs), docs_verified=len(needed))
    return pairs, stats


def near_duplicates(
    sigs: np.ndarray,
    bands: int,
    rows: int,
    threshold: float,
    ngram: int,
    texts: Callable[[np.ndarray], Sequence[str]],
) -> tuple[np.ndarray, dict[str, int]]:
    """(mask, stats): True for documents in a cluster of verified_pairs whose first (lowest-index) document
    is another one; stats as verified_pairs'."""
    pairs, stats = verified_pairs(sigs, bands, rows, threshold, ngram, texts)
    return first_of_clusters(len(sigs), pairs), stats
