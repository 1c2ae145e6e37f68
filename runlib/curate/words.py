"""Words and sentences as datatrove 0.10 counts them for English: the tokens of spaCy's blank English pipeline,
stripped, the empty ones dropped (huggingface/datatrove src/datatrove/utils/word_tokenizers.py at 7024aec,
SpaCyTokenizer.word_tokenize and strip_strings), and the sentences of its rule-based sentencizer. Gopher's rules
(runlib.curate.rules), C4's sentence count and FineWeb's list ratio (runlib.curate.filters) read them, so a
document is kept or dropped as FineWeb's own code would keep or drop it.

Why this is the same and still fast: spaCy splits the text at whitespace and tokenizes each piece between
whitespace alone (explosion/spaCy spacy/tokenizer.pyx at v3.8.7, Tokenizer._tokenize_affixes), so a piece's
tokens are a function of the piece. A piece of letters only (or ASCII digits only) holds no prefix, suffix,
infix or URL, so its tokens are its special case (spaCy's own table, read from the installed spaCy: "cannot"
-> "can", "not") or the piece itself; every other distinct piece goes through spaCy's tokenizer once and is
remembered (web text repeats its pieces: "the.", "(see"). One difference remains: spaCy then matches its
special cases over the whole document's tokens (_apply_special_cases), where a candidate across whitespace,
never applied, can block one inside a piece (in "o): o):", ": o" of the emoticon ":o" keeps each "):" from
becoming one token); here each piece is matched alone. tests/curate/test_words.py holds the words, the
sentences and Gopher's verdicts against datatrove's on pages, planted strings and generated text.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from importlib.metadata import version

# the spaCy release in the key of every shard curated with these counts (runlib.curate.rules.GOPHER_RULES)
SPACY_VERSION = version("spacy")
_WHITESPACE_RUN = re.compile(r"\s+")
# distinct pieces remembered per process; when full, the memory and spaCy's pipeline start afresh
_PIECE_CACHE_LIMIT = 200_000
# between the pieces of one call: a whitespace token, which no special case's tokens hold, so no special case
# matches across two pieces that were not neighbours in the text
_SEPARATOR = " \n "


class _Spacy:
    """spaCy's blank English pipeline, its special cases as token texts, its sentencizer's punctuation.

    spaCy's vocabulary keeps every string it has seen; datatrove bounds it with spaCy's memory zones, under
    which spaCy 3.8 fails an assertion on some strings it holds as symbols ("IS_ALPHA", which datatrove then
    strips from the text and retries). Here no memory zone: the pipeline is made anew whenever the piece memory
    is full, which bounds the vocabulary the same way and never fails. spaCy is imported on first use, not at
    module import: `runlib plan` computes the curation keys (they name SPACY_VERSION) and must start quickly.
    """

    def __init__(self) -> None:
        import spacy
        from spacy.attrs import ORTH
        from spacy.pipeline import Sentencizer

        self._blank = spacy.blank
        self.nlp = spacy.blank("en")
        special_cases: dict[str, list[dict[int, str]]] = self.nlp.tokenizer.rules  # type: ignore[union-attr]
        self.rules = {text: [t[ORTH] for t in tokens] for text, tokens in special_cases.items()}
        self.punct_chars = frozenset(Sentencizer.default_punct_chars)

    def renew(self) -> None:
        self.nlp = self._blank("en")


@cache
def _spacy() -> _Spacy:
    return _Spacy()


_pieces: dict[str, list[str]] = {}


def _tokenize_pieces(pieces: list[str]) -> dict[str, list[str]]:
    """spaCy's tokens of each piece: all of them in one call, mapped back by offset, and remembered."""
    spacy = _spacy()
    if len(_pieces) + len(pieces) > _PIECE_CACHE_LIMIT:
        _pieces.clear()
        spacy.renew()
    text = _SEPARATOR.join(pieces)
    starts, offset = [], 0
    for piece in pieces:
        starts.append(offset)
        offset += len(piece) + len(_SEPARATOR)
    found: dict[str, list[str]] = {piece: [] for piece in pieces}
    index = 0
    for token in spacy.nlp.tokenizer(text):
        while index + 1 < len(pieces) and token.idx >= starts[index + 1]:
            index += 1
        if not token.is_space:
            found[pieces[index]].append(token.text)
    _pieces.update(found)
    return found


def _known_tokens(piece: str, rules: dict[str, list[str]]) -> list[str] | None:
    """The tokens of a piece known without calling spaCy, or None."""
    if piece.isalpha() or (piece.isascii() and piece.isdigit()):
        return rules.get(piece) or [piece]
    return _pieces.get(piece)


def tokens(text: str) -> list[str]:
    """spaCy's tokens of `text`, whitespace tokens included: spaCy attaches the one ' ' after a token to it, and
    the rest of a whitespace run (all of it at the start of the text) is a token of its own."""
    rules = _spacy().rules
    parts: list[str | None] = []  # a piece, or None where a whitespace token stands
    space_tokens: list[str] = []
    position = 0
    for match in _WHITESPACE_RUN.finditer(text):
        if match.start() > position:
            parts.append(text[position : match.start()])
        run = match.group()
        rest = run[1:] if run[0] == " " and match.start() > 0 else run
        if rest:
            parts.append(None)
            space_tokens.append(rest)
        position = match.end()
    if position < len(text):
        parts.append(text[position:])
    known: dict[str, list[str] | None] = {p: _known_tokens(p, rules) for p in parts if p is not None}
    new = [piece for piece, found in known.items() if found is None]
    if new:
        known.update(_tokenize_pieces(new))
    out: list[str] = []
    spaces = iter(space_tokens)
    for part in parts:
        if part is None:
            out.append(next(spaces))
        else:
            out.extend(known[part] or ())
    return out


def words(text: str) -> list[str]:
    """datatrove's split_into_words for English: spaCy's tokens, stripped, the empty ones dropped."""
    return [s for t in tokens(text) if (s := t.strip())]


def _is_punct(text: str) -> bool:
    """spaCy's Token.is_punct (spacy/lang/lex_attrs.py is_punct): every character in a Unicode P category."""
    return all(unicodedata.category(c).startswith("P") for c in text)


def sentence_count(text: str) -> int:
    """len(datatrove's split_into_sentences(text)) for English: the sentences of spaCy's sentencizer
    (spacy/pipeline/sentencizer.pyx Sentencizer.predict: a sentence ends at a token of its punctuation list and
    the next starts at the first token after it that is neither punctuation nor in that list), whitespace
    tokens included and nothing stripped, as datatrove slices them; one for a text with no tokens."""
    punct_chars = _spacy().punct_chars
    sentences = 1
    seen_period = False
    for token in tokens(text):
        in_punct_chars = token in punct_chars
        if seen_period and not in_punct_chars and not _is_punct(token):
            sentences += 1
            seen_period = False
        elif in_punct_chars:
            seen_period = True
    return sentences
