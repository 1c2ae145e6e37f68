"""What the quality models' keys hold besides the spec, without importing the libraries themselves (the
plan and the graph read these; fastText loads only in the stages)."""

from __future__ import annotations

from importlib.metadata import version

CLASSIFIER_HELDOUT_FRACTION = 0.1
"""Share of each class held out for the classifier's precision and recall."""

CLASSIFIER_WORD_NGRAMS = 2
"""Unigrams and bigrams: DCLM's OH-2.5 + ELI5 classifier (mlfoundations/dclm baselines/README.md)."""


def fasttext_version() -> str:
    """'fasttext-wheel 0.9.2': the library whose training a classifier artifact holds."""
    return f"fasttext-wheel {version('fasttext-wheel')}"
