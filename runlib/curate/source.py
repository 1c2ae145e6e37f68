"""The stage curate_source: the join of one source's shards (runlib.curate.stage writes them).

curate_source reads the source's dedup_partition outputs (runlib.curate.partition: the exact duplicates
across shards and the MinHash pairs verified at curate.dedup.minhash.threshold, each found in its slice of
the hash space, with their documents' hashes), clusters the pairs (union-find; each cluster keeps its
lowest-ranked document: hash, then id), picks the data.heldout_docs kept documents with the smallest SHA-256
from each shard's sorted hashes (heldout_split), and writes the verdicts (fates.npy) and the counts. It holds
the duplicates, the pairs and the held-out choice, never a text or a row per document: memory grows with
the duplicates. One filter_shard job per shard then writes that shard's documents (runlib.curate.filter_shard),
as datatrove's MinHash dedup ends with a filter per task (huggingface/datatrove
src/datatrove/pipeline/dedup/minhash.py MinhashDedupFilter, its stage 4).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from runlib.curate.config import CurateSourceConfig
from runlib.curate.counts import validate_counts
from runlib.curate.files import STATS_FILE, save_npy, write_json
from runlib.curate.minhash import first_of_clusters
from runlib.curate.partition import (
    EXACT_FILE,
    HASHES_FILE,
    PAIR_DOCS_FILE,
    SHARD_SHIFT,
    VERIFIED_FILE,
    global_ids,
    row_order,
)
from runlib.errors import UserError


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


def _steps_summary(steps: list[dict[str, Any]]) -> str:
    return ", ".join(f"{row['step']} {row['docs_in']}->{row['docs_out']}" for row in steps)


def _shard_stats(shard_dirs: list[Path]) -> list[dict[str, Any]]:
    """The stats.json of each curate_shard output, in order."""
    out = []
    for directory in shard_dirs:
        try:
            out.append(json.loads((directory / STATS_FILE).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{directory / STATS_FILE}: not a curate_shard output (run curate_shard first)"
            ) from None
    return out


def _near_duplicates(partition_dirs: list[Path]) -> tuple[NDArray[np.uint64], dict[str, int]]:
    """The documents of the partitions' verified pairs' clusters that are not their cluster's lowest-ranked
    (hash, then id) one; the verification's figures summed over the partitions (a pair two bands find in two
    slices counts in each)."""
    pairs = [np.load(d / VERIFIED_FILE, allow_pickle=False) for d in partition_dirs]
    docs = [np.load(d / PAIR_DOCS_FILE, allow_pickle=False) for d in partition_dirs]
    stats = dict.fromkeys(("candidate_pairs", "verified_pairs", "docs_verified"), 0)
    for directory in partition_dirs:
        counts = json.loads((directory / STATS_FILE).read_text(encoding="utf-8"))["counts"]
        for name in stats:
            stats[name] += int(counts[name])
    verified = np.unique(np.concatenate(pairs), axis=0) if pairs else np.empty((0, 2), dtype=np.uint64)
    if not len(verified):
        return np.empty(0, dtype=np.uint64), stats
    table = np.concatenate(docs)
    _, first = np.unique(table["id"], return_index=True)
    table = table[first]
    needed = np.unique(verified)
    at = np.searchsorted(table["id"], needed)
    if np.any(at >= len(table)) or np.any(table["id"][np.minimum(at, len(table) - 1)] != needed):
        raise ValueError(f"curate_source: the partitions' {PAIR_DOCS_FILE} lack documents of their pairs; rebuild them")
    index = np.searchsorted(needed, verified)
    rank = row_order(table["sha"][at], needed)  # rank[r] = the document of rank r
    position = np.empty(len(needed), dtype=np.int64)
    position[rank] = np.arange(len(needed))
    not_first = first_of_clusters(len(needed), position[index])  # by rank: the root is the lowest-ranked
    return needed[rank[not_first]], stats


def _heldout(
    shard_dirs: list[Path], dropped: NDArray[np.uint64], heldout_docs: int
) -> tuple[NDArray[np.uint64], NDArray[np.void]]:
    """(ids, SHA-256 digests as 32-byte rows) of the heldout_docs kept documents with the smallest SHA-256 (then id): each shard's
    smallest ones from its sorted hashes.npy, merged; a function of the texts only."""
    if not heldout_docs:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.dtype((np.void, 32)))
    shas, ids = [], []
    for shard, directory in enumerate(shard_dirs):
        table = np.load(directory / HASHES_FILE, mmap_mode="r", allow_pickle=False)
        taken = 0
        for start in range(0, len(table), max(4 * heldout_docs, 4096)):
            chunk = np.array(table[start : start + max(4 * heldout_docs, 4096)])
            gids = global_ids(shard, chunk["line"])
            keep = ~np.isin(gids, dropped)
            chunk, gids = chunk[keep][: heldout_docs - taken], gids[keep][: heldout_docs - taken]
            shas.append(chunk["sha"])
            ids.append(gids)
            taken += len(gids)
            if taken == heldout_docs:
                break
    sha = np.concatenate(shas) if shas else np.empty((0, 4), dtype=np.uint64)
    gid = np.concatenate(ids) if ids else np.empty(0, dtype=np.uint64)
    chosen = row_order(sha, gid)[:heldout_docs]
    digests = np.ascontiguousarray(sha[chosen]).view(np.dtype((np.void, 32))).ravel()
    return gid[chosen], digests


def _exact_duplicates(partition_dirs: list[Path]) -> NDArray[np.uint64]:
    """The exact duplicates of all the source's dedup_partition outputs."""
    exact = [np.load(d / EXACT_FILE, allow_pickle=False) for d in partition_dirs]
    return np.unique(np.concatenate(exact)) if exact else np.empty(0, dtype=np.uint64)


def _check_enough(
    source_name: str, kept: int, heldout_docs: int, shard_stats: list[dict[str, Any]], steps: list[dict[str, Any]]
) -> None:
    """UserError when curation left no document, or no more than the held-out ones."""
    if not kept:
        inputs = ", ".join(dict.fromkeys(str(stats.get("input", "?")) for stats in shard_stats))
        raise UserError(
            f"data.sources.{source_name}: no document left after curation (input: {inputs or 'no shard'}; "
            f"steps: {_steps_summary(steps) or 'no shard'}); check the input and the curate settings "
            "(min_chars, max_chars, quality, pii)"
        )
    if heldout_docs and kept <= heldout_docs:
        raise UserError(
            f"data.heldout_docs: source {source_name!r} has {kept} document(s) after curation, "
            f"not more than data.heldout_docs = {heldout_docs}, so none would be left to train on; "
            f"lower data.heldout_docs below {kept} (or give the source more documents)"
        )


EXACT, NEAR, HELDOUT, COPY_OF_HELDOUT = 1, 2, 3, 4
"""A document's fate codes in the join (0: trained on; COPY_OF_HELDOUT: a training copy of a held-out text,
dropped, with exact dedup off)."""
DROPPED_AS = {
    EXACT: ("cross_shard_dedup", "duplicate"),
    NEAR: ("minhash_dedup", "near_duplicate"),
    COPY_OF_HELDOUT: ("heldout_split", "copy_of_heldout"),
}
FATES_FILE = "fates.npy"
"""The join's verdicts: FATE_DTYPE rows sorted by global id, one per document not trained on as it is."""
FATE_DTYPE = np.dtype([("id", "<u8"), ("code", "u1")])
_FATE_NAMES = {EXACT: "cross_shard_dedup", NEAR: "minhash_dedup", HELDOUT: "heldout", COPY_OF_HELDOUT: "heldout_split"}


def _shard_codes(ids: NDArray[np.uint64], codes: NDArray[np.uint8], shard: int, lines: int) -> NDArray[np.uint8]:
    """The fate code of each line of one shard, from the sorted (ids, codes)."""
    lo, hi = np.searchsorted(
        ids, [np.uint64(shard) << np.uint64(SHARD_SHIFT), np.uint64(shard + 1) << np.uint64(SHARD_SHIFT)]
    )
    out = np.zeros(lines, dtype=np.uint8)
    local = (ids[lo:hi] & np.uint64((1 << SHARD_SHIFT) - 1)).astype(np.int64)
    if len(local) and local.max() >= lines:
        raise ValueError(
            f"curate_source: shard {shard} has {lines} documents, its tables name line {local.max()}; rebuild the shards"
        )
    out[local] = codes[lo:hi]
    return out


@dataclass
class _Tally:
    """Documents and characters by fate (train, heldout, and the DROPPED_AS steps), and per shard the documents
    trained on and held out."""

    chars: Counter[str] = field(default_factory=Counter)
    docs: Counter[str] = field(default_factory=Counter)
    parts: list[list[int]] = field(default_factory=list)


def _tally(
    shard_dirs: list[Path], ids: NDArray[np.uint64], codes: NDArray[np.uint8], heldout_digests: NDArray[np.void] | None
) -> tuple[NDArray[np.uint64], NDArray[np.uint8], _Tally]:
    """Count each shard's documents by fate from its hashes.npy (one shard's table in memory at a time, never a
    text), marking the training copies of a held-out text (heldout_digests: their SHA-256 as 32-byte rows;
    None with exact dedup on, which already dropped them); returns the fates with those copies added."""
    tally = _Tally()
    copies: list[NDArray[np.uint64]] = []
    for shard, directory in enumerate(shard_dirs):
        table = np.load(directory / HASHES_FILE, allow_pickle=False)
        by_line = np.empty_like(table)
        by_line[table["line"].astype(np.int64)] = table
        shard_codes = _shard_codes(ids, codes, shard, len(by_line))
        if heldout_digests is not None and len(heldout_digests):
            digests = np.ascontiguousarray(by_line["sha"]).view(np.dtype((np.void, 32))).ravel()
            copy = (shard_codes == 0) & np.isin(digests, heldout_digests)
            shard_codes[copy] = COPY_OF_HELDOUT
            copies.append(global_ids(shard, np.flatnonzero(copy).astype(np.uint64)))
        chars = by_line["chars"].astype(np.int64)
        for code in np.unique(shard_codes):
            name = "train" if code == 0 else _FATE_NAMES[int(code)]
            chosen = shard_codes == code
            tally.docs[name] += int(chosen.sum())
            tally.chars[name] += int(chars[chosen].sum())
        tally.parts.append([int((shard_codes == 0).sum()), int((shard_codes == HELDOUT).sum())])
    if copies:
        extra = np.concatenate(copies)
        ids = np.concatenate([ids, extra])
        codes = np.concatenate([codes, np.full(len(extra), COPY_OF_HELDOUT, dtype=np.uint8)])
        order = np.argsort(ids, kind="stable")
        ids, codes = ids[order], codes[order]
    return ids, codes, tally


def _join_rows(config: CurateSourceConfig, tally: _Tally, verification: dict[str, int]) -> list[dict[str, Any]]:
    """The join's step rows (cross_shard_dedup, minhash_dedup, heldout_split) from what it counted."""
    docs, chars = tally.docs, tally.chars
    total, chars_all = sum(docs.values()), sum(chars.values())
    rows = []
    docs_in, chars_in = total - docs["cross_shard_dedup"], chars_all - chars["cross_shard_dedup"]
    if config.dedup.exact:
        duplicates = {"duplicate": docs["cross_shard_dedup"]}
        rows.append(_filter_row("cross_shard_dedup", total, docs_in, chars_all, chars_in, reasons=duplicates))
    minhash = config.dedup.minhash
    if minhash is not None:
        near = {"near_duplicate": docs["minhash_dedup"]}
        figures = {"ngram": minhash.ngram, "bands": minhash.bands, "rows": minhash.rows, "threshold": minhash.threshold}
        docs_out, chars_out = docs_in - docs["minhash_dedup"], chars_in - chars["minhash_dedup"]
        rows.append(
            _filter_row(
                "minhash_dedup", docs_in, docs_out, chars_in, chars_out, reasons=near, **figures, **verification
            )
        )
        docs_in, chars_in = docs_out, chars_out
    docs_out, chars_out = docs["train"] + docs["heldout"], chars["train"] + chars["heldout"]
    rows.append(_filter_row("heldout_split", docs_in, docs_out, chars_in, chars_out, heldout_docs=config.heldout_docs))
    return rows


def _filter_row(step: str, docs_in: int, docs_out: int, chars_in: int, chars_out: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": step,
        "kind": "filter",
        "docs_in": docs_in,
        "docs_out": docs_out,
        "chars_in": chars_in,
        "chars_out": chars_out,
        **extra,
    }


def curate_source(
    config: CurateSourceConfig,
    shard_dirs: list[Path],
    out_dir: Path,
    source_name: str = "source",
    partition_dirs: list[Path] | None = None,
) -> dict[str, Any]:
    """The join of one source's shards (in order): out_dir/fates.npy, the verdict on every document that is
    not trained on as it stands, and stats.json; filter_shard (runlib.curate.filter_shard) applies them to
    each shard's texts.

    The exact duplicates across shards (all copies of a text but its first occurrence) and the verified pairs
    of near-duplicates come from the source's dedup_partition outputs (`partition_dirs`:
    runlib.curate.partition); each cluster of pairs keeps its lowest-ranked document (hash, then id). The
    heldout_docs kept documents with the smallest SHA-256 are held out (a choice that depends on the texts
    only, so it is stable across reruns and shard counts); with exact dedup off, training copies of a held-out
    text are dropped too. It reads the shards' tables, never a text: memory grows with the duplicates and
    one shard's table. Returns {"counts", "steps", "parts", ...} (also in stats.json). `source_name` only
    labels error messages.
    """
    heldout_docs = config.heldout_docs
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shard_dirs = [Path(d) for d in shard_dirs]
    partition_dirs = [Path(d) for d in partition_dirs or []]
    shard_stats = _shard_stats(shard_dirs)
    steps = _sum_steps(source_name, shard_stats)
    if (config.dedup.exact or config.dedup.minhash is not None) and not partition_dirs:
        raise ValueError(f"curate_source {source_name}: dedup across shards needs the dedup_partition outputs")

    exact = _exact_duplicates(partition_dirs)
    verification: dict[str, int] = {}
    near = np.empty(0, dtype=np.uint64)
    if config.dedup.minhash is not None:
        near, verification = _near_duplicates(partition_dirs)
        near = np.unique(near)
    exact = np.setdiff1d(exact, near)  # a document both is counted as a near-duplicate
    dropped_ids = np.concatenate([exact, near])
    total = sum(int(stats["counts"]["docs"]) for stats in shard_stats)
    kept = total - len(dropped_ids)
    _check_enough(source_name, kept, heldout_docs, shard_stats, steps)
    heldout, digests = _heldout(shard_dirs, np.sort(dropped_ids), heldout_docs)
    ids = np.concatenate([dropped_ids, heldout.astype(np.uint64)])
    codes = np.concatenate(
        [np.full(len(exact), EXACT), np.full(len(near), NEAR), np.full(len(heldout), HELDOUT)]
    ).astype(np.uint8)
    order = np.argsort(ids, kind="stable")
    ids, codes, tally = _tally(shard_dirs, ids[order], codes[order], None if config.dedup.exact else digests)
    fates = np.empty(len(ids), dtype=FATE_DTYPE)
    fates["id"], fates["code"] = ids, codes
    save_npy(out_dir / FATES_FILE, fates)

    steps += _join_rows(config, tally, verification)
    docs, chars = tally.docs, tally.chars
    validate_counts(steps)

    first = steps[0] if steps else {"docs_in": 0, "chars_in": 0}
    result = {
        "counts": {
            "docs_read": first["docs_in"],
            "chars_read": first["chars_in"],
            "docs_train": docs["train"],
            "docs_heldout": docs["heldout"],
            "chars_train": chars["train"],
            "chars_heldout": chars["heldout"],
            "docs_repaired": sum(stats.get("counts", {}).get("docs_repaired", 0) for stats in shard_stats),
        },
        "steps": steps,
        "parts": tally.parts,
        "provenance": [stats.get("provenance") for stats in shard_stats],
        "shards": len(shard_dirs),
    }
    write_json(out_dir / STATS_FILE, result)
    return result
