"""C4 and FineWeb quality rules and language identification (curate.quality: [c4 | fineweb], curate.languages).

Thresholds are datatrove's defaults (huggingface/datatrove src/datatrove/pipeline/filters/c4_filters.py at f423321,
fineweb_quality_filter.py at 5c254fa, language_filter.py at a5ce855), with its words and sentences (spaCy's
English tokenizer and sentencizer: runlib.curate.words); every deviation is noted where it happens.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from runlib.curate.words import SPACY_VERSION, sentence_count
from runlib.curate.words import words as split_words

# -------------------------------------------------------------------------------------------------- C4
# datatrove C4QualityFilter defaults (pipeline/filters/c4_filters.py, after TFDS c4_utils.py; Raffel et al. 2020,
# arXiv 1910.10683 section 2.2). Lines are "\n"-split (split_paragraph=True) and stripped; per line, in order:
#   a word (whitespace token) longer than 1000 characters        -> drop the line
#   citation markers [1], [edit], [citation needed]              -> removed from the line
#   no terminal punctuation (. ? ! " '), or ending with "..."    -> drop the line (datatrove default on;
#                                                                   FineWeb turned this one rule off)
#   fewer than 3 words                                           -> drop the line
#   "lorem ipsum" (any case)                                     -> drop the whole document
#   "javascript" (any case)                                      -> drop the line
#   "{"                                                          -> drop the whole document
#   a policy phrase (terms of use, privacy policy, ...)          -> drop the line
# then the document goes if its kept lines hold fewer than 5 sentences (each line's sentences as spaCy's
# sentencizer splits them, as datatrove 0.10 counts them); otherwise its text becomes the kept lines joined
# by "\n".

C4_RULES = f"sentences of spaCy {SPACY_VERSION} sentencizer, as datatrove 0.10"  # in the curate_shard key
C4_MAX_WORD_LENGTH = 1000
C4_MIN_WORDS_PER_LINE = 3
C4_MIN_SENTENCES = 5
C4_END_PUNCTUATION = (".", "?", "!", '"', "'")
C4_ELLIPSIS = "..."
C4_CITATION_RE = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
C4_POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)


def c4_filter(text: str) -> tuple[str | None, str, dict[str, int]]:
    """C4's rules on one document: (why the document goes or None, the kept text, dropped lines per rule)."""
    kept: list[str] = []
    dropped: dict[str, int] = {}
    sentences = 0
    for raw in text.splitlines():
        line = raw.strip()
        words = line.split()
        if any(len(word) > C4_MAX_WORD_LENGTH for word in words):
            dropped["too_long_word"] = dropped.get("too_long_word", 0) + 1
            continue
        line = C4_CITATION_RE.sub("", line)
        if not line.endswith(C4_END_PUNCTUATION) or line.endswith(C4_ELLIPSIS):
            dropped["no_terminal_punct"] = dropped.get("no_terminal_punct", 0) + 1
            continue
        if len(words) < C4_MIN_WORDS_PER_LINE:
            dropped["too_few_words"] = dropped.get("too_few_words", 0) + 1
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return "lorem_ipsum", text, dropped
        if "javascript" in lower:
            dropped["javascript"] = dropped.get("javascript", 0) + 1
            continue
        if "{" in line:
            return "curly_bracket", text, dropped
        if any(phrase in lower for phrase in C4_POLICY_SUBSTRINGS):
            dropped["policy"] = dropped.get("policy", 0) + 1
            continue
        sentences += sentence_count(line)
        kept.append(line)
    if sentences < C4_MIN_SENTENCES:
        return "too_few_sentences", text, dropped
    return None, "\n".join(kept).strip(), dropped


# --------------------------------------------------------------------------------------------- FineWeb
# datatrove FineWebQualityFilter defaults (pipeline/filters/fineweb_quality_filter.py; Penedo et al. 2024,
# arXiv 2406.17557). Lines are "\n"-split with empty (whitespace-only) lines dropped; the document goes if
#   lines ending in terminal punctuation / lines      < 0.12  (paper: <= 0.12)
#   lines of <= 30 characters / lines                 > 0.67  (paper: >= 0.67)
#   characters in repeated lines / characters w/o \n  > 0.01  (the code that built FineWeb; the paper says 0.1)
#   newlines / words ("list_ratio")                   > 0.3   (code only, not in the paper)
# Deviations: datatrove's TERMINAL_PUNCTUATION is a ~150-character Unicode table; here the common Latin,
# CJK, Arabic, Devanagari and Ethiopic sentence ends below. Words for list_ratio are datatrove's (spaCy's).

FINEWEB_RULES = f"words of spaCy {SPACY_VERSION} blank en, as datatrove 0.10"  # in the curate_shard key
FINEWEB_LINE_PUNCT_THR = 0.12
FINEWEB_SHORT_LINE_THR = 0.67
FINEWEB_SHORT_LINE_LENGTH = 30
FINEWEB_CHAR_DUPLICATES_RATIO = 0.01
FINEWEB_NEW_LINE_RATIO = 0.3
FINEWEB_STOP_CHARS = tuple(".!?\"'\u2026\u201d\u2019\u3002\uff01\uff1f\uff0e\u061f\u06d4\u0964\u0965\u1362")


def fineweb_quality_reason(text: str) -> str | None:
    """Why FineWeb's quality rules drop `text`, or None to keep it."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "empty"
    if sum(line.endswith(FINEWEB_STOP_CHARS) for line in lines) / len(lines) < FINEWEB_LINE_PUNCT_THR:
        return "line_punct_ratio"
    if sum(len(line) <= FINEWEB_SHORT_LINE_LENGTH for line in lines) / len(lines) > FINEWEB_SHORT_LINE_THR:
        return "short_line_ratio"
    seen: set[str] = set()
    dup_chars = 0
    for line in lines:
        if line in seen:
            dup_chars += len(line)
        else:
            seen.add(line)
    size = len(text) - text.count("\n")
    if size and dup_chars / size > FINEWEB_CHAR_DUPLICATES_RATIO:
        return "char_dup_ratio"
    words = len(split_words(text))
    if not words or text.count("\n") / words > FINEWEB_NEW_LINE_RATIO:
        return "list_ratio"
    return None


# ------------------------------------------------------------------------------------------- languages
# py3langid 0.4 (BSD-3; its model, data/model.npz.xz with 97 languages, ships inside the wheel: offline),
# probabilities normalised (norm_probs=True). Keep a document whose top language is configured with
# probability >= 0.65: FineWeb's threshold (datatrove's LanguageFilter language_threshold, language_filter.py at
# a5ce855), which was tuned for fastText lid.176.bin, not
# for py3langid, whose normalised probabilities are usually close to 1 on paragraphs. Newlines are replaced
# by spaces first, as datatrove does for fastText.

LANGUAGE_MIN_PROBABILITY = 0.65


@lru_cache(maxsize=1)
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages() -> list[str]:
    return list(_identifier().nb_classes)


def identify_language(text: str) -> tuple[str, float]:
    """(top ISO 639-1 code, its normalised probability)."""
    lang, prob = _identifier().classify(text.replace("\n", " "))
    return str(lang), float(prob)


def language_reason(text: str, languages: frozenset[str]) -> str | None:
    lang, prob = identify_language(text)
    if lang not in languages:
        return f"lang_{lang}"
    if prob < LANGUAGE_MIN_PROBABILITY:
        return "low_probability"
    return None
