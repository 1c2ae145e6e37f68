"""curate.pii: ner: the entities a spaCy pipeline finds (names, places, organisations) masked, after the
rule-based kinds (runlib.curate.rules.mask_pii). runlib ships no model: the spec names a pipeline folder
(curate.ner.model), keyed by its files' content; its files are checked against their digests before spaCy
reads them, and a folder spaCy cannot load is an error naming the field, never a traceback."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from runlib.curate.config import InputFile
from runlib.curate.inputs import check_unchanged
from runlib.curate.words import SPACY_VERSION
from runlib.errors import UserError

ENTITY_FACTORIES = frozenset({"ner", "beam_ner", "entity_ruler"})  # the spaCy components that set doc.ents
MAX_NER_CHARS = 1_000_000  # spaCy's default nlp.max_length: longer texts go through in pieces of this size


def placeholder(label: str) -> str:
    """What an entity of `label` becomes: a bracketed label, which spaCy's English models do not tag."""
    return f"[{label}]"


def load_ner(model: str, files: list[InputFile], field: str) -> Any:
    """The spaCy pipeline in folder `model`, after its files are checked against the digests they were keyed
    by; UserError naming `field` when spaCy cannot load it or it has no entity component."""
    check_unchanged(model, files, field)
    import spacy  # here, not at module import: the stage module is imported by every curation job

    try:
        nlp = spacy.load(Path(model))
    except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:  # spaCy's errors for a bad folder
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"{field}: spaCy {SPACY_VERSION} cannot load {model!r} ({first[:300]}); give a pipeline "
            "folder that spaCy's nlp.to_disk wrote with this spaCy release"
        ) from None
    if not any(nlp.get_pipe_meta(name).factory in ENTITY_FACTORIES for name in nlp.pipe_names):
        raise UserError(
            f"{field}: the pipeline in {model!r} has no entity component (its components: "
            f"{', '.join(nlp.pipe_names) or 'none'}); give one with ner or entity_ruler"
        )
    return nlp


def mask_entities(nlp: Any, text: str, labels: frozenset[str]) -> tuple[str, Counter[str]]:
    """`text` with each entity of `labels` replaced by its placeholder, and the count per label."""
    counts: Counter[str] = Counter()
    pieces: list[str] = []
    for start in range(0, len(text), MAX_NER_CHARS):
        chunk = text[start : start + MAX_NER_CHARS]
        doc = nlp(chunk)
        position = 0
        for entity in doc.ents:
            if entity.label_ not in labels:
                continue
            pieces.append(chunk[position : entity.start_char])
            pieces.append(placeholder(entity.label_))
            counts[entity.label_] += 1
            position = entity.end_char
        pieces.append(chunk[position:])
    return "".join(pieces), counts
