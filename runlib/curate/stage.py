"""The curation stages: `curate_shard` (one shard of one source) and `curate_source` (all its shards).

curate_shard reads the shard's raw documents and runs, in order:
    normalize          transform  NUL removed, CRLF/CR -> LF, lone surrogates replaced, Unicode NFC/NFKC (curate.normalize);
                                  its reasons count the text repaired: invalid_utf8 (documents of a text
                                  source that were not valid UTF-8) with invalid_utf8_sequences (sequences
                                  replaced by U+FFFD), lone_surrogates (documents with JSON "\\udXXX"
                                  escapes of lone surrogates) with lone_surrogate_chars (replaced by U+FFFD)
    length             filter     empty/whitespace-only, < curate.min_chars or > curate.max_chars characters
    language           filter     curate.languages: top py3langid language listed, probability >= 0.65
    gopher_quality     filter     curate.quality: [gopher] (Gopher's quality rules, published thresholds)
    gopher_repetition  filter     curate.quality: [gopher] (Gopher's repetition rules, published thresholds)
    c4_quality         filter     curate.quality: [c4] (documents C4's rules drop)
    c4_lines           transform  curate.quality: [c4] (lines C4's rules remove from the documents kept)
    fineweb_quality    filter     curate.quality: [fineweb] (FineWeb's three rules + list ratio, datatrove defaults)
    pii_mask | pii_drop transform | filter   curate.pii: mask | drop (e-mail, public IPv4/IPv6 addresses, phone
                                  and payment card numbers); pii_mask's reasons count each kind masked (email,
                                  ipv4, ipv6, phone, card) and docs_changed, pii_drop's are pii_<kind>, the
                                  first kind a dropped document holds
    pii_ner            transform  curate.pii: ner: pii_mask's masking, then the entities of curate.ner.labels
                                  that curate.ner.model finds, each replaced by [LABEL] (runlib.curate.ner);
                                  reasons as pii_mask's plus ner_<LABEL> per label
    exact_dedup        filter     curate.dedup.exact: SHA-256 of the final text, first occurrence kept
    substring_dedup    transform  curate.dedup.substring: runs of >= min_tokens tokens repeated earlier in the
                                  shard cut out (runlib.curate.substring; reasons spans, chars_removed, docs_changed)
    substring_empty    filter     the documents substring_dedup left without text (reason emptied) or under
                                  curate.min_chars characters (reason too_short)
and writes docs.jsonl ({"id", "text", "sha256"} per line, input order), stats.json (what it returns),
hashes.npy and, with curate.dedup.minhash, bands.npy (the tables dedup_partition slices: runlib.curate.partition).

Both receive their config (runlib.curate.config, built by runlib.graph.configs) and their input
directories, never the run spec; the source's name only labels error messages.

Characters are Unicode code points. Rules and thresholds: runlib/curate/filters.py (language, C4, FineWeb),
runlib/curate/minhash.py (MinHash) and runlib/curate/rules.py (Gopher, PII).
The join of the shards is runlib.curate.source.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runlib.curate.builtin import builtin_documents
from runlib.curate.config import CurateShardConfig
from runlib.curate.counts import validate_counts
from runlib.curate.dropped import DroppedSample
from runlib.curate.files import (
    DOCS_FILE,
    OFFSETS_FILE,
    STATS_FILE,
    save_npy,
    write_dropped,
    write_json,
    write_jsonl_indexed,
)
from runlib.curate.filters import (
    LANGUAGE_MIN_PROBABILITY,
    c4_filter,
    fineweb_quality_reason,
    known_languages,
    language_reason,
)
from runlib.curate.inputs import check_still, check_unchanged
from runlib.curate.minhash import signatures
from runlib.curate.ner import load_ner, mask_entities
from runlib.curate.partition import write_shard_tables
from runlib.curate.readers import read_documents, shard_limit
from runlib.curate.rules import PII_KINDS, find_pii, gopher_quality_reason, gopher_repetition_reason, mask_pii
from runlib.curate.substring import remove_repeated_substrings
from runlib.curate.web import read_web_shard
from runlib.errors import UserError
from runlib.spec.models import CurateSpec

Doc = tuple[str, str]  # (doc_id, text)
NormalForm = Literal["NFC", "NFKC", "none"]  # curate.normalize


# ---------------------------------------------------------------------------------------------- helpers


def check_supported(source_name: str, curate: CurateSpec) -> None:
    """UserError naming every curate option of this source that this version cannot honour."""
    base = f"data.sources.{source_name}.curate"
    if curate.pii == "ner" and curate.ner is None:  # the gate refuses it first (RUN013); a stage never pretends
        raise UserError(f"{base}.pii: ner needs a named-entity model: give curate.ner.model, or use mask or drop")
    if curate.languages:
        known = set(known_languages())
        unknown = [lang for lang in curate.languages if lang not in known]
        if unknown:
            raise UserError(
                f"{base}.languages: {', '.join(map(repr, unknown))} not known to the language identifier "
                f"(py3langid, ISO 639-1 codes: {', '.join(sorted(known))})"
            )


def _chars(docs: Iterable[Doc]) -> int:
    return sum(len(text) for _, text in docs)


def _row(
    step: str, kind: str, before: list[Doc], after: list[Doc], chars_in: int | None = None, **extra: Any
) -> dict[str, Any]:
    row = {
        "step": step,
        "kind": kind,
        "docs_in": len(before),
        "docs_out": len(after),
        "chars_in": _chars(before) if chars_in is None else chars_in,
        "chars_out": _chars(after),
    }
    return row | extra


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------ normalize


_SURROGATE_RE = re.compile("[\ud800-\udfff]")
REPAIR_REASONS = ("invalid_utf8", "invalid_utf8_sequences", "lone_surrogates", "lone_surrogate_chars")


def repair_surrogates(text: str) -> tuple[str, int]:
    """(text with each lone surrogate replaced by U+FFFD, how many): a JSON "\\ud800" escape decodes to
    one, which is no Unicode scalar value and cannot be written as UTF-8 (json.loads already joins a
    valid high-low pair into one character)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.subn("\ufffd", text)
    return text, 0


def normalize_text(text: str, form: NormalForm) -> str:
    """NUL removed, CRLF and lone CR turned into LF, lone surrogates replaced by U+FFFD, then NFC/NFKC (form)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text, _ = repair_surrogates(text)
    if form != "none" and not unicodedata.is_normalized(form, text):
        text = unicodedata.normalize(form, text)
    return text


def _filter_step(
    step: str, docs: list[Doc], reason_of: Callable[[str], str | None], dropped: DroppedSample
) -> tuple[list[Doc], dict[str, Any]]:
    kept: list[Doc] = []
    reasons: Counter[str] = Counter()
    for doc in docs:
        reason = reason_of(doc[1])
        if reason is None:
            kept.append(doc)
        else:
            reasons[reason] += 1
            dropped.add(step, reason, *doc)
    return kept, _row(step, "filter", docs, kept, reasons=dict(sorted(reasons.items())))


# ------------------------------------------------------------------------- PII and C4 steps (curate.pii, c4)


def _pii_step(
    mode: str, docs: list[Doc], dropped: DroppedSample, ner: Entities | None = None
) -> tuple[list[Doc], dict[str, Any]]:
    """pii_drop's reason is the first kind (PII_KINDS' order) a document holds, "pii_phone"; pii_mask's
    reasons count each kind masked, and docs_changed; pii_ner's (mode ner, with `ner`) also count each
    entity label masked, ner_PERSON."""
    if mode == "drop":

        def reason(text: str) -> str | None:
            found = find_pii(text)
            return next((f"pii_{kind}" for kind in PII_KINDS if found[kind]), None)

        return _filter_step("pii_drop", docs, reason, dropped)
    out: list[Doc] = []
    totals: Counter[str] = Counter(dict.fromkeys(PII_KINDS, 0))
    changed = 0
    if ner is not None:
        totals.update(dict.fromkeys((f"ner_{label}" for label in sorted(ner.labels)), 0))
    for doc_id, text in docs:
        masked, counts = mask_pii(text)
        if ner is not None:
            masked, entities = mask_entities(ner.nlp, masked, ner.labels)
            counts.update({f"ner_{label}": n for label, n in entities.items()})
        totals.update(counts)
        changed += any(counts.values())
        out.append((doc_id, masked))
    step = "pii_ner" if ner is not None else "pii_mask"
    return out, _row(step, "transform", docs, out, reasons=dict(totals) | {"docs_changed": changed})


def _c4_steps(docs: list[Doc], dropped: DroppedSample) -> tuple[list[Doc], list[dict[str, Any]]]:
    """C4's rules as two rows: c4_quality (filter: documents C4 drops) then c4_lines (transform: the lines
    C4 removes from the documents it keeps), so that a filter row never edits a text."""
    kept_before: list[Doc] = []
    edited: list[Doc] = []
    reasons: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for doc_id, text in docs:
        reason, new_text, removed_lines = c4_filter(text)
        if reason is not None:
            reasons[reason] += 1
            dropped.add("c4_quality", reason, doc_id, text)
            continue
        kept_before.append((doc_id, text))
        edited.append((doc_id, new_text))
        lines.update(removed_lines)
    changed = sum(a[1] != b[1] for a, b in zip(kept_before, edited, strict=True))
    return edited, [
        _row("c4_quality", "filter", docs, kept_before, reasons=dict(sorted(reasons.items()))),
        _row(
            "c4_lines",
            "transform",
            kept_before,
            edited,
            reasons=dict(sorted(lines.items())) | {"docs_changed": changed},
        ),
    ]


def _substring_steps(
    min_tokens: int, min_chars: int, docs: list[Doc], hashes: list[str], dropped: DroppedSample
) -> tuple[list[Doc], list[str], list[dict[str, Any]]]:
    """substring_dedup (transform: the repeated spans cut; reasons spans, chars_removed, docs_changed), then
    substring_empty (filter: the documents nothing is left of, reason emptied, or fewer than curate.min_chars
    characters, reason too_short); with the kept documents, the hashes they had before the cuts."""
    texts, counts = remove_repeated_substrings([text for _, text in docs], min_tokens)
    edited = [(doc_id, text) for (doc_id, _), text in zip(docs, texts, strict=True)]
    transform = _row("substring_dedup", "transform", docs, edited, reasons=counts, min_tokens=min_tokens)

    def reason(text: str) -> str | None:
        return "emptied" if not text.strip() else "too_short" if len(text) < min_chars else None

    kept, row = _filter_step("substring_empty", edited, reason, dropped)
    before = [h for (_, text), h in zip(edited, hashes, strict=True) if reason(text) is None]
    return kept, before, [transform, row]


# ---------------------------------------------------------------------------------------- the stages


def describe_input(config: CurateShardConfig) -> str:
    """'builtin python_docs', 'jsonl data/*.jsonl': where a shard's documents come from, for messages."""
    if config.input.format == "builtin":
        return f"builtin {config.input.name}"
    return f"{config.input.format} {config.input.path}"


@dataclass
class ShardInput:
    docs: list[Doc]
    provenance: Any
    rows: list[dict[str, Any]] = field(default_factory=list)  # steps before normalize (a warc source's)
    meta: dict[str, dict[str, str]] = field(default_factory=dict)  # doc id -> its docs.jsonl fields beside text


def _read_shard(
    source_name: str, config: CurateShardConfig, repairs: Counter[str], dropped: DroppedSample
) -> ShardInput:
    shard, shards, files = config.shard, config.shards, config.files
    if config.input.format == "builtin":
        docs, provenance = builtin_documents(config.input.name, config.input.max_docs, source_name, config.python)
        return ShardInput(docs[shard::shards], provenance)
    # the files must be what the key was computed from: same size and digest before, no change while read
    field = f"data.sources.{source_name}.input.path"
    before = check_unchanged(config.input.path or "", files, field)
    paths = [f.path for f in files]
    rows: list[dict[str, Any]] = []
    meta: dict[str, dict[str, str]] = {}
    if config.input.format == "warc":
        docs, meta, rows = read_web_shard(
            source_name, config, paths, shard_limit(config.input.max_docs, shards), dropped
        )
    else:
        # read_documents reads the `input` of what it is given: the config has one, like a SourceSpec
        docs = list(read_documents(source_name, config, paths, shards=shards, repairs=repairs))  # type: ignore[arg-type]
    for file, st in zip(files, before, strict=True):
        check_still(file, st, field)
    provenance = {"files": [file.model_dump() for file in files]}
    return ShardInput(docs, provenance, rows, meta)


def _normalize(docs: Sequence[Doc], form: NormalForm, repairs: Counter[str]) -> list[Doc]:
    out = []
    for doc_id, text in docs:
        text, replaced = repair_surrogates(text)
        if replaced:
            repairs["lone_surrogates"] += 1
            repairs["lone_surrogate_chars"] += replaced
        out.append((doc_id, normalize_text(text, form)))
    return out


@dataclass(frozen=True)
class Entities:
    """The loaded model of curate.ner and the labels it masks."""

    nlp: Any
    labels: frozenset[str]


def _entities(config: CurateShardConfig, source_name: str) -> Entities | None:
    """The model of curate.ner, loaded (its files checked first), under pii: ner; None otherwise."""
    ner = config.curate.ner
    if config.curate.pii != "ner" or ner is None:
        return None
    model = load_ner(ner.model, config.ner_model, f"data.sources.{source_name}.curate.ner.model")
    return Entities(model, frozenset(ner.labels))


def _filter_steps(
    curate: CurateSpec, docs: list[Doc], dropped: DroppedSample, ner: Entities | None = None
) -> tuple[list[Doc], list[dict[str, Any]]]:
    """The steps between normalize and exact_dedup (length, language, the quality rule sets, PII): the
    documents they keep and a row per step."""
    rows: list[dict[str, Any]] = []
    min_chars, max_chars = curate.min_chars, curate.max_chars

    def length_reason(text: str) -> str | None:
        n = len(text)
        if n < min_chars:
            return "too_short"
        if max_chars is not None and n > max_chars:
            return "too_long"
        if not text.strip():
            return "empty"
        return None

    docs, row = _filter_step("length", docs, length_reason, dropped)
    rows.append(row | {"min_chars": min_chars, "max_chars": max_chars})

    if curate.languages:
        languages = frozenset(curate.languages)
        docs, row = _filter_step("language", docs, lambda text: language_reason(text, languages), dropped)
        rows.append(row | {"languages": sorted(languages), "min_probability": LANGUAGE_MIN_PROBABILITY})

    # the rule sets run in FineWeb's order (gopher, c4, fineweb: huggingface/datatrove examples/fineweb.py at
    # 5c254fa) whatever the list's order
    if "gopher" in curate.quality:
        docs, row = _filter_step("gopher_quality", docs, gopher_quality_reason, dropped)
        rows.append(row)
        docs, row = _filter_step("gopher_repetition", docs, gopher_repetition_reason, dropped)
        rows.append(row)

    if "c4" in curate.quality:
        docs, c4_steps = _c4_steps(docs, dropped)
        rows.extend(c4_steps)

    if "fineweb" in curate.quality:
        docs, row = _filter_step("fineweb_quality", docs, fineweb_quality_reason, dropped)
        rows.append(row)

    if curate.pii != "keep":
        docs, row = _pii_step(curate.pii, docs, dropped, ner)
        rows.append(row)
    return docs, rows


def curate_shard(config: CurateShardConfig, out_dir: Path, source_name: str = "source") -> dict[str, Any]:
    """Curate shard `config.shard` of `config.shards` of one source into out_dir/docs.jsonl (+ stats.json).

    A builtin source's shard takes documents shard::shards of the builtin list; a file source's shard
    reads `config.files` (input.max_docs applies per shard as ceil(max_docs / shards)). Returns
    {"counts", "steps", "provenance", ...}, also written to out_dir/stats.json for curate_source.
    `source_name` only labels error messages.
    """
    shard, shards = config.shard, config.shards
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    curate = config.curate
    check_supported(source_name, curate)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    repairs: Counter[str] = Counter()
    dropped = DroppedSample(curate.keep_dropped)
    shard_input = _read_shard(source_name, config, repairs, dropped)
    raw, provenance, meta = shard_input.docs, shard_input.provenance, shard_input.meta
    dropped.meta = meta
    steps: list[dict[str, Any]] = list(shard_input.rows)

    docs = _normalize(raw, curate.normalize, repairs)
    reasons = {reason: repairs[reason] for reason in REPAIR_REASONS}
    steps.append(_row("normalize", "transform", raw, docs, form=curate.normalize, reasons=reasons))
    del raw

    docs, rows = _filter_steps(curate, docs, dropped, _entities(config, source_name))
    steps.extend(rows)

    hashes = [_sha256(text) for _, text in docs]
    if curate.dedup.exact:
        seen: set[str] = set()
        kept_docs, kept_hashes = [], []
        for doc, h in zip(docs, hashes, strict=True):
            if h not in seen:
                seen.add(h)
                kept_docs.append(doc)
                kept_hashes.append(h)
            else:
                dropped.add("exact_dedup", "duplicate", *doc)
        steps.append(_row("exact_dedup", "filter", docs, kept_docs))
        docs, hashes = kept_docs, kept_hashes
    exact_hashes = hashes  # what the source-wide exact dedup compares: the texts before substring dedup's cuts,
    if curate.dedup.substring is not None:  # which differ between the shards that hold two copies of a page
        docs, exact_hashes, rows = _substring_steps(
            curate.dedup.substring.min_tokens, curate.min_chars, docs, hashes, dropped
        )
        steps.extend(rows)
        hashes = [_sha256(text) for _, text in docs]

    validate_counts(steps)
    minhash = curate.dedup.minhash  # signatures only: dedup_partition and curate_source compare the shards
    sigs = signatures([t for _, t in docs], minhash.ngram, minhash.bands * minhash.rows) if minhash else None
    write_shard_tables(out_dir, exact_hashes, [len(t) for _, t in docs], sigs, minhash)
    offsets = write_jsonl_indexed(
        out_dir / DOCS_FILE,
        (_doc_row(doc_id, text, h, meta) for (doc_id, text), h in zip(docs, hashes, strict=True)),
    )
    save_npy(out_dir / OFFSETS_FILE, offsets)
    write_dropped(out_dir, dropped)
    result = {
        "counts": {
            "docs_read": steps[0]["docs_in"],
            "chars_read": steps[0]["chars_in"],
            "docs": len(docs),
            "chars": _chars(docs),
            "docs_repaired": repairs["invalid_utf8"] + repairs["lone_surrogates"],
        },
        "steps": steps,
        "provenance": provenance,
        "input": describe_input(config),
        "shard": shard,
        "shards": shards,
    }
    write_json(out_dir / STATS_FILE, result)
    return result


def _doc_row(doc_id: str, text: str, sha256: str, meta: dict[str, dict[str, str]]) -> dict[str, Any]:
    """One docs.jsonl line: id, text, sha256, then what the reader keeps beside them (a web page's URL, crawl
    date and WARC record id; its id is the URL)."""
    extra = meta.get(doc_id)
    if extra is None:
        return {"id": doc_id, "text": text, "sha256": sha256}
    return {"id": extra["id"], "text": text, "sha256": sha256} | {k: v for k, v in extra.items() if k != "id"}
