"""An n-gram language model of a reference corpus, to score web documents by perplexity as CCNet does.

CCNet (Wenzek et al. 2020, arXiv 1911.00359, "LM filtering") trains a 5-gram KenLM model on Wikipedia, scores each
document by the perplexity of its lines, and splits a language's documents into head / middle / tail at the
30th and 60th percentiles of that perplexity. KenLM's trainer (lmplz) is C++ and not installable here, so the
counting and smoothing are re-implemented on numpy, after KenLM lm/builder (kpu/kenlm at 4cb443e):

* Smoothing: interpolated modified Kneser-Ney (Chen & Goodman 1998, TR-10-98, sections 3.5 and 4.1.6), as
  lmplz: three discounts D1, D2, D3+ per order from that order's count-of-counts n1..n4 (their equation 26;
  adjust_counts.cc CalculateDiscounts): Y = n1 / (n1 + 2 n2), Dj = j - (j + 1) Y n(j+1) / nj. Where some nj
  (j <= 3) is 0 or a Dj falls outside [0, j] (tiny or artificial corpora), the order gets KenLM's
  --discount_fallback values 0.5, 1, 1.5 (lmplz_main.cc) and `discount_fallback` records it (lmplz stops).
* Adjusted counts (adjust_counts.cc): raw counts at the highest order; below it, the number of distinct
  words seen to the left (continuation counts), except for n-grams that begin with <s>, which nothing can
  precede, and keep their raw counts.
* p(w | h) = (a(hw) - D(a(hw))) / sum_x a(hx) + gamma(h) p(w | h'), gamma(h) = sum_x D(a(hx)) / sum_x a(hx),
  h' the context without its first word; below the unigrams is the uniform 1 / |V| over the words, </s> and
  <unk> (not <s>: it is never predicted; interpolate.cc uniform_prob_). It is stored as KenLM's ARPA
  stores it: log10 p for each n-gram seen, log10 gamma(h) as the backoff of each context, so that an unseen
  n-gram's probability is the product of the backoffs of the contexts longer than the longest match and the
  match's probability (exactly the interpolated value, which sums to 1 over the vocabulary for every context).
* Unknown words: KenLM's default (initial_probabilities.cc MergeRight, interpolate_unigrams): every word of
  the training text is in the vocabulary, and <unk> is a word never seen, whose probability is its share of
  the uniform interpolation, gamma(empty) / |V|. A word not in the vocabulary is scored as <unk>; <unk> is
  never a context that was seen, so the words after it back off to shorter contexts.
* Sentences (KenLM python/kenlm.pyx Model.score, bos=True, eos=True): each line of a text with at least one
  token is one sentence, predicted as <s> w1 .. wn </s>: <s> is context only, </s> is predicted. Lines are
  split on "\\n" as CCNet (cc_net/perplexity.py DocLM.get_lines); a line without tokens is skipped (CCNet
  scores it as p(</s> | <s>), so that blank lines would change a document's perplexity).
* Perplexity (cc_net/perplexity.py pp, DocLM.do): 10 ** (-sum log10 p / tokens) over all the lines of the
  document together, tokens = words + one </s> per line; a document with no tokens scores float("inf").

Normalization (normalize_for_lm) follows cc_net/text_normalizer.py normalize (facebookresearch/cc_net at
bda555b) with its defaults: lowercase, NFD with nonspacing marks (Mn) dropped, every Unicode decimal digit
(Nd) -> "0", CCNet's table of Unicode punctuation -> ASCII, other control characters (U+0000-001F,
U+007F-009F) deleted. Deviations: CCNet hands the line to a SentencePiece model; here the tokens are words:
text is split on whitespace (so the whitespace control characters tab, CR, FF, VT, U+001C-001F and U+0085
separate words rather than being deleted), and every punctuation or symbol character (Unicode category P* or S*)
becomes a token of its own ("don't." -> don ' t .).

File (save_ngram_lm / load_ngram_lm): one line of JSON (the header: format, format_version, order,
vocab_size, n-gram counts, discounts, a manifest of the payload's arrays with dtype, shape and offset, the
payload's length and SHA-256), "\\n", then the payload: the raw little-endian arrays, each at an 8-byte
aligned offset. No compression and no timestamps: the same texts give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from runlib.util.atomic import write_bytes_atomic

UNK, BOS, EOS = 0, 1, 2
_LINE, _DOC = -1, -2  # marks in the ids of a batch of texts before _layout: end of a line, of a text
_LINE_CHUNK = "\0"  # the chunk standing for a line end (NUL is deleted from the text first)
SPECIALS = ("<unk>", "<s>", "</s>")
MIN_ORDER, MAX_ORDER = 2, 5
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)  # lmplz --discount_fallback defaults (lmplz_main.cc)
FORMAT = "runlib-ngram-lm"
FORMAT_VERSION = 1
NORMALIZATION = "ccnet-normalize-words-v1"  # bumped when normalize_for_lm changes: old models then refuse to load
SMOOTHING = "interpolated modified Kneser-Ney (Chen & Goodman 1998), KenLM lmplz conventions"
HEAD_PERCENTILE, TAIL_PERCENTILE = 30.0, 60.0  # CCNet's buckets (cc_net/perplexity.py PerplexityBucket)
_SCORE_BATCH_TOKENS = 1 << 20  # positions scored per vectorised batch (a few arrays of 8 bytes each)
_CHUNK_CACHE_MAX_ENTRIES = 1 << 20  # whitespace chunks whose tokens are remembered per call
_MAX_HEADER_BYTES = 1 << 20

# cc_net/text_normalizer.py UNICODE_PUNCT, grouped by replacement. CCNet's entry for U+FF11 (fullwidth "1")
# is left out: its digit rule runs first and has made that character "0" already.
_CCNET_PUNCT: dict[str, str] = {
    **dict.fromkeys("\u201e\u201d\u201c\u00ab\u00bb\u300d\u300c\u300a\u300b", '"'),
    **dict.fromkeys("\u00b4\u2019", "'"),
    **dict.fromkeys("\uff0c\u3001", ","),
    **dict.fromkeys("\u2013\u2501\u25ba", "-"),
    "\u3002": ".",
    "\uff0e": ". ",
    "\u2014": " - ",
    "\u2026": "...",
    **dict.fromkeys("\u2236\uff1a", ":"),
    "\uff1f": "?",
    "\uff01": "!",
    "\uff08": "(",
    "\uff09": ")",
    "\uff1b": ";",
    "\uff5e": "~",
    "\uff05": "%",
    "\u3008": "<",
    "\u3009": ">",
    "\u3010": "[",
    "\u3011": "]",
}
_PUNCT_ASCII = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())  # P* and S* of ASCII
# ASCII after CCNet's rules, in one C pass: digits -> "0", punctuation and symbols padded into tokens of
# their own, the non-whitespace control characters deleted (whitespace ones are split on already).
_ASCII_TABLE: dict[int, str | None] = {
    **{ord(d): "0" for d in "0123456789"},
    **{ord(p): f" {p} " for p in _PUNCT_ASCII},
    **{c: None for c in [*range(32), 127] if not chr(c).isspace()},
}


def _chunk_tokens(chunk: str) -> list[str]:
    """The tokens of one lowercased whitespace-free chunk. Per chunk is exact: NFD, the mark, digit and
    punctuation rules are per character, and none of them makes or removes whitespace between chunks."""
    if chunk.isascii():
        return [chunk] if chunk.isalpha() else chunk.translate(_ASCII_TABLE).split()
    out: list[str] = []
    for c in unicodedata.normalize("NFD", chunk):
        category = unicodedata.category(c)
        if category == "Mn" or (category == "Cc" and not c.isspace()):
            continue
        if category == "Nd":
            out.append("0")
            continue
        c = _CCNET_PUNCT.get(c, c)
        for d in c:  # a CCNet replacement may be several characters, spaces included
            if d.isspace() or unicodedata.category(d)[0] in "PS":
                out.append(f" {d} " if not d.isspace() else " ")
            else:
                out.append(d)
    return "".join(out).split()


def _chunks(text: str) -> list[str]:
    """The whitespace-separated chunks of `text`, lowercased, with the chunk _LINE_CHUNK at each line end.
    NUL, which normalization deletes anyway, is deleted first, so that no text holds the marker itself.
    Lowercasing the whole text: Greek final sigma depends on the neighbouring letters."""
    text = text.lower()
    if _LINE_CHUNK in text:
        text = text.replace(_LINE_CHUNK, "")
    return text.replace("\n", f" {_LINE_CHUNK} ").split()


def _encode_text(
    text: str, encode: Callable[[str], tuple[int, ...]], cache: dict[str, tuple[int, ...]], out: list[int]
) -> None:
    """Append the ids of `text`'s tokens to `out`, _LINE after each line and _DOC after the text. Web text
    repeats its chunks: `cache` maps a chunk to its ids, so that the per-token work is C loops (set
    difference, map, chain) and only a chunk not seen before runs normalization in Python."""
    if len(cache) >= _CHUNK_CACHE_MAX_ENTRIES:
        cache.clear()
    cache[_LINE_CHUNK] = (_LINE,)
    chunks = _chunks(text)
    for chunk in set(chunks).difference(cache):
        cache[chunk] = encode(chunk)
    out.extend(chain.from_iterable(map(cache.__getitem__, chunks)))
    out.append(_DOC)


def _layout(marked: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Word ids with _LINE / _DOC after each line / text (every text ends with _DOC) -> the stream the
    model reads, <s> w.. </s> for each line with words (lines without words dropped), and the index of the
    text each position belongs to (that of an <s> is not used: <s> is never scored)."""
    if len(marked) == 0:
        return marked, marked
    ends = marked < 0
    is_doc = marked == _DOC
    text = np.cumsum(is_doc) - is_doc  # texts ended before each element
    copies = np.where(ends, 2, 1)
    ids = np.repeat(marked, copies)
    index = np.repeat(text, copies)
    first = np.cumsum(copies) - copies
    ids[first[ends]] = EOS  # a line end becomes </s> of this line, <s> of the next
    ids[first[ends] + 1] = BOS
    ids = np.concatenate([np.asarray([BOS], dtype=np.int64), ids[:-1]])  # the last <s> starts nothing
    index = np.concatenate([np.zeros(1, dtype=np.int64), index[:-1]])
    empty = (ids[:-1] == BOS) & (ids[1:] == EOS)
    keep = np.ones(len(ids), dtype=bool)
    keep[:-1] &= ~empty
    keep[1:] &= ~empty
    return ids[keep], index[keep]


def normalize_for_lm(text: str) -> list[str]:
    """The words the model sees in `text`, all its lines in order, without <s> / </s> (the model adds them
    around each line with tokens): CCNet's normalization and the word split described in the module's
    docstring. normalize_for_lm("Élan, 1984!") == ["elan", ",", "0000", "!"]."""
    words: list[str] = []
    for chunk in _chunks(text):
        if chunk != _LINE_CHUNK:
            words.extend(_chunk_tokens(chunk))
    return words


@dataclass(frozen=True, eq=False)
class NgramLM:
    """A trained model in KenLM's backoff form. Word ids index `vocab` (0 <unk>, 1 <s>, 2 </s>, then the
    training words in code-point order). For order k, the n-grams seen are numbered 0.. in the order of
    their keys: a unigram's number is its word id; an n-gram of order k >= 2 has the key
    number(its first k-1 words) * vocab_size + id(its last word), `keys[k - 2]` holds them sorted.
    `log10_prob[k - 1][i]` is log10 p(last word | the others) of n-gram i of order k (-inf for <s>),
    `log10_backoff[k - 1][i]` log10 gamma of n-gram i of order k as a context (0 where it is none)."""

    order: int
    vocab: tuple[str, ...]
    keys: tuple[NDArray[np.int64], ...]
    log10_prob: tuple[NDArray[np.float32], ...]
    log10_backoff: tuple[NDArray[np.float32], ...]
    discounts: tuple[tuple[float, float, float], ...]
    discount_fallback: tuple[bool, ...]
    word_ids: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _check_order(self.order)
        n, v = self.order, len(self.vocab)
        if self.vocab[:3] != SPECIALS:
            raise ValueError(f"the vocabulary must begin with {SPECIALS}")
        shapes_ok = (
            len(self.keys) == n - 1
            and len(self.log10_prob) == n
            and len(self.log10_backoff) == n - 1
            and len(self.discounts) == n
            and len(self.discount_fallback) == n
            and len(self.log10_prob[0]) == v
            and all(len(p) == len(k) for p, k in zip(self.log10_prob[1:], self.keys, strict=True))
            and all(len(b) == len(p) for b, p in zip(self.log10_backoff, self.log10_prob, strict=False))
        )
        if not shapes_ok:
            raise ValueError("the model's arrays do not have the lengths its order and vocabulary give")
        arrays: tuple[NDArray[Any], ...] = (*self.keys, *self.log10_prob, *self.log10_backoff)
        for a in arrays:
            a.flags.writeable = False  # shared by every caller of a loaded model
        object.__setattr__(self, "word_ids", {w: i for i, w in enumerate(self.vocab)})

    @property
    def ngram_counts(self) -> tuple[int, ...]:
        """How many n-grams of each order, 1..order, the model holds."""
        return tuple(len(p) for p in self.log10_prob)


def _check_order(order: object) -> None:
    if isinstance(order, bool) or not isinstance(order, int) or not MIN_ORDER <= order <= MAX_ORDER:
        raise ValueError(f"order must be an integer from {MIN_ORDER} to {MAX_ORDER}, got {order!r}")


# ------------------------------------------------------------------------------------------------ training


@dataclass(frozen=True)
class _Grams:
    """The distinct n-grams of one order during training, numbered in key order."""

    keys: NDArray[np.int64]
    raw: NDArray[np.int64]  # occurrences in the corpus
    prefix: NDArray[np.int64]  # number of the first k-1 words (the context) at order k-1; 0 for unigrams
    suffix: NDArray[np.int64]  # number of the last k-1 words at order k-1; unused for unigrams
    bos_first: NDArray[np.bool_]


def _training_stream(texts: Iterable[str]) -> tuple[NDArray[np.int64], tuple[str, ...]]:
    """The corpus as one array of word ids, <s> w.. </s> per line, with ids in code-point order of the
    words: the ids, and so the keys and the file, do not depend on the order words first appear in."""
    seen = {w: i for i, w in enumerate(SPECIALS)}

    def encode(chunk: str) -> tuple[int, ...]:
        return tuple(seen.setdefault(t, len(seen)) for t in _chunk_tokens(chunk))

    cache: dict[str, tuple[int, ...]] = {}
    marked: list[int] = []
    for text in texts:
        _encode_text(text, encode, cache, marked)
    stream = _layout(np.asarray(marked, dtype=np.int64))[0]
    if len(stream) == 0:
        raise ValueError("the training texts hold no tokens: give a reference corpus with text in it")
    words = list(seen)  # in the order of their provisional ids
    order = sorted(range(len(SPECIALS), len(words)), key=words.__getitem__)
    vocab = (*SPECIALS, *(words[i] for i in order))
    renumber = np.empty(len(words), dtype=np.int64)
    renumber[: len(SPECIALS)] = np.arange(len(SPECIALS))
    renumber[np.asarray(order, dtype=np.int64)] = np.arange(len(SPECIALS), len(words))
    return renumber[stream], vocab


def _count(stream: NDArray[np.int64], order: int, vocab_size: int) -> list[_Grams]:
    """The distinct n-grams of orders 1..order inside one sentence each, with their raw counts. `at[i]` is
    the number of the (k-1)-gram that starts at position i (-1 where there is none), so that the k-gram
    starting there has the key at[i] * vocab_size + stream[i + k - 1]: exact integers, no hashing."""
    v = vocab_size
    sentence = np.cumsum(stream == BOS)
    none = np.zeros(0, dtype=np.int64)
    grams = [_Grams(np.arange(v), np.bincount(stream, minlength=v), np.zeros(v, np.int64), none, np.arange(v) == BOS)]
    at = stream
    for k in range(2, order + 1):
        n = len(stream) - k + 1
        if n <= 0:  # no sentence long enough: no k-grams, nor any of a higher order
            grams.append(_Grams(none, none, none, none, np.zeros(0, dtype=np.bool_)))
            continue
        if len(grams[-1].keys) * v >= 1 << 62:
            raise ValueError(f"too many {k - 1}-grams for 64-bit keys over a vocabulary of {v}")
        pos = np.flatnonzero((at[:n] >= 0) & (sentence[k - 1 :] == sentence[:n]))
        key = at[pos] * v + stream[pos + k - 1]
        keys, first, inverse, raw = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        start = pos[first]
        grams.append(_Grams(keys, raw, keys // v, at[start + 1], stream[start] == BOS))
        at = np.full(len(stream), -1, dtype=np.int64)
        at[pos] = inverse
    return grams


def _adjusted_counts(grams: list[_Grams]) -> list[NDArray[np.int64]]:
    """KenLM's adjusted counts (adjust_counts.cc): raw at the highest order; below, the number of distinct
    n-grams one order up that end with this one, i.e. of distinct left neighbours; raw again for an n-gram
    of order >= 2 that begins with <s>. <unk> and <s> get 0 as unigrams."""
    out = []
    for k, g in enumerate(grams, start=1):
        if k == len(grams):
            out.append(g.raw)
            continue
        left = np.bincount(grams[k].suffix, minlength=len(g.keys)).astype(np.int64)
        out.append(np.where(g.bos_first, g.raw, left) if k >= 2 else left)
    return out


def _discounts(adjusted: NDArray[np.int64]) -> tuple[tuple[float, float, float], bool]:
    """D1, D2, D3+ from the count-of-counts (Chen & Goodman eq. 26), and whether the fallback replaced them."""
    n = np.bincount(np.minimum(adjusted, 5), minlength=6).astype(np.float64)
    if n[1] == 0 or n[2] == 0 or n[3] == 0:
        return FALLBACK_DISCOUNTS, True
    y = n[1] / (n[1] + 2 * n[2])
    d = tuple(float(j - (j + 1) * y * n[j + 1] / n[j]) for j in (1, 2, 3))
    if not all(0.0 <= dj <= j for j, dj in zip((1, 2, 3), d, strict=True)):
        return FALLBACK_DISCOUNTS, True
    return (d[0], d[1], d[2]), False


def _interpolate(
    grams: list[_Grams], adjusted: list[NDArray[np.int64]], discounts: Sequence[tuple[float, float, float]]
) -> tuple[list[NDArray[np.float64]], list[NDArray[np.float64]]]:
    """Interpolated probabilities of every n-gram, orders ascending, and gamma of each context (1 where
    nothing follows it: then p(w | h) = p(w | h'), KenLM's backoff 0 in log10)."""
    vocab_size = len(grams[0].keys)
    probs: list[NDArray[np.float64]] = []
    backoffs: list[NDArray[np.float64]] = []
    contexts = 1  # the unigrams' one empty context
    for k, (g, a_int, (d1, d2, d3)) in enumerate(zip(grams, adjusted, discounts, strict=True), start=1):
        a = a_int.astype(np.float64)
        d = np.select([a >= 3, a == 2, a == 1], [d3, d2, d1], 0.0)
        # float64 even when the order has no n-grams (bincount of nothing is int64)
        total = np.bincount(g.prefix, weights=a, minlength=contexts).astype(np.float64)
        gamma = np.bincount(g.prefix, weights=d, minlength=contexts).astype(np.float64)
        seen = total > 0
        gamma = np.divide(gamma, total, out=np.zeros_like(gamma), where=seen)
        below = np.full(len(a), 1.0 / (vocab_size - 1)) if k == 1 else probs[-1][g.suffix]
        p = (a - d) / np.where(seen, total, 1.0)[g.prefix] + gamma[g.prefix] * below
        if k == 1:
            p[BOS] = 0.0  # <s> is never predicted: the uniform share is over the other vocab_size - 1 words
        else:
            backoffs.append(np.where(seen, gamma, 1.0))
        probs.append(p)
        contexts = len(g.keys)
    return probs, backoffs


def train_ngram_lm(texts: Iterable[str], order: int = 3) -> NgramLM:
    """An interpolated modified Kneser-Ney model of `texts` (order 2..5; CCNet uses 5). Deterministic: the
    same texts, in the same order, give the same model and the same saved bytes."""
    _check_order(order)
    stream, vocab = _training_stream(texts)
    grams = _count(stream, order, len(vocab))
    adjusted = _adjusted_counts(grams)
    found = [_discounts(a) for a in adjusted]
    probs, backoffs = _interpolate(grams, adjusted, [d for d, _ in found])
    with np.errstate(divide="ignore"):  # log10(0) = -inf for <s>, never predicted
        log_p = tuple(np.log10(p).astype(np.float32) for p in probs)
        log_b = tuple(np.log10(b).astype(np.float32) for b in backoffs)
    return NgramLM(
        order=order,
        vocab=vocab,
        keys=tuple(g.keys for g in grams[1:]),
        log10_prob=log_p,
        log10_backoff=log_b,
        discounts=tuple(d for d, _ in found),
        discount_fallback=tuple(f for _, f in found),
    )


# ------------------------------------------------------------------------------------------------- scoring


def _lookup(model: NgramLM, k: int, context: NDArray[np.int64], word: NDArray[np.int64]) -> NDArray[np.int64]:
    """Number of the k-gram (context's (k-1)-gram, word) for each pair, -1 where the model has none."""
    keys = model.keys[k - 2]
    out = np.full(len(word), -1, dtype=np.int64)
    some = np.flatnonzero(context >= 0)  # at the higher orders most contexts are unseen: search the others
    if len(keys) == 0 or len(some) == 0:
        return out
    key = context[some] * len(model.vocab) + word[some]
    at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
    out[some] = np.where(keys[at] == key, at, -1)
    return out


def _stream_log10(model: NgramLM, ids: NDArray[np.int64]) -> NDArray[np.float64]:
    """log10 p of each position of a stream of sentences <s> w.. </s> given up to order-1 words before it
    in its sentence (0 at <s>, which is context only). Vectorised over the whole stream: at[k - 1][i] is
    the number of the k-gram ending at i; the longest one found gives the probability, and the backoffs
    of the longer contexts that exist multiply it (KenLM's backoff query)."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.float64)
    is_bos = ids == BOS
    at = [ids]
    for k in range(2, model.order + 1):
        before = np.concatenate([[-1], at[-1][:-1]]).astype(np.int64)
        at.append(_lookup(model, k, np.where(is_bos, -1, before), ids))
    log_p = model.log10_prob[0][ids].astype(np.float64)
    longest = np.ones(len(ids), dtype=np.int64)
    for k in range(2, model.order + 1):  # indexing only where found: an order may hold no n-grams at all
        hit = np.flatnonzero(at[k - 1] >= 0)
        log_p[hit] = model.log10_prob[k - 1][at[k - 1][hit]]
        longest[hit] = k
    for j in range(1, model.order):  # the context of j words before position i: the j-gram ending at i - 1
        context = np.concatenate([[-1], at[j - 1][:-1]]).astype(np.int64)
        use = np.flatnonzero((context >= 0) & (longest <= j) & ~is_bos)
        log_p[use] += model.log10_backoff[j - 1][context[use]]
    log_p[is_bos] = 0.0
    return log_p


def _score_batch(model: NgramLM, marked: list[int]) -> NDArray[np.float64]:
    """Perplexity of each text of a batch (ids with _LINE / _DOC marks, see _encode_text)."""
    ids, text = _layout(np.asarray(marked, dtype=np.int64))
    texts = marked.count(_DOC)
    log_p = np.bincount(text, weights=_stream_log10(model, ids), minlength=texts)
    tokens = np.bincount(text, weights=(ids != BOS).astype(np.float64), minlength=texts)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return np.where(tokens > 0, 10.0 ** (-log_p / np.maximum(tokens, 1.0)), math.inf)


def perplexities(model: NgramLM, texts: Iterable[str]) -> NDArray[np.float64]:
    """Per-token perplexity of each document, 10 ** (-log10 p / tokens) as KenLM and CCNet report it
    (tokens: words plus one </s> per line with words); float("inf") for a document with no tokens.
    Vectorised over batches of documents: use this, not perplexity() in a loop, for many."""
    ids = model.word_ids

    def encode(chunk: str) -> tuple[int, ...]:
        return tuple(map(ids.get, _chunk_tokens(chunk), repeat(UNK)))

    cache: dict[str, tuple[int, ...]] = {}
    out: list[NDArray[np.float64]] = []
    marked: list[int] = []
    for text in texts:
        _encode_text(text, encode, cache, marked)
        if len(marked) >= _SCORE_BATCH_TOKENS:
            out.append(_score_batch(model, marked))
            marked = []
    out.append(_score_batch(model, marked))
    return np.concatenate(out)


def perplexity(model: NgramLM, text: str) -> float:
    """Perplexity of one document (see perplexities): float("inf") when it has no tokens."""
    return float(perplexities(model, [text])[0])


def next_word_log10_probs(model: NgramLM, context: Sequence[str]) -> NDArray[np.float64]:
    """log10 p(w | context) for every word id w (-inf for <s>): the last order-1 words of `context` count,
    a word not in the vocabulary is <unk>, and "<s>" as the first word of a context means a sentence start.
    Each order's probability of each word from the one below: the n-gram's own if it was seen, else the
    context's backoff times the lower order's (the interpolated model, summing to 1)."""
    v = len(model.vocab)
    ids = [model.word_ids.get(w, UNK) for w in context][len(context) - min(len(context), model.order - 1) :]
    words = np.arange(v, dtype=np.int64)
    log_p = model.log10_prob[0].astype(np.float64)
    for j in range(1, len(ids) + 1):
        number = np.asarray([ids[-j]], dtype=np.int64)
        for k, w in enumerate(ids[len(ids) - j + 1 :], start=2):  # the number of the last j words as a j-gram
            number = _lookup(model, k, number, np.asarray([w], dtype=np.int64))
        if number[0] < 0:
            break  # an unseen context: the longer ones, which end with it, are unseen too
        hit = _lookup(model, j + 1, np.full(v, number[0], dtype=np.int64), words)
        backed = log_p + float(model.log10_backoff[j - 1][number[0]])  # a new array: log_p is not changed
        found = np.flatnonzero(hit >= 0)
        backed[found] = model.log10_prob[j][hit[found]]
        log_p = backed
    return log_p


def perplexity_cutoffs(
    values: ArrayLike, head_percentile: float = HEAD_PERCENTILE, tail_percentile: float = TAIL_PERCENTILE
) -> tuple[float, float]:
    """CCNet's bucket cutoffs (cc_net/perplexity.py PerplexityBucket, cutoff.csv): the head_percentile-th
    and tail_percentile-th percentiles of a sample's perplexities, over the finite values."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if len(finite) == 0:
        raise ValueError("no finite perplexity to take percentiles of")
    head, tail = np.percentile(finite, [head_percentile, tail_percentile])
    return float(head), float(tail)


def perplexity_bucket(value: float, cutoffs: tuple[float, float]) -> str:
    """The bucket of a perplexity: "head" below the first cutoff, "middle" below the second, else "tail"
    (inf and nan: tail), as CCNet's PerplexityBucket.get_bucket."""
    if value < cutoffs[0]:
        return "head"
    return "middle" if value < cutoffs[1] else "tail"


# ---------------------------------------------------------------------------------------------------- file


def _payload_arrays(model: NgramLM) -> list[tuple[str, NDArray[Any]]]:
    vocab = np.frombuffer("\n".join(model.vocab).encode("utf-8"), dtype=np.uint8)  # no token holds whitespace
    arrays: list[tuple[str, NDArray[Any]]] = [("vocab_utf8", vocab)]
    arrays += [(f"log10_prob_{k}", p.astype("<f4")) for k, p in enumerate(model.log10_prob, start=1)]
    arrays += [(f"log10_backoff_{k}", b.astype("<f4")) for k, b in enumerate(model.log10_backoff, start=1)]
    arrays += [(f"keys_{k}", keys.astype("<i8")) for k, keys in enumerate(model.keys, start=2)]
    return arrays


def save_ngram_lm(model: NgramLM, path: str | PathLike[str]) -> None:
    """Write `model` to `path` atomically (runlib.util.atomic: a reader or a kill sees the old file or the
    new one). Same model, same bytes."""
    manifest, parts, offset = [], [], 0
    for name, a in _payload_arrays(model):
        data = a.tobytes()
        pad = -len(data) % 8
        manifest.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        parts.append(data + b"\0" * pad)
        offset += len(data) + pad
    payload = b"".join(parts)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "normalization": NORMALIZATION,
        "smoothing": SMOOTHING,
        "order": model.order,
        "vocab_size": len(model.vocab),
        "ngram_counts": list(model.ngram_counts),
        "discounts": [list(d) for d in model.discounts],
        "discount_fallback": list(model.discount_fallback),
        "arrays": manifest,
        "payload_bytes": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    line = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    write_bytes_atomic(Path(path), line + b"\n" + payload)


def _read_header(data: bytes) -> tuple[dict[str, Any], bytes]:
    end = data.find(b"\n", 0, _MAX_HEADER_BYTES)
    if end < 0:
        raise ValueError("no header line: not a runlib n-gram LM file, or truncated")
    try:
        header = json.loads(data[:end].decode("ascii"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: "[[[[..." garbage
        raise ValueError("the header line is not JSON: not a runlib n-gram LM file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"the header does not name the format {FORMAT!r}: not a runlib n-gram LM file")
    if header.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"format_version {header.get('format_version')!r}, this runlib reads {FORMAT_VERSION}: "
            "train the model again with this runlib"
        )
    if header.get("normalization") != NORMALIZATION:
        raise ValueError(
            f"trained with normalization {header.get('normalization')!r}, this runlib normalizes text as "
            f"{NORMALIZATION!r}: train the model again"
        )
    payload = data[end + 1 :]
    if len(payload) != header.get("payload_bytes"):
        raise ValueError(f"payload of {len(payload)} bytes, the header says {header.get('payload_bytes')}: truncated?")
    if hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
        raise ValueError("the payload's SHA-256 differs from the header's: the file was altered or damaged")
    return header, payload


def _arrays(header: dict[str, Any], payload: bytes) -> dict[str, NDArray[Any]]:
    """The payload's arrays as the manifest describes them, each checked to lie inside the payload."""
    arrays: dict[str, NDArray[Any]] = {}
    allowed = {"|u1", "<f4", "<i8"}
    for entry in header["arrays"]:
        name, dtype, shape, offset = entry["name"], entry["dtype"], entry["shape"], entry["offset"]
        if dtype not in allowed or not isinstance(shape, list) or len(shape) != 1:
            raise ValueError(f"array {name!r}: unexpected dtype or shape in the manifest")
        count = shape[0]
        if not isinstance(count, int) or not isinstance(offset, int) or min(count, offset) < 0:
            raise ValueError(f"array {name!r}: a length or offset in the manifest is not a count")
        if offset + np.dtype(dtype).itemsize * count > len(payload):
            raise ValueError(f"array {name!r} does not lie inside the payload")
        arrays[name] = np.frombuffer(payload, dtype=dtype, count=count, offset=offset)
    return arrays


def load_ngram_lm(path: str | PathLike[str]) -> NgramLM:
    """Read a model save_ngram_lm wrote. ValueError naming the file when it is not one, was truncated or
    altered (the SHA-256 of the payload), or comes from another format version or normalization."""
    data = Path(path).read_bytes()
    try:
        header, payload = _read_header(data)
        arrays = _arrays(header, payload)
        order = header["order"]
        _check_order(order)
        vocab = tuple(arrays["vocab_utf8"].tobytes().decode("utf-8").split("\n"))
        if len(vocab) != header["vocab_size"]:
            raise ValueError("the vocabulary's size differs from the header's")
        model = NgramLM(
            order=order,
            vocab=vocab,
            keys=tuple(arrays[f"keys_{k}"].astype(np.int64) for k in range(2, order + 1)),
            log10_prob=tuple(arrays[f"log10_prob_{k}"].astype(np.float32) for k in range(1, order + 1)),
            log10_backoff=tuple(arrays[f"log10_backoff_{k}"].astype(np.float32) for k in range(1, order)),
            discounts=tuple((float(a), float(b), float(c)) for a, b, c in header["discounts"]),
            discount_fallback=tuple(bool(f) for f in header["discount_fallback"]),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else f"missing or malformed field {exc}"
        raise ValueError(f"{path}: cannot load the n-gram LM: {detail}") from None
    return model
