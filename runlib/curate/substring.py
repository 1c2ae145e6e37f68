"""Exact-substring deduplication within one shard: ExactSubstr of Lee et al. 2022 ("Deduplicating Training
Data Makes Language Models Better", ACL 2022, arXiv 2107.06499, section 4.1 "Exact Substring Duplication"),
in one process on numpy; pure functions, no I/O. The reference implementation is
github.com/google-research/deduplicate-text-datasets at commit 4e9888ac3f95dc4f6169867a04c4c19df02dafe3
(README.md, src/main.rs), cited below as "the reference".

Tokens (no model): TOKEN_RE, r"\\w+|[^\\w\\s]": a maximal run of word characters (re's Unicode \\w:
str.isalnum() or "_") or one character that is neither a word character nor whitespace (str.isspace()):
each punctuation mark, symbol, emoji or combining mark alone. Whitespace only separates tokens, so "don't"
is three tokens (don ' t) and a run of CJK ideographs without spaces or punctuation is one token.
`min_tokens` (k) counts these tokens. The paper's k = 50 counts GPT-2 BPE tokens (the reference README: "we
used 50 tokens (which is 100 bytes)"); both come to about one per English word or punctuation mark, but the
two are not calibrated against each other here.

Which text is repeated. A window is k consecutive tokens of one document (never across two documents). Each
distinct token string gets an integer id; the documents' id sequences are concatenated, each followed by a
separator id of its own (used nowhere else: a match stops there, so no window spans a document boundary);
the suffix array of that integer sequence (pydivsufsort.divsufsort) and its LCP array (pydivsufsort.kasai,
lcp[i] = common prefix of the i-th and (i+1)-th suffix in sorted order) put the starts of identical windows
in one run of rows linked by lcp >= k (the reference's cmd_self_similar in src/main.rs walks the same
adjacent pairs of its byte-level suffix array, comparing the first k bytes).

Which occurrences are removed:
  * keep_first=True (the default): a window is removed when an identical window starts earlier in input
    order (an earlier document, or earlier in the same document): the first occurrence of a window is never
    removed for being repeated, so of a paragraph found twice the first copy stays. (It can still lose
    tokens to a later copy that overlaps it inside one document: "ha ha ha" with k = 2 keeps "ha".) This
    deviates from the reference, which strikes every occurrence, the first included: cmd_self_similar writes
    every suffix of a matching group and cmd_collect turns all of them into ranges (README "Collecting the
    duplicates together": "completely striking them from the dataset"; the repository's issue #32, "Retain
    one instance per duplicate"). Within one shard, striking all copies would drop a paragraph quoted twice
    from the corpus altogether, while removing the later copies already removes the repetition. So the spans
    of the first document depend on the first document alone, and a document's spans never depend on the
    documents after it.
  * keep_first=False: the reference's rule, every occurrence of a repeated window is removed; the result
    does not depend on the order of the documents.
A token is removed when it lies in a removed window. The removed tokens of a document form runs: windows
that overlap or touch (one starts at or before the end of the previous) merge, as cmd_collect merges its
[p, p + k) ranges (`data_pointer <= prev_end`). So a span can be longer than any one repeated substring (the
cmd_collect comment: "each byte in the sequence is part of some length_threshold duplicate"). A span is a
run in character offsets of the str (not bytes): [start of its first token, end of its last token); the
whitespace around it is not part of it. Spans of a document are sorted and disjoint, with at least one kept
token between two of them.

Cutting (remove_repeated_substrings). The reference cuts the byte ranges out as they are (README: "Alice
wantedstore"). Here, at each cut the whitespace on both sides (and of anything between two cuts that has no
token left) becomes one joiner: "\\n\\n" if it held two or more newlines, "\\n" if one, " " if it held other
whitespace; with no whitespace there, "" unless both neighbours are word characters (then " ", so two words
do not glue into one token). At the start or end of a document the whitespace next to a cut is dropped.
A cut can create a new repeat across it, so a second pass may find more (the README's example; the paper
ran the reference twice): the functions are not idempotent.

Memory and time (N tokens): the suffix array phase is the peak, about 45 bytes per token (ru_maxrss
over the input strings, generated text: 434 MB for 50 MB of text, 9.6 M tokens; 55 bytes per token at 5 MB,
where the vocabulary weighs more): token ids (4 bytes a token, uint32) and token start offsets (4, int32)
are kept; pydivsufsort's int path copies the ids as big-endian bytes (4 + 4), sorts all suffixes of those
bytes (an int32 per byte: 16) and keeps the aligned ones (a 16-byte temporary, then 4), then kasai's LCP
(4) and rank arrays. CPU time on this machine: 1.6 s for 5 MB (1 M tokens), 17 s for 50 MB, of which 12 s
are tokenising and looking up ids in Python and 6 s the suffix array, LCP and grouping. The pydivsufsort
wheel runs libdivsufsort with OpenMP: a second thread gained nothing here (4.8 M tokens, 2 cores), and on
a busy machine each call pays milliseconds handing work to the thread team; where shards run in parallel
processes, give them OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import itertools
import operator
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# re.split with the token pattern as a group alternates [gap, token, gap, ..., token, gap]: the gaps are the
# whitespace between tokens (every other character is in a token), so offsets come from the part lengths
_SPLIT_RE = re.compile(f"({TOKEN_RE.pattern})")
_WORD_CHAR_RE = re.compile(r"\w")
COUNT_KEYS = ("spans", "chars_removed", "docs_changed")

Span = tuple[int, int]


@dataclass(frozen=True)
class _Shard:
    """The shard as one integer sequence (ids) and where each token starts in its document's str."""

    ids: NDArray[np.unsignedinteger]  # token ids, a distinct separator id after each document
    start_chars: NDArray[np.signedinteger]  # per position of ids: the token's start offset in its document
    doc_first: NDArray[np.int64]  # per document: position of its first token (or separator) in ids


def token_spans(text: str) -> list[Span]:
    """The tokens of `text` as character spans [start, end): what min_tokens counts (TOKEN_RE)."""
    return [match.span() for match in TOKEN_RE.finditer(text)]


def repeated_spans(texts: Sequence[str], min_tokens: int, *, keep_first: bool = True) -> list[list[Span]]:
    """For each text, the sorted, merged character spans [start, end) that belong to a repeated run of at
    least `min_tokens` tokens (within one document or across documents, never across a document boundary).
    keep_first=True: only occurrences after the first in input order are marked (see the module docstring);
    keep_first=False: every occurrence, as the reference implementation."""
    k = _checked_min_tokens(texts, min_tokens)
    spans: list[list[Span]] = [[] for _ in texts]
    if not texts:
        return spans
    shard = _encode(texts)
    window_starts = _removed_window_starts(shard.ids, k, keep_first)
    first_tokens, end_tokens = _merged_runs(window_starts, k)
    docs = np.searchsorted(shard.doc_first, first_tokens, side="right") - 1
    starts_chars = shard.start_chars[first_tokens].tolist()
    last_starts_chars = shard.start_chars[end_tokens - 1].tolist()
    for doc, start_chars, last_start_chars in zip(docs.tolist(), starts_chars, last_starts_chars, strict=True):
        # the run's last token ends where TOKEN_RE, matched again at its start, ends (ends are not stored)
        last_token = TOKEN_RE.match(texts[doc], last_start_chars)
        assert last_token is not None  # a stored start is always the start of a token
        spans[doc].append((start_chars, last_token.end()))
    return spans


def remove_repeated_substrings(
    texts: Sequence[str], min_tokens: int, *, keep_first: bool = True
) -> tuple[list[str], dict[str, int]]:
    """The texts with repeated_spans(texts, min_tokens, keep_first=...) cut out, the whitespace at each cut
    tidied (module docstring), and counts: "spans" (spans cut, all documents), "chars_removed" (characters
    fewer in the output than in the input, whitespace tidying included) and "docs_changed" (documents with
    at least one span)."""
    spans_by_doc = repeated_spans(texts, min_tokens, keep_first=keep_first)
    out: list[str] = []
    counts = dict.fromkeys(COUNT_KEYS, 0)
    for text, spans in zip(texts, spans_by_doc, strict=True):
        if not spans:
            out.append(text)
            continue
        kept = cut_spans(text, spans)
        out.append(kept)
        counts["spans"] += len(spans)
        counts["chars_removed"] += len(text) - len(kept)
        counts["docs_changed"] += 1
    return out, counts


def cut_spans(text: str, spans: Sequence[Span]) -> str:
    """`text` without the sorted, disjoint character `spans`; the whitespace around each cut becomes one
    joiner (module docstring: a paragraph break survives a cut, words never glue together)."""
    bounds = [0, *itertools.chain.from_iterable(spans), len(text)]
    pieces = [text[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]
    last = len(pieces) - 1
    out: list[str] = []
    pending_ws = ""  # whitespace met since the last kept character, across cuts
    for i, piece in enumerate(pieces):
        core = piece
        if i > 0:  # a cut before this piece: its leading whitespace joins the pending whitespace
            core = piece.lstrip()
            pending_ws += piece[: len(piece) - len(core)]
        trailing_ws = ""
        if i < last:  # a cut after it
            stripped = core.rstrip()
            trailing_ws = core[len(stripped) :]
            core = stripped
        if not core:
            pending_ws += trailing_ws
            continue
        if out:
            out.append(_joiner(pending_ws, out[-1][-1], core[0]))
        out.append(core)
        pending_ws = trailing_ws
    return "".join(out)


def _joiner(whitespace: str, left_char: str, right_char: str) -> str:
    newlines = whitespace.count("\n")
    if newlines >= 2:
        return "\n\n"
    if newlines == 1:
        return "\n"
    if whitespace:
        return " "
    # no whitespace at the cut: two word characters meeting would make one token of two
    return " " if _WORD_CHAR_RE.match(left_char) and _WORD_CHAR_RE.match(right_char) else ""


def _checked_min_tokens(texts: Sequence[str], min_tokens: int) -> int:
    if isinstance(texts, str):  # a str is a Sequence[str] too: each character would be a document
        raise TypeError("texts must be a sequence of str, not a str")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
    if isinstance(min_tokens, bool):
        raise TypeError("min_tokens must be an int, not a bool")
    k = operator.index(min_tokens)  # TypeError for a float or a str
    if k < 1:
        raise ValueError(f"min_tokens must be >= 1, got {k}")
    return k


def _encode(texts: Sequence[str]) -> _Shard:
    """Token ids (with a separator after each document) and token start offsets, in compact buffers."""
    vocab: dict[str, int] = {}
    # one fresh id per token occurrence is drawn and kept only for a new string (dict.setdefault), and each
    # separator takes one too: ids are unique without a Python-level branch per token; they stay below
    # tokens + documents, so uint32 holds them for any shard under 4 G tokens
    fresh = itertools.count()
    ids = array("q")
    offset_code = "i" if max(map(len, texts)) < 1 << 31 else "q"  # int32 offsets unless a text is >= 2 G chars
    start_chars = array(offset_code)
    doc_first = np.empty(len(texts), dtype=np.int64)
    for doc, text in enumerate(texts):
        doc_first[doc] = len(ids)
        parts = _SPLIT_RE.split(text)
        ids.extend(map(vocab.setdefault, parts[1::2], fresh))
        ids.append(next(fresh))
        part_ends = list(itertools.accumulate(map(len, parts)))
        start_chars.extend(part_ends[0:-1:2])  # token i starts where part 2i (the gap before it) ends
        start_chars.append(len(text))  # the separator's slot: never a run's first or last token
    del vocab
    as_int64 = np.frombuffer(ids, dtype=np.int64)
    id_dtype = np.uint32 if int(as_int64.max()) < 1 << 32 else np.uint64
    return _Shard(
        ids=as_int64.astype(id_dtype),
        start_chars=np.frombuffer(start_chars, dtype=np.int32 if offset_code == "i" else np.int64),
        doc_first=doc_first,
    )


def _removed_window_starts(ids: NDArray[np.unsignedinteger], k: int, keep_first: bool) -> NDArray[np.int64]:
    """Sorted positions in ids of the windows (k tokens) to remove: those with an identical window elsewhere
    (keep_first=False) or earlier (keep_first=True)."""
    try:  # imported here: only this stage needs it, and importing runlib.curate stays cheap
        from pydivsufsort import divsufsort, kasai  # type: ignore[import-untyped, unused-ignore]
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("exact-substring deduplication needs pydivsufsort (pip install pydivsufsort)") from error
    suffixes: NDArray[np.signedinteger] = divsufsort(ids)
    lcp: NDArray[np.signedinteger] = kasai(ids, suffixes)
    # rows i and i + 1 of the suffix array start with the same window; a separator is unique, so a common
    # prefix never reaches one, and lcp >= k already means both windows lie inside their documents
    linked = lcp >= k
    del lcp
    in_group = linked.copy()
    in_group[1:] |= linked[:-1]
    rows = np.flatnonzero(in_group)
    del in_group
    starts = suffixes[rows].astype(np.int64)
    del suffixes
    if keep_first and starts.size:
        # a group of identical windows: consecutive rows joined by linked; keep its smallest start (the
        # first occurrence in input order) and remove the others
        group_first = np.ones(rows.size, dtype=bool)
        group_first[1:] = ~linked[rows[1:] - 1]
        group_rows = np.flatnonzero(group_first)
        earliest = np.minimum.reduceat(starts, group_rows)
        sizes = np.diff(np.append(group_rows, rows.size))
        starts = starts[starts != np.repeat(earliest, sizes)]
    starts.sort()
    return starts


def _merged_runs(window_starts: NDArray[np.int64], k: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Runs [first, end) of positions covered by the sorted windows [start, start + k): overlapping or touching
    windows merge (the reference's cmd_collect). A run never crosses a separator: every window ends at or
    before its document's separator and the next document's windows start after it."""
    if not window_starts.size:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    breaks = np.flatnonzero(window_starts[1:] > window_starts[:-1] + k) + 1
    firsts = window_starts[np.concatenate(([0], breaks))]
    ends = window_starts[np.concatenate((breaks - 1, [window_starts.size - 1]))] + k
    return firsts, ends
