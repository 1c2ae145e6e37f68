"""Words and sentences as datatrove 0.10 counts them (runlib.curate.words), held against datatrove itself:
its split_into_words and split_into_sentences on pages, on planted strings and on generated text; Gopher's
verdicts against datatrove's GopherQualityFilter and GopherRepetitionFilter on the same pages."""

from __future__ import annotations

import importlib.metadata  # noqa: F401  datatrove 0.10's dependency check reads importlib.metadata unimported

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlib.curate import words as runlib_words
from runlib.curate.extract import extract_text
from runlib.curate.punctuation import PUNCTUATION_SET
from runlib.curate.rules import gopher_quality_reason, gopher_repetition_reason
from runlib.curate.sample_web import MODULES, module_page
from runlib.curate.words import sentence_count, words
from tests.curate import PROSE

datatrove_text = pytest.importorskip("datatrove.utils.text")
datatrove_filters = pytest.importorskip("datatrove.pipeline.filters")
Document = pytest.importorskip("datatrove.data").Document

PLANTED = (
    "",
    " ",
    " lead",
    "  two spaces lead",
    "a  b\n\nc \n d\t e",
    "tail  ",
    "x.  . y",
    "cannot dont it's Don't y'all o'clock",
    "E.g. the U.S. isn't (ok). Mr. Smith, Jan. 3rd, 10a.m. -- 5km",
    "Visit https://example.org/a_b?x=1, or mail a.b@example.com!",
    "the __init__(self, *args) -> None: ... {'k': [1, 2]}",
    "\u201cquoted\u201d \u2018single\u2019 \u00abguillemets\u00bb \u2014 dash \u2026 ellipsis \u00bd \u00b2",
    "Zürich, São Paulo, Ελλάδα. 東京は大きい。 مرحبا؟",
)
# letters, digits, the marks spaCy's rules split on, quotes, whitespace: the pieces its prefixes, suffixes,
# infixes, special cases and URL pattern act on
ALPHABET = st.sampled_from(
    list("aAbBeEgGsStTnN019 .,;:!?'\"()[]{}-_/\\@#$%&*+=<>~`^|\u2019\u201c\u2026\u00e9\n\t")
    + ["n't", "'s", "http://", "www.", ".com"]
)


@pytest.fixture(scope="module")
def pages() -> list[str]:
    return [extract_text(module_page(name), "resiliparse") for name in MODULES] + [PROSE, *PLANTED]


def test_punctuation_is_datatrove_s():
    assert PUNCTUATION_SET == datatrove_text.PUNCTUATION_SET


def test_words_and_sentences_are_datatrove_s(pages):
    for text in pages:
        assert words(text) == datatrove_text.split_into_words(text), text[:80]
        for line in text.splitlines():
            assert sentence_count(line) == len(datatrove_text.split_into_sentences(line)), line


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=60).map("".join))
def test_generated_text_splits_as_spacy_splits_it(text):
    assert words(text) == datatrove_text.split_into_words(text)
    assert sentence_count(text) == len(datatrove_text.split_into_sentences(text))


def test_a_full_piece_cache_changes_nothing(pages, monkeypatch):
    expected = [words(text) for text in pages]
    monkeypatch.setattr(runlib_words, "_PIECE_CACHE_LIMIT", 3)
    runlib_words._pieces.clear()
    assert [words(text) for text in pages] == expected
    assert len(runlib_words._pieces) <= 3 + max(len(text.split()) for text in pages)


def test_a_symbol_of_spacy_is_a_word_every_time():
    # spaCy 3.8 under memory zones fails on "IS_ALPHA," seen again (datatrove then drops "IS_ALPHA" and
    # retries); runlib uses no memory zones, so the word stays, on every call
    assert [words("the IS_ALPHA, and ORTH. x") for _ in range(3)] == [
        ["the", "IS_ALPHA", ",", "and", "ORTH", ".", "x"]
    ] * 3


def _datatrove_reason(step, text: str) -> str | None:
    verdict = step.filter(Document(text=text, id="page"))
    return None if verdict is True else verdict[1]


GOPHER_NAMES = {  # datatrove's reason -> runlib's
    "gopher_short_doc": "too_few_words",
    "gopher_long_doc": "too_many_words",
    "gopher_below_avg_threshold": "mean_word_length",
    "gopher_above_avg_threshold": "mean_word_length",
    "gopher_too_many_hashes": "hash_ratio",
    "gopher_too_many_ellipsis": "ellipsis_ratio",
    "gopher_too_many_bullets": "bullet_lines",
    "gopher_too_many_end_ellipsis": "ellipsis_lines",
    "gopher_below_alpha_threshold": "alpha_words",
    "gopher_enough_stop_words": "stop_words",
    "dup_para_frac": "dup_paragraphs",
    "dup_para_char_frac": "dup_paragraph_chars",
    "dup_line_frac": "dup_lines",
    "dup_line_char_frac": "dup_line_chars",
    **{f"top_{n}_gram": f"top_{n}gram" for n in (2, 3, 4)},
    **{f"duplicated_{n}_n_grams": f"dup_{n}gram" for n in range(5, 11)},
}


def test_gopher_verdicts_are_datatrove_s(pages):
    quality, repetition = datatrove_filters.GopherQualityFilter(), datatrove_filters.GopherRepetitionFilter()
    names = " ".join(["the __init__ and __repr__ of"] * 12)  # '_' is a token of its own: too few with a letter
    marked = " ".join(f'("{w}"),' for w in (PROSE.split() * 2)[:60]) + " the and of"  # 60 words, 300 tokens
    ruled = PROSE + "\n" + "-" * 200 + "\n" + PROSE  # a rule of dashes is one token
    for text in [*pages, names, marked, ruled, PROSE + " " + PROSE]:
        if not text.strip():
            continue
        theirs = _datatrove_reason(quality, text)
        assert gopher_quality_reason(text) == GOPHER_NAMES.get(theirs, theirs), text[:80]
        theirs = _datatrove_reason(repetition, text)
        assert gopher_repetition_reason(text) == GOPHER_NAMES.get(theirs, theirs), text[:80]
    assert gopher_quality_reason(names) == gopher_quality_reason(marked) == "alpha_words"
    assert gopher_quality_reason(ruled) is None
