"""runlib.curate.substring: exact-substring deduplication (ExactSubstr, Lee et al. 2022) within one shard.
The later copy of a repeated run of >= min_tokens tokens goes, the first stays (keep_first=False: all go, as
the reference implementation); nothing matches across a document boundary; spans are character offsets;
the suffix-array result equals a brute-force window oracle on random token sequences."""

from __future__ import annotations

import ctypes
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlib.curate.substring import (
    COUNT_KEYS,
    cut_spans,
    remove_repeated_substrings,
    repeated_spans,
    token_spans,
)


@pytest.fixture(scope="module", autouse=True)
def one_openmp_thread():
    """The pydivsufsort wheel's libdivsufsort runs OpenMP parallel regions; on a busy machine handing each
    call to a thread team costs ~15 ms, which the hundreds of tiny calls here would pay (1 thread: ~0.5 ms).
    Only the wheel's own libgomp copy (pydivsufsort.libs) is limited, and restored after this module."""
    import pydivsufsort

    libs = [
        ctypes.CDLL(str(p))
        for p in sorted((Path(pydivsufsort.__file__).parent.parent / "pydivsufsort.libs").glob("libgomp*"))
    ]
    before = [lib.omp_get_max_threads() for lib in libs]
    for lib in libs:
        lib.omp_set_num_threads(1)
    yield
    for lib, threads in zip(libs, before, strict=True):
        lib.omp_set_num_threads(threads)


K = 50
# 60 tokens (59 words and a full stop), none of them in the surrounding text
PARAGRAPH = " ".join(f"p{i}" for i in range(59)) + "."


def words(prefix: str, n_tokens: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n_tokens))


def test_a_paragraph_in_two_documents_is_removed_from_the_second_only():
    first = f"Alpha intro here {PARAGRAPH} Outro of alpha."
    second = f"Beta starts\n\n{PARAGRAPH}\n\nand ends."
    spans = repeated_spans([first, second], K)
    at = second.index(PARAGRAPH)
    assert spans == [[], [(at, at + len(PARAGRAPH))]]
    out, counts = remove_repeated_substrings([first, second], K)
    assert out == [first, "Beta starts\n\nand ends."]  # the paragraph break survives the cut
    assert counts == {"spans": 1, "chars_removed": len(second) - len(out[1]), "docs_changed": 1}
    # the reference's rule: every occurrence goes
    out_all, counts_all = remove_repeated_substrings([first, second], K, keep_first=False)
    assert out_all == ["Alpha intro here Outro of alpha.", "Beta starts\n\nand ends."]
    assert counts_all["spans"] == 2 and counts_all["docs_changed"] == 2


def test_the_first_copy_in_input_order_is_kept_whichever_document_it_is_in():
    docs = [f"one {PARAGRAPH} x", f"two {PARAGRAPH} y", f"three {PARAGRAPH} z"]
    out, counts = remove_repeated_substrings(docs, K)
    assert out == [docs[0], "two y", "three z"]
    assert counts["spans"] == 2
    out, _ = remove_repeated_substrings(docs[::-1], K)
    assert out == [docs[2], "two y", "one x"]


def test_a_repeat_shorter_than_min_tokens_stays():
    short = words("s", K - 1)
    docs = [f"a {short} b", f"c {short} d"]
    assert repeated_spans(docs, K) == [[], []]
    assert remove_repeated_substrings(docs, K) == (docs, dict.fromkeys(COUNT_KEYS, 0))
    exact = words("s", K)  # exactly min_tokens tokens is enough
    assert repeated_spans([f"a {exact} b", f"c {exact} d"], K)[1] == [(2, 2 + len(exact))]


def test_a_repeat_inside_one_document():
    doc = f"Head {PARAGRAPH} middle words {PARAGRAPH} tail"
    second = doc.rindex(PARAGRAPH)
    assert repeated_spans([doc], K) == [[(second, second + len(PARAGRAPH))]]
    assert remove_repeated_substrings([doc], K)[0] == [f"Head {PARAGRAPH} middle words tail"]
    # periodic text: every window after the first repeats an earlier one
    # and a window can lose tokens to an overlapping later copy of itself: "ha ha" at 0 keeps only "ha"
    assert remove_repeated_substrings(["ha ha ha ha ha ha ha"], 2)[0] == ["ha"]


def test_no_match_across_a_document_boundary():
    end_of_a, start_of_b = words("x", 25), words("y", 25)
    joined = f"{end_of_a} {start_of_b}"  # 50 tokens: doc A's end and doc B's start, adjacent in the shard
    for docs in (
        [f"A {end_of_a}", f"{start_of_b} B", f"C {joined} C"],
        [f"C {joined} C", f"A {end_of_a}", f"{start_of_b} B"],
    ):
        for keep_first in (True, False):
            assert repeated_spans(docs, K, keep_first=keep_first) == [[], [], []], (docs, keep_first)
    # sanity: the same 50 tokens inside one document do match
    assert repeated_spans([f"A {joined}", f"C {joined} C"], K)[1] != []


def test_overlapping_and_touching_repeats_merge_into_one_span():
    # windows "p q r s" and "t u v w" both occur in the first document, not together: they touch in the
    # second and merge, though the merged run occurs nowhere else (the reference's cmd_collect does the same)
    docs = ["p q r s . t u v w", "p q r s t u v w"]
    assert repeated_spans(docs, 4) == [[], [(0, len(docs[1]))]]
    # overlapping: "a b c d e" and "c d e f g" from two documents overlap in the third
    docs = ["a b c d e", "c d e f g", "z a b c d e f g z"]
    assert repeated_spans(docs, 5) == [[], [], [(2, 15)]]
    assert remove_repeated_substrings(docs, 5)[0][2] == "z z"
    # two separate repeats in one document stay two spans
    docs = ["a b c d", "e f g h", "a b c d X e f g h"]
    assert repeated_spans(docs, 4) == [[], [], [(0, 7), (10, 17)]]
    assert remove_repeated_substrings(docs, 4) == (
        ["a b c d", "e f g h", "X"],
        {"spans": 2, "chars_removed": 16, "docs_changed": 1},
    )


def test_a_cut_can_create_a_new_repeat():
    """The reference README's example (k = 4, every copy removed): striking "a b c d" twice leaves
    "e f g h . e f g h", which repeats again; a second pass removes that too."""
    once, _ = remove_repeated_substrings(["e a b c d f g h . e f a b c d g h"], 4, keep_first=False)
    assert once == ["e f g h . e f g h"]
    assert remove_repeated_substrings(once, 4, keep_first=False)[0] == ["."]
    assert remove_repeated_substrings(once, 4)[0] == ["e f g h ."]


def test_unicode_spans_are_character_offsets():
    paragraph = " ".join(f"naïve{i} café — 東京{i}" for i in range(15))  # 60 tokens
    assert len(token_spans(paragraph)) == 60
    docs = ["Ünïcödé 🙂 ½ " + paragraph + " fin", "日本語のテキスト、 " + paragraph]
    assert len(docs[1].encode()) != len(docs[1])  # bytes and characters differ
    spans = repeated_spans(docs, K)
    assert spans[0] == []
    [(start, end)] = spans[1]
    assert docs[1][start:end] == paragraph
    assert remove_repeated_substrings(docs, K)[0] == [docs[0], "日本語のテキスト、"]


def test_whitespace_at_a_cut():
    assert cut_spans("a b c", [(2, 3)]) == "a c"
    assert cut_spans("a\nb c", [(2, 3)]) == "a\nc"
    assert cut_spans("a\n\nb\n\nc", [(3, 4)]) == "a\n\nc"
    assert cut_spans("foo-bar-baz", [(3, 8)]) == "foo baz"  # two words would glue: a space
    assert cut_spans("x,y,z", [(2, 3)]) == "x,,z"  # punctuation: nothing added
    assert cut_spans("  lead rest", [(2, 6)]) == "rest"  # whitespace next to a cut at an end of the text goes
    assert cut_spans("b tail ", [(2, 6)]) == "b"
    assert cut_spans("  a b c  ", [(4, 5)]) == "  a c  "  # whitespace away from a cut stays
    assert cut_spans(" all ", [(1, 4)]) == ""
    assert cut_spans("a b c d e", [(2, 3), (6, 7)]) == "a c e"


def test_arguments_are_checked():
    for bad in (0, -1):
        with pytest.raises(ValueError, match="min_tokens"):
            repeated_spans(["a b"], bad)
        with pytest.raises(ValueError, match="min_tokens"):
            remove_repeated_substrings(["a b"], bad)
    for wrong in (1.5, True, "3"):
        with pytest.raises(TypeError):
            repeated_spans(["a b"], wrong)
    with pytest.raises(TypeError):
        repeated_spans("a b a b", 1)
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        repeated_spans(["a", b"b"], 1)


def test_empty_inputs():
    assert repeated_spans([], 1) == []
    assert remove_repeated_substrings([], 1) == ([], dict.fromkeys(COUNT_KEYS, 0))
    assert repeated_spans(["", "  \n", ""], 1) == [[], [], []]
    assert repeated_spans(["", "a", "", "a"], 1) == [[], [], [], [(0, 1)]]


# --- properties and the brute-force oracle -------------------------------------------------------------

VOCAB = ["a", "b", "c", "é", "東", ".", ",", "ab"]
SPACES = [" ", "  ", "\n", "\n\n", "\t", ""]


@st.composite
def shards(draw: st.DrawFn) -> list[str]:
    """Small shards over a tiny vocabulary, so that repeats of a few tokens are common. An empty gap between
    two word tokens would merge them into one token; that is fine, the oracle tokenizes the text itself."""
    docs = []
    for _ in range(draw(st.integers(0, 5))):
        tokens = draw(st.lists(st.sampled_from(VOCAB), max_size=20))
        gaps = draw(st.lists(st.sampled_from(SPACES), min_size=len(tokens) + 1, max_size=len(tokens) + 1))
        docs.append("".join(gap + token for gap, token in zip(gaps, [*tokens, ""], strict=True)))
    return docs


def oracle_spans(texts: list[str], k: int, keep_first: bool) -> list[list[tuple[int, int]]]:
    """Every window of k tokens inside one document, compared as tuples of strings; a token is removed when a
    removed window covers it; spans are the runs of removed tokens."""
    tokens = [[(m.start(), m.end(), m.group()) for m in re.finditer(r"\w+|[^\w\s]", text)] for text in texts]
    windows = [[tuple(t[2] for t in doc[i : i + k]) for i in range(len(doc) - k + 1)] for doc in tokens]
    totals = Counter(w for doc in windows for w in doc)
    seen: set[tuple[str, ...]] = set()
    result = []
    for doc, doc_windows in zip(tokens, windows, strict=True):
        removed = [False] * len(doc)
        for i, window in enumerate(doc_windows):
            if (window in seen) if keep_first else totals[window] > 1:
                removed[i : i + k] = [True] * k
            seen.add(window)
        spans: list[tuple[int, int]] = []
        for i, flag in enumerate(removed):
            if flag and (i == 0 or not removed[i - 1]):
                spans.append((doc[i][0], doc[i][1]))
            elif flag:
                spans[-1] = (spans[-1][0], doc[i][1])
        result.append(spans)
    return result


@settings(max_examples=150, deadline=None)
@given(shards(), st.integers(1, 5), st.booleans())
def test_suffix_array_equals_the_brute_force_oracle(texts, k, keep_first):
    assert repeated_spans(texts, k, keep_first=keep_first) == oracle_spans(texts, k, keep_first)


def test_a_larger_random_shard_equals_the_oracle():
    """Longer documents over 3 words: large groups of identical windows, long runs, many documents."""
    rng = random.Random(0)
    texts = [" ".join(rng.choices("abc", k=rng.randint(0, 200))) for _ in range(40)]
    for k in (3, 8, 20):
        for keep_first in (True, False):
            assert repeated_spans(texts, k, keep_first=keep_first) == oracle_spans(texts, k, keep_first), k


@settings(max_examples=80, deadline=None)
@given(shards(), st.integers(1, 4), st.booleans())
def test_spans_are_in_bounds_sorted_disjoint_and_on_token_boundaries(texts, k, keep_first):
    all_spans = repeated_spans(texts, k, keep_first=keep_first)
    assert len(all_spans) == len(texts)
    out, counts = remove_repeated_substrings(texts, k, keep_first=keep_first)
    assert counts["spans"] == sum(map(len, all_spans))
    assert counts["docs_changed"] == sum(1 for spans in all_spans if spans)
    assert counts["chars_removed"] == sum(map(len, texts)) - sum(map(len, out))
    for text, spans, kept in zip(texts, all_spans, out, strict=True):
        starts = {s for s, _ in token_spans(text)}
        ends = {e for _, e in token_spans(text)}
        previous_end = -1
        for start, end in spans:
            assert 0 <= start < end <= len(text)
            assert start > previous_end  # sorted, disjoint, not touching (a kept token lies between)
            assert start in starts and end in ends
            assert text[start:end] == text[start:end].strip()
            previous_end = end
        # cutting never adds tokens nor touches a text without spans
        assert kept == text if not spans else len(token_spans(kept)) < len(token_spans(text))


@settings(max_examples=50, deadline=None)
@given(shards(), st.integers(1, 4))
def test_order_properties(texts, k):
    # keep_first: a document's spans depend only on the documents before it (and itself)
    spans = repeated_spans(texts, k)
    for n in range(len(texts)):
        assert repeated_spans(texts[: n + 1], k) == spans[: n + 1]
    # keep_first=False: the order of the documents does not matter
    every = repeated_spans(texts, k, keep_first=False)
    assert repeated_spans(texts[::-1], k, keep_first=False) == every[::-1]
    # keep_first removes a subset of what keep_first=False removes
    for first_only, all_copies in zip(spans, every, strict=True):
        for start, end in first_only:
            assert any(s <= start and end <= e for s, e in all_copies)
