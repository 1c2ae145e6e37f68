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
    pii_mask | pii_drop transform | filter   curate.pii: mask | drop (e-mail and public IPv4 addresses)
    exact_dedup        filter     curate.dedup.exact: SHA-256 of the final text, first occurrence kept
and writes docs.jsonl ({"id", "text", "sha256"} per line, input order), stats.json (what it returns) and,
with curate.dedup.minhash, minhash.npy (the documents' MinHash signatures, docs.jsonl's order).

curate_source concatenates the shards in order, removes exact duplicates across them (cross_shard_dedup),
then near-duplicates (minhash_dedup: LSH candidate pairs from the signatures, kept when their exact shingle
Jaccard is >= curate.dedup.minhash.threshold, union-find, the first document of each cluster kept), then
splits off the data.heldout_docs documents with the smallest SHA-256 (heldout_split) into heldout.jsonl;
the rest, in order, go to train.jsonl. Both files have docs.jsonl's line format.

Both receive their config (runlib.curate.config, built by runlib.workflow.configs) and their input
directories, never the run spec; the source's name only labels error messages.

Characters are Unicode code points. Rules and thresholds: runlib/curate/filters.py (language, C4, FineWeb),
runlib/curate/minhash.py (MinHash) and the Gopher section below.
"""

from __future__ import annotations

import hashlib
import heapq
import ipaddress
import json
import os
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runlib.curate.builtin import builtin_documents
from runlib.curate.config import CurateShardConfig, CurateSourceConfig
from runlib.curate.counts import validate_counts
from runlib.curate.filters import (
    LANGUAGE_MIN_PROBABILITY,
    c4_filter,
    fineweb_quality_reason,
    known_languages,
    language_reason,
)
from runlib.curate.inputs import check_still, check_unchanged
from runlib.curate.minhash import near_duplicates, signatures
from runlib.curate.readers import read_documents
from runlib.errors import UserError
from runlib.spec.models import CurateSpec

Doc = tuple[str, str]  # (doc_id, text)
DOCS_FILE = "docs.jsonl"
STATS_FILE = "stats.json"
TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"
MINHASH_FILE = "minhash.npy"  # (docs, bands * rows) uint64 MinHash signatures, docs.jsonl's order


# ---------------------------------------------------------------------------------------------- helpers


def check_supported(source_name: str, curate: CurateSpec) -> None:
    """UserError naming every curate option of this source that this version cannot honour."""
    base = f"data.sources.{source_name}.curate"
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


_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def jsonl_line(row: dict[str, Any]) -> str:
    """One JSON object on one line: UTF-8 text, with the characters str.splitlines() would break on escaped
    (json escapes the control characters itself; U+0085, U+2028 and U+2029 it leaves raw)."""
    line = json.dumps(row, ensure_ascii=False)
    for char, escaped in _LINE_BREAKS.items():
        if char in line:
            line = line.replace(char, escaped)
    return line + "\n"


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(jsonl_line(row))
    os.replace(tmp, path)


def _save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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


def normalize_text(text: str, form: str) -> str:
    """NUL removed, CRLF and lone CR turned into LF, lone surrogates replaced by U+FFFD, then NFC/NFKC (form)."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text, _ = repair_surrogates(text)
    if form != "none" and not unicodedata.is_normalized(form, text):
        text = unicodedata.normalize(form, text)
    return text


# ------------------------------------------------------------------------------------- Gopher rules
# Rae et al. 2021 (arXiv 2112.11446, Table A1) with the thresholds of datatrove's GopherQualityFilter and
# GopherRepetitionFilter (shared/research/curation.md 1.1.2). Without NLTK: a word is a whitespace-separated
# token stripped of surrounding punctuation (tokens of punctuation only are not words); line fractions are
# over non-empty lines.

_PUNCT = string.punctuation + "\u2018\u2019\u201c\u201d\u00ab\u00bb\u2026\u2013\u2014"
GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
GOPHER_TOP_NGRAMS = ((2, 0.20), (3, 0.18), (4, 0.16))
GOPHER_DUP_NGRAMS = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
_PARAGRAPH_SPLIT = re.compile(r"\n{2,}")
_LINE_SPLIT = re.compile(r"\n+")


def _words(text: str) -> list[str]:
    return [w for w in (token.strip(_PUNCT) for token in text.split()) if w]


def gopher_quality_reason(text: str) -> str | None:
    """Why Gopher's quality rules drop `text`, or None to keep it."""
    words = _words(text)
    n = len(words)
    if n < 50:
        return "too_few_words"  # < 50 words
    if n > 100_000:
        return "too_many_words"  # > 100 000 words
    mean = sum(map(len, words)) / n
    if not 3 <= mean <= 10:
        return "mean_word_length"  # outside 3..10 characters
    if text.count("#") / n > 0.1:
        return "hash_ratio"  # '#' per word > 0.1
    if (text.count("...") + text.count("\u2026")) / n > 0.1:
        return "ellipsis_ratio"  # ellipses per word > 0.1
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines:
        if sum(line.startswith(("\u2022", "-")) for line in lines) / len(lines) > 0.9:
            return "bullet_lines"  # > 90 % of lines start with a bullet
        if sum(line.endswith(("...", "\u2026")) for line in lines) / len(lines) > 0.3:
            return "ellipsis_lines"  # > 30 % of lines end with an ellipsis
    if sum(any(c.isalpha() for c in w) for w in words) / n < 0.8:
        return "alpha_words"  # < 80 % of words have a letter
    if len(GOPHER_STOP_WORDS.intersection(w.lower() for w in words)) < 2:
        return "stop_words"  # fewer than 2 of the 8 stop words
    return None


def _duplicate_fraction(parts: list[str]) -> tuple[float, int]:
    """(fraction of parts that repeat an earlier part, characters in those repeats)."""
    seen: set[str] = set()
    dup = dup_chars = 0
    for part in parts:
        if part in seen:
            dup += 1
            dup_chars += len(part)
        else:
            seen.add(part)
    return (dup / len(parts) if parts else 0.0), dup_chars


def gopher_repetition_reason(text: str) -> str | None:
    """Why Gopher's repetition rules drop `text`, or None to keep it."""
    size = len(text)
    if not size:
        return None
    stripped = text.strip()
    frac, chars = _duplicate_fraction(_PARAGRAPH_SPLIT.split(stripped))
    if frac > 0.3:
        return "dup_paragraphs"
    if chars / size > 0.2:
        return "dup_paragraph_chars"
    frac, chars = _duplicate_fraction(_LINE_SPLIT.split(stripped))
    if frac > 0.3:
        return "dup_lines"
    if chars / size > 0.2:
        return "dup_line_chars"
    words = text.split()
    lengths = [len(w) for w in words]
    for n, limit in GOPHER_TOP_NGRAMS:
        if len(words) < n:
            break
        gram, count = Counter(zip(*(words[k:] for k in range(n)), strict=False)).most_common(1)[0]
        if count > 1 and (sum(map(len, gram)) + n - 1) * count / size > limit:
            return f"top_{n}gram"
    for n, limit in GOPHER_DUP_NGRAMS:
        if len(words) < n:
            break
        grams = list(zip(*(words[k:] for k in range(n)), strict=False))
        seen: set[tuple[str, ...]] = set()
        dup_chars, i = 0, 0
        while i < len(grams):
            if grams[i] in seen:  # count a repeat once, then skip past it so overlaps are not double-counted
                dup_chars += sum(lengths[i : i + n]) + n - 1
                i += n
            else:
                seen.add(grams[i])
                i += 1
        if dup_chars / size > limit:
            return f"dup_{n}gram"
    return None


def _filter_step(step: str, docs: list[Doc], reason_of: Any) -> tuple[list[Doc], dict[str, Any]]:
    kept: list[Doc] = []
    reasons: Counter[str] = Counter()
    for doc in docs:
        reason = reason_of(doc[1])
        if reason is None:
            kept.append(doc)
        else:
            reasons[reason] += 1
    return kept, _row(step, "filter", docs, kept, reasons=dict(sorted(reasons.items())))


# ------------------------------------------------------------------------------------------------ PII
# As FineWeb did (datatrove PIIFormatter, curation.md 1.1.6): e-mail addresses and public IPv4 addresses
# are replaced by fixed placeholders, cycled per document; phone numbers are left alone.

EMAIL_RE = re.compile(
    r"\b[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,63}\b",
    re.IGNORECASE,
)
IPV4_RE = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\w|\.\d)"
)
EMAIL_PLACEHOLDERS = ("email@example.com", "firstname.lastname@example.org")
IP_PLACEHOLDERS = (
    "22.214.171.124",
    "126.96.36.199",
    "188.8.131.52",
    "184.108.40.206",
    "220.127.116.11",
    "18.104.22.168",
)


def _is_public_ip(text: str) -> bool:
    try:
        return ipaddress.IPv4Address(text).is_global
    except ValueError:
        return False


def find_pii(text: str) -> tuple[int, int]:
    """(e-mail addresses, public IPv4 addresses) in text."""
    emails = len(EMAIL_RE.findall(text)) if "@" in text else 0
    ips = sum(_is_public_ip(m) for m in IPV4_RE.findall(text)) if "." in text else 0
    return emails, ips


def mask_pii(text: str) -> tuple[str, int, int]:
    """text with e-mail and public IPv4 addresses replaced by placeholders; (text, e-mails, IPs)."""
    counts = [0, 0]

    def email(_: re.Match[str]) -> str:
        counts[0] += 1
        return EMAIL_PLACEHOLDERS[(counts[0] - 1) % len(EMAIL_PLACEHOLDERS)]

    def ip(m: re.Match[str]) -> str:
        if not _is_public_ip(m.group(0)):
            return m.group(0)
        counts[1] += 1
        return IP_PLACEHOLDERS[(counts[1] - 1) % len(IP_PLACEHOLDERS)]

    if "@" in text:
        text = EMAIL_RE.sub(email, text)
    if "." in text:
        text = IPV4_RE.sub(ip, text)
    return text, counts[0], counts[1]


def _pii_step(mode: str, docs: list[Doc]) -> tuple[list[Doc], dict[str, Any]]:
    if mode == "drop":
        kept, row = _filter_step("pii_drop", docs, lambda text: "pii" if any(find_pii(text)) else None)
        return kept, row
    out: list[Doc] = []
    emails = ips = changed = 0
    for doc_id, text in docs:
        masked, e, i = mask_pii(text)
        emails, ips, changed = emails + e, ips + i, changed + bool(e or i)
        out.append((doc_id, masked))
    return out, _row(
        "pii_mask", "transform", docs, out, reasons={"emails": emails, "ips": ips, "docs_changed": changed}
    )


def _c4_steps(docs: list[Doc]) -> tuple[list[Doc], list[dict[str, Any]]]:
    """C4's rules as two rows: c4_quality (filter: documents C4 drops) then c4_lines (transform: the lines
    C4 removes from the documents it keeps), so that a filter row never edits a text."""
    kept_before: list[Doc] = []
    edited: list[Doc] = []
    reasons: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for doc_id, text in docs:
        reason, new_text, dropped = c4_filter(text)
        if reason is not None:
            reasons[reason] += 1
            continue
        kept_before.append((doc_id, text))
        edited.append((doc_id, new_text))
        lines.update(dropped)
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


# ---------------------------------------------------------------------------------------- the stages


def describe_input(config: CurateShardConfig) -> str:
    """'builtin python_docs', 'jsonl data/*.jsonl': where a shard's documents come from, for messages."""
    if config.input.format == "builtin":
        return f"builtin {config.input.name}"
    return f"{config.input.format} {config.input.path}"


def _read_shard(source_name: str, config: CurateShardConfig, repairs: Counter[str]) -> tuple[list[Doc], Any]:
    shard, shards, files = config.shard, config.shards, config.files
    if config.input.format == "builtin":
        docs, provenance = builtin_documents(config.input.name, config.input.max_docs, source_name, config.python)
        return docs[shard::shards], provenance
    # the files must be what the key was computed from: same size and digest before, no change while read
    field = f"data.sources.{source_name}.input.path"
    before = check_unchanged(config.input.path or "", files, field)
    paths = [f.path for f in files]
    # read_documents reads the `input` of what it is given: the config has one, like a SourceSpec
    docs = list(read_documents(source_name, config, paths, shards=shards, repairs=repairs))  # type: ignore[arg-type]
    for file, st in zip(files, before, strict=True):
        check_still(file, st, field)
    provenance = {"files": [file.model_dump() for file in files]}
    return docs, provenance


def _normalize(docs: Sequence[Doc], form: str, repairs: Counter[str]) -> list[Doc]:
    out = []
    for doc_id, text in docs:
        text, replaced = repair_surrogates(text)
        if replaced:
            repairs["lone_surrogates"] += 1
            repairs["lone_surrogate_chars"] += replaced
        out.append((doc_id, normalize_text(text, form)))
    return out


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
    raw, provenance = _read_shard(source_name, config, repairs)
    steps: list[dict[str, Any]] = []

    docs = _normalize(raw, curate.normalize, repairs)
    reasons = {reason: repairs[reason] for reason in REPAIR_REASONS}
    steps.append(_row("normalize", "transform", raw, docs, form=curate.normalize, reasons=reasons))
    del raw

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

    docs, row = _filter_step("length", docs, length_reason)
    steps.append(row | {"min_chars": min_chars, "max_chars": max_chars})

    if curate.languages:
        languages = frozenset(curate.languages)
        docs, row = _filter_step("language", docs, lambda text: language_reason(text, languages))
        steps.append(row | {"languages": sorted(languages), "min_probability": LANGUAGE_MIN_PROBABILITY})

    # the rule sets run in FineWeb's order (gopher, c4, fineweb; curation.md 1.1.1) whatever the list's order
    if "gopher" in curate.quality:
        docs, row = _filter_step("gopher_quality", docs, gopher_quality_reason)
        steps.append(row)
        docs, row = _filter_step("gopher_repetition", docs, gopher_repetition_reason)
        steps.append(row)

    if "c4" in curate.quality:
        docs, c4_steps = _c4_steps(docs)
        steps.extend(c4_steps)

    if "fineweb" in curate.quality:
        docs, row = _filter_step("fineweb_quality", docs, fineweb_quality_reason)
        steps.append(row)

    if curate.pii != "keep":
        docs, row = _pii_step(curate.pii, docs)
        steps.append(row)

    hashes = [_sha256(text) for _, text in docs]
    if curate.dedup.exact:
        seen: set[str] = set()
        kept_docs, kept_hashes = [], []
        for doc, h in zip(docs, hashes, strict=True):
            if h not in seen:
                seen.add(h)
                kept_docs.append(doc)
                kept_hashes.append(h)
        steps.append(_row("exact_dedup", "filter", docs, kept_docs))
        docs, hashes = kept_docs, kept_hashes

    validate_counts(steps)
    minhash = curate.dedup.minhash
    if minhash is not None:  # signatures only; the near-duplicates go in curate_source, across the shards
        sigs = signatures([text for _, text in docs], minhash.ngram, minhash.bands * minhash.rows)
        _save_npy(out_dir / MINHASH_FILE, sigs)
    else:
        (out_dir / MINHASH_FILE).unlink(missing_ok=True)
    _write_jsonl(
        out_dir / DOCS_FILE,
        ({"id": doc_id, "text": text, "sha256": h} for (doc_id, text), h in zip(docs, hashes, strict=True)),
    )
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
    _write_json(out_dir / STATS_FILE, result)
    return result


def _sum_steps(source_name: str, shard_stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shards' step rows summed per step name (every shard ran the same steps)."""
    names = [row["step"] for row in shard_stats[0]["steps"]] if shard_stats else []
    summed: dict[str, dict[str, Any]] = {}
    for stats in shard_stats:
        if [row["step"] for row in stats["steps"]] != names:
            raise ValueError(f"curate_source {source_name}: shards ran different steps; rebuild the shards")
        for row in stats["steps"]:
            total = summed.setdefault(row["step"], {"step": row["step"], "kind": row["kind"]})
            for column in ("docs_in", "docs_out", "chars_in", "chars_out"):
                total[column] = total.get(column, 0) + row[column]
            for reason, count in (row.get("reasons") or {}).items():
                total.setdefault("reasons", {})[reason] = total.get("reasons", {}).get(reason, 0) + count
    return [summed[name] for name in names]


def _load_signatures(source_name: str, shard_dirs: list[Path], docs: int, columns: int) -> np.ndarray:
    """The shards' MinHash signatures stacked in shard order; ValueError if they do not fit the spec."""
    parts = []
    for directory in shard_dirs:
        path = directory / MINHASH_FILE
        if not path.exists():
            raise ValueError(
                f"curate_source {source_name}: {path} is missing (the shard was curated without dedup.minhash); "
                "rebuild the shards"
            )
        parts.append(np.load(path, allow_pickle=False))
    sigs = np.concatenate(parts) if parts else np.empty((0, columns), dtype=np.uint64)
    if sigs.shape != (docs, columns):
        raise ValueError(
            f"curate_source {source_name}: MinHash signatures of shape {sigs.shape}, expected ({docs}, {columns}) "
            "(bands * rows changed since the shards ran?); rebuild the shards"
        )
    return sigs


def _texts_at(shard_dirs: list[Path], lines: np.ndarray) -> list[str]:
    """The texts of the given (sorted) line indices of the shards' docs.jsonl files read in order: the
    documents of MinHash candidate pairs, whose exact shingle Jaccard is checked."""
    wanted = lines.tolist()
    texts: list[str] = []
    index = 0
    for directory in shard_dirs:
        if len(texts) == len(wanted):
            break
        with open(directory / DOCS_FILE, encoding="utf-8") as f:
            for line in f:
                if index == wanted[len(texts)]:
                    texts.append(json.loads(line)["text"])
                    if len(texts) == len(wanted):
                        break
                index += 1
    if len(texts) != len(wanted):  # the first pass counted more lines: a shard changed under us
        raise ValueError(f"curate_source: {', '.join(map(str, shard_dirs))} changed while read; rebuild the shards")
    return texts


def _steps_summary(steps: list[dict[str, Any]]) -> str:
    return ", ".join(f"{row['step']} {row['docs_in']}->{row['docs_out']}" for row in steps)


def curate_source(
    config: CurateSourceConfig, shard_dirs: list[Path], out_dir: Path, source_name: str = "source"
) -> dict[str, Any]:
    """Join the shards of one source (in order) into out_dir/train.jsonl and out_dir/heldout.jsonl.

    Exact duplicates across shards are removed (first occurrence wins) when dedup.exact is on.
    The heldout_docs documents with the smallest SHA-256 are held out (a choice that depends on
    the texts only, so it is stable across reruns and shard counts); with exact dedup off, training
    copies of a held-out text are dropped too. Returns {"counts", "steps", ...} (also in stats.json).
    `source_name` only labels error messages.
    """
    heldout_docs = config.heldout_docs
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shard_dirs = [Path(d) for d in shard_dirs]

    shard_stats = []
    for directory in shard_dirs:
        try:
            shard_stats.append(json.loads((directory / STATS_FILE).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{directory / STATS_FILE}: not a curate_shard output (run curate_shard first)"
            ) from None
    steps = _sum_steps(source_name, shard_stats)

    # pass 1: hashes and sizes only (texts are not kept in memory)
    entries: list[tuple[str, int]] = []  # (sha256, chars) per line of every shard, in order
    for directory in shard_dirs:
        with open(directory / DOCS_FILE, encoding="utf-8") as f:
            for line in f:
                obj = json.loads(line)
                entries.append((obj["sha256"], len(obj["text"])))
    keep = [True] * len(entries)
    if config.dedup.exact:
        seen: set[str] = set()
        for i, (h, _) in enumerate(entries):
            if h in seen:
                keep[i] = False
            else:
                seen.add(h)
        steps.append(
            {
                "step": "cross_shard_dedup",
                "kind": "filter",
                "docs_in": len(entries),
                "docs_out": sum(keep),
                "chars_in": sum(c for _, c in entries),
                "chars_out": sum(c for (_, c), k in zip(entries, keep, strict=True) if k),
            }
        )
    minhash = config.dedup.minhash
    if minhash is not None:
        sigs = _load_signatures(source_name, shard_dirs, len(entries), minhash.bands * minhash.rows)
        candidates = np.nonzero(keep)[0]
        near, verification = near_duplicates(
            sigs[candidates],
            minhash.bands,
            minhash.rows,
            minhash.threshold,
            minhash.ngram,
            lambda wanted: _texts_at(shard_dirs, candidates[wanted]),
        )
        chars_in = sum(entries[i][1] for i in candidates.tolist())
        for i in candidates[near].tolist():
            keep[i] = False
        steps.append(
            {
                "step": "minhash_dedup",
                "kind": "filter",
                "docs_in": len(candidates),
                "docs_out": len(candidates) - int(near.sum()),
                "chars_in": chars_in,
                "chars_out": chars_in - sum(entries[i][1] for i in candidates[near].tolist()),
                "ngram": minhash.ngram,
                "bands": minhash.bands,
                "rows": minhash.rows,
                "threshold": minhash.threshold,
                **verification,
            }
        )
    kept = [i for i, k in enumerate(keep) if k]
    if not kept:
        inputs = ", ".join(dict.fromkeys(str(stats.get("input", "?")) for stats in shard_stats))
        raise UserError(
            f"data.sources.{source_name}: no document left after curation (input: {inputs or 'no shard'}; "
            f"steps: {_steps_summary(steps) or 'no shard'}); check the input and the curate settings "
            "(min_chars, max_chars, quality, pii)"
        )
    if heldout_docs and len(kept) <= heldout_docs:
        raise UserError(
            f"data.heldout_docs: source {source_name!r} has {len(kept)} document(s) after curation, "
            f"not more than data.heldout_docs = {heldout_docs}, so none would be left to train on; "
            f"lower data.heldout_docs below {len(kept)} (or give the source more documents)"
        )
    heldout = set(heapq.nsmallest(heldout_docs, kept, key=lambda i: (entries[i][0], i)))
    heldout_hashes = {entries[i][0] for i in heldout}
    role = {}  # line index -> "train" | "heldout"; lines not in it are dropped
    for i in kept:
        if i in heldout:
            role[i] = "heldout"
        elif entries[i][0] not in heldout_hashes:  # only possible with dedup.exact off
            role[i] = "train"
    chars_in = sum(entries[i][1] for i in kept)
    docs_train = sum(1 for r in role.values() if r == "train")
    chars_train = sum(entries[i][1] for i, r in role.items() if r == "train")
    chars_heldout = sum(entries[i][1] for i in heldout)
    steps.append(
        {
            "step": "heldout_split",
            "kind": "filter",
            "docs_in": len(kept),
            "docs_out": docs_train + len(heldout),
            "chars_in": chars_in,
            "chars_out": chars_train + chars_heldout,
            "heldout_docs": heldout_docs,
        }
    )
    validate_counts(steps)

    # pass 2: copy the lines into train.jsonl / heldout.jsonl, in order
    train_tmp, heldout_tmp = out_dir / (TRAIN_FILE + ".tmp"), out_dir / (HELDOUT_FILE + ".tmp")
    index = 0
    with (
        open(train_tmp, "w", encoding="utf-8", newline="\n") as train,
        open(heldout_tmp, "w", encoding="utf-8", newline="\n") as held,
    ):
        for directory in shard_dirs:
            with open(directory / DOCS_FILE, encoding="utf-8") as f:
                for line in f:
                    target = role.get(index)
                    if target == "train":
                        train.write(line)
                    elif target == "heldout":
                        held.write(line)
                    index += 1
    os.replace(train_tmp, out_dir / TRAIN_FILE)
    os.replace(heldout_tmp, out_dir / HELDOUT_FILE)

    first = steps[0] if steps else {"docs_in": 0, "chars_in": 0}
    result = {
        "counts": {
            "docs_read": first["docs_in"],
            "chars_read": first["chars_in"],
            "docs_train": docs_train,
            "docs_heldout": len(heldout),
            "chars_train": chars_train,
            "chars_heldout": chars_heldout,
            "docs_repaired": sum(stats.get("counts", {}).get("docs_repaired", 0) for stats in shard_stats),
        },
        "steps": steps,
        "provenance": [stats.get("provenance") for stats in shard_stats],
        "shards": len(shard_dirs),
    }
    _write_json(out_dir / STATS_FILE, result)
    return result
