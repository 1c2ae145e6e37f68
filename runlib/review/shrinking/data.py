"""`runlib shrink`'s data stand-ins: each source at a few hundred documents, a file source whose files are not
here replaced by a builtin of the same domain, each source's tokens declared from the documents the shrunk
run curates (runlib.review.standins)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.plan import Plan
from runlib.review.standins import source_train_tokens
from runlib.spec import RunSpec
from runlib.spec.models import SourceSpec
from runlib.util.globs import match_files

STAND_IN_DOCS = (
    150  # documents per stand-in source (measured: python_docs ~245K tokens, python_code ~880K, arithmetic ~46K)
)
HELDOUT_DOCS = 20
STAND_INS = {  # domain -> builtin stand-in
    "code": "python_code",
    "math": "arithmetic",
    "synthetic": "arithmetic",
}
PROSE_STAND_IN = "python_docs"  # web, books, wiki, papers, dialogue, curated
STAND_IN_TEXT = {
    "python_code": "the standard library's own code",
    "python_docs": "Python's own documentation",
    "arithmetic": "seeded arithmetic",
}


def files_present(pattern: str | None, field_name: str) -> bool:
    """Whether a file source's glob matches a file here (a bounded stat walk, no hashing)."""
    if not pattern:
        return False
    if Path(pattern).is_dir():
        return True
    try:
        return bool(match_files(pattern, field_name))
    except UserError:
        return False


def stand_in(domain: str) -> str:
    return STAND_INS.get(domain, PROSE_STAND_IN)


def data_section(spec: RunSpec, plan: Plan, run_tokens_new: float) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The shrunk spec's `data`: the sources (shrunk_sources), the held-out set at most HELDOUT_DOCS documents, the
    packing, boundary and loss policies as published; the comment above each source, and the header's."""
    d = spec.data
    heldout_docs = min(d.heldout_docs, HELDOUT_DOCS)
    sources, source_notes, notes = shrunk_sources(spec, plan, run_tokens_new, heldout_docs)
    data = {
        "sources": sources,
        "heldout_docs": heldout_docs,
        "packing": d.packing,
        "boundary_targets": d.boundary_targets,
        "loss_normalization": d.loss_normalization,
        "token_dtype": d.token_dtype,
    }
    return data, source_notes, notes


def shrunk_input(i: int, name: str, src: SourceSpec) -> tuple[dict[str, Any], str | None]:
    """Source number i's shrunk input, and the comment when a builtin stand-in replaces its files."""
    inp = src.input
    if inp.format == "builtin":
        new_input: dict[str, Any] = {
            "format": "builtin",
            "name": inp.name,
            "max_docs": min(inp.max_docs or STAND_IN_DOCS, STAND_IN_DOCS + i),
        }
        if inp.shards:
            new_input["shards"] = min(inp.shards, 2)
        return new_input, None
    if files_present(inp.path, f"data.sources.{name}.input.path"):
        new_input = inp.model_dump(exclude_none=True)
        new_input["max_docs"] = min(inp.max_docs or STAND_IN_DOCS, STAND_IN_DOCS)
        new_input["shards"] = 1
        return new_input, None
    builtin = stand_in(src.domain)
    # a distinct document count per source keeps each source its own artifacts and held-out set
    new_input = {"format": "builtin", "name": builtin, "max_docs": STAND_IN_DOCS + i, "shards": 1}
    note = (
        f"stand-in: {inp.format} files {inp.path!r} are not here; {src.domain} text -> builtin {builtin} "
        f"({STAND_IN_TEXT[builtin]}, {STAND_IN_DOCS + i} documents)"
    )
    return new_input, note


def shrunk_sources(
    spec: RunSpec, plan: Plan, run_tokens_new: float, heldout_docs: int
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Each source with its shrunk input (shrunk_input), its declared tokens, curation and FIM."""
    sources: dict[str, Any] = {}
    notes: dict[str, str] = {}
    epochs = {s.name: s.epochs for s in plan.sources}
    used_share = {s.name: s.tokens_used / plan.tokens_total if plan.tokens_total else 0.0 for s in plan.sources}
    header = []
    for i, (name, src) in enumerate(spec.data.sources.items()):
        entry: dict[str, Any] = {"domain": src.domain}
        new_input, note = shrunk_input(i, name, src)
        if note is not None:
            notes[name] = note
        entry["input"] = new_input
        # declared tokens: what the documents the shrunk run curates hold (runlib.review.standins), so the
        # audit's epochs before the run are the ones tokenizing measures; a file source that cannot be read
        # here keeps the published number of epochs over the shrunk run
        try:
            entry["tokens"] = source_train_tokens(name, src, new_input, heldout_docs)
        except UserError as exc:
            e = epochs.get(name)
            used = used_share.get(name, 0.0) * run_tokens_new
            if e and math.isfinite(e) and used > 0:
                entry["tokens"] = max(1, round(used / e))
            else:
                entry["tokens"] = max(1, round(run_tokens_new))
            notes[name] = f"tokens: the published epochs over the shrunk run (its documents were not read: {exc})"
        curate = src.curate.model_dump(exclude_defaults=True)
        if new_input["format"] != src.input.format:  # a stand-in's documents carry no URL to filter on (RUN011)
            curate.pop("url_filter", None)
        if curate:
            entry["curate"] = curate
        if src.fim is not None:
            entry["fim"] = src.fim.model_dump()
        sources[name] = entry
    stand_ins = sum(note.startswith("stand-in:") for note in notes.values())
    if stand_ins:
        header.append(f"data: {stand_ins} of {len(spec.data.sources)} sources are builtin stand-ins (see each)")
    return sources, notes, header
