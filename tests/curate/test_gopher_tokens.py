"""Gopher's quality rules count as datatrove 0.10 (FineWeb's code) counts: punctuation marks are tokens, so a
page of names in brackets and quotes has too few tokens with a letter, while plain prose passes."""

from __future__ import annotations

from runlib.curate.rules import gopher_quality_reason
from tests.curate import PROSE


def test_punctuation_counts_against_the_share_of_tokens_with_a_letter():
    # 60 words, each in quotes and brackets: 60 of 60 words have a letter, but 60 of 300 tokens do
    marked = " ".join(f'("{w}"),' for w in (PROSE.split() * 2)[:60]) + " the and of"
    assert gopher_quality_reason(marked) == "alpha_words"
    assert gopher_quality_reason(PROSE + " " + PROSE) is None


def test_underscores_split_and_mark_runs_are_one_token():
    # __init__ is five tokens (spaCy splits each '_'), a rule of dashes is one
    names = " ".join(["the __init__ and __repr__ of"] * 12)
    assert gopher_quality_reason(names) == "alpha_words"
    ruled = PROSE + "\n" + "-" * 200 + "\n" + PROSE
    assert gopher_quality_reason(ruled) is None
