"""MinHash signatures and LSH near-duplicate clusters (curate.dedup.minhash {ngram, bands, rows}).

As datatrove's MinhashDedup* (datatrove src/datatrove/pipeline/dedup/minhash.py), on numpy in one process,
vectorised over batches of documents (no Python loop per word or per shingle):
  * text simplified before shingling (datatrove src/datatrove/utils/text.py simplify_text): NFD with
    combining marks dropped, lowercase, digit runs (with an optional decimal part) -> "0", punctuation ->
    space, whitespace collapsed; words are whitespace tokens (deviation: datatrove tokenizes with
    NLTK/spaCy). simplify_text is the reference; signatures get the same words from _prepared (marks and
    non-ASCII separators handled per maximal non-ASCII run, cached) and a byte table over the UTF-8 (ASCII
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
  * LSH: documents whose `rows` values agree in any of the `bands` bands are candidate pairs (FineWeb 14 x 8,
    threshold ~ (1/14)^(1/8) = 0.72); no Jaccard verification (as datatrove); candidate pairs are joined with
    union-find and the first document of each cluster (in order) is kept.
Speed and recall against rensa and datasketch: python -m runlib.bench.minhash_speed.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

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
_marks_cache: dict[str, str] = {}
_separators_cache: dict[str, str] = {}
_WORD_BYTE = np.zeros(256, dtype=bool)  # ASCII letters (lowercase by then) and digits, and all non-ASCII bytes
_WORD_BYTE[[*range(ord("0"), ord("9") + 1), *range(ord("a"), ord("z") + 1), *range(128, 256)]] = True
_powers: dict[int, np.ndarray] = {}


def _drop_marks(match: re.Match) -> str:
    run = match.group()
    out = _marks_cache.get(run)
    if out is None:
        out = "".join(c for c in unicodedata.normalize("NFD", run) if not unicodedata.combining(c))
        if len(_marks_cache) < 1 << 16:
            _marks_cache[run] = out
    return out


def _drop_marks_and_separators(match: re.Match) -> str:
    """_drop_marks, and non-word characters (re's [\\W_], i.e. not str.isalnum()) -> space."""
    run = match.group()
    out = _separators_cache.get(run)
    if out is None:
        out = "".join(c if c.isalnum() else " " for c in _drop_marks(match))
        if len(_separators_cache) < 1 << 16:
            _separators_cache[run] = out
    return out


def _prepared(text: str) -> bytes:
    """The text as UTF-8 whose words (maximal runs of _WORD_BYTE bytes) are simplify_text's words.

    Marks dropped and non-ASCII separators made spaces per non-ASCII run, lowercase, numbers -> "0"; the
    ASCII separators are left for the byte table (lower() keeps letters letters, except a few characters
    whose lowercase gains a combining mark, e.g. U+0130, which NFD has already decomposed)."""
    if not text.isascii():
        text = _NON_ASCII_RE.sub(_drop_marks_and_separators, text)
    return _NUMBER_RE.sub("0", text.lower()).encode("utf-8")


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


def _splitmix64(x: np.ndarray) -> np.ndarray:
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


def _batch_shingles(prepared: list[bytes], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(document index, shingle hash) of every shingle of the _prepared documents, in document order."""
    docs = len(prepared)
    data = np.frombuffer(b" ".join(prepared) + b" ", dtype=np.uint8)  # a separator after each document
    ends_of_docs = np.cumsum([len(p) + 1 for p in prepared])
    word = _WORD_BYTE[data]
    starts = np.flatnonzero(word & np.concatenate(([True], ~word[:-1])))
    ends = np.flatnonzero(word & np.concatenate((~word[1:], [True]))) + 1
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum(data.astype(np.uint64) * _power_table(_POLY, len(data)), dtype=np.uint64, out=prefix[1:])
        sums = (prefix[ends] - prefix[starts]) * _power_table(_POLY_INVERSE, len(data) + 1)[starts]
        words = _splitmix64(sums + (ends - starts).astype(np.uint64))
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
            parts_hash.append(_splitmix64(folded[inside]))
        short = np.flatnonzero(counts < ngram)
        if len(short):  # fewer words than ngram: one shingle of all of them (none: the hash of n = 0)
            first = np.concatenate(([0], np.cumsum(counts)))
            hashes = []
            for d in short.tolist():
                folded = np.uint64(counts[d])
                for w in words[first[d] : first[d + 1]]:
                    folded = folded * _FOLD + w
                hashes.append(folded)
            parts_doc.append(short)
            parts_hash.append(_splitmix64(np.array(hashes, dtype=np.uint64)))
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


def signatures(texts: list[str], ngram: int, num_perm: int) -> np.ndarray:
    """(len(texts), num_perm) uint64 MinHash signatures (values below 2^32)."""
    a, b = permutations(num_perm)
    out = np.full((len(texts), num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    batch: list[bytes] = []
    first = batch_bytes = 0

    def flush() -> None:
        if batch:
            doc, hashes = _batch_shingles(batch, ngram)
            _minimum_permuted(out[first : first + len(batch)], doc, hashes, a, b)

    for text in texts:
        prepared = _prepared(text)
        if batch and batch_bytes + len(prepared) > _BATCH_BYTES:
            flush()
            first, batch_bytes = first + len(batch), 0
            batch = []
        batch.append(prepared)
        batch_bytes += len(prepared) + 1
    flush()
    return out.astype(np.uint64)


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
