"""The stage curate_source: the join of one source's shards (runlib.curate.stage writes them).

curate_source concatenates the shards in order, removes exact duplicates across them (cross_shard_dedup),
then near-duplicates (minhash_dedup: LSH candidate pairs from the signatures, kept when their exact shingle
Jaccard is >= curate.dedup.minhash.threshold, union-find, the first document of each cluster kept), then
splits off the data.heldout_docs documents with the smallest SHA-256 (heldout_split) into heldout.jsonl;
the rest, in order, go to train.jsonl. Both files have docs.jsonl's line format.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any

import numpy as np

from runlib.curate.config import CurateSourceConfig
from runlib.curate.counts import validate_counts
from runlib.curate.dropped import DroppedSample
from runlib.curate.files import (
    DOCS_FILE,
    HELDOUT_FILE,
    MINHASH_FILE,
    STATS_FILE,
    TRAIN_FILE,
    write_dropped,
    write_json,
)
from runlib.curate.minhash import near_duplicates
from runlib.errors import UserError
from runlib.spec.models import MinhashSpec
from runlib.util.atomic import atomic_file


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


def _entries(shard_dirs: list[Path]) -> list[tuple[str, int]]:
    """(sha256, chars) per line of every shard, in order (texts are not kept in memory)."""
    entries: list[tuple[str, int]] = []
    for directory in shard_dirs:
        with open(directory / DOCS_FILE, encoding="utf-8") as f:
            for line in f:
                obj = json.loads(line)
                entries.append((obj["sha256"], len(obj["text"])))
    return entries


def _cross_shard_dedup(entries: list[tuple[str, int]], keep: list[bool]) -> dict[str, Any]:
    """Clear keep[i] of every line whose text hash an earlier line has; the step's row."""
    seen: set[str] = set()
    for i, (h, _) in enumerate(entries):
        if h in seen:
            keep[i] = False
        else:
            seen.add(h)
    return {
        "step": "cross_shard_dedup",
        "kind": "filter",
        "docs_in": len(entries),
        "docs_out": sum(keep),
        "reasons": {"duplicate": len(entries) - sum(keep)},
        "chars_in": sum(c for _, c in entries),
        "chars_out": sum(c for (_, c), k in zip(entries, keep, strict=True) if k),
    }


def _minhash_dedup(
    minhash: MinhashSpec, source_name: str, shard_dirs: list[Path], entries: list[tuple[str, int]], keep: list[bool]
) -> dict[str, Any]:
    """Clear keep[i] of every kept line that is a near-duplicate of an earlier kept one; the step's row."""
    sigs = _load_signatures(source_name, shard_dirs, len(entries), minhash.bands * minhash.rows)
    candidates = np.flatnonzero(np.asarray(keep, dtype=bool))
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
    return {
        "step": "minhash_dedup",
        "kind": "filter",
        "docs_in": len(candidates),
        "docs_out": len(candidates) - int(near.sum()),
        "reasons": {"near_duplicate": int(near.sum())},
        "chars_in": chars_in,
        "chars_out": chars_in - sum(entries[i][1] for i in candidates[near].tolist()),
        "ngram": minhash.ngram,
        "bands": minhash.bands,
        "rows": minhash.rows,
        "threshold": minhash.threshold,
        **verification,
    }


def _check_enough(
    source_name: str, kept: list[int], heldout_docs: int, shard_stats: list[dict[str, Any]], steps: list[dict[str, Any]]
) -> None:
    """UserError when curation left no document, or no more than the held-out ones."""
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


def _write_splits(
    shard_dirs: list[Path], role: dict[int, str], out_dir: Path, why: dict[int, tuple[str, str]], dropped: DroppedSample
) -> None:
    """Copy the shards' lines into train.jsonl / heldout.jsonl by role (line index -> "train" | "heldout";
    a line not in it is dropped, for the (step, reason) in `why`, and sampled into `dropped`), in order."""
    index = 0
    with (
        atomic_file(out_dir / TRAIN_FILE) as train_tmp,
        atomic_file(out_dir / HELDOUT_FILE) as heldout_tmp,
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
                    elif dropped.wants(*why[index]):
                        row = json.loads(line)
                        row.pop("sha256", None)
                        dropped.add(*why[index], row.pop("id"), row.pop("text"), row)
                    index += 1


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
    shard_stats = _shard_stats(shard_dirs)
    steps = _sum_steps(source_name, shard_stats)

    # pass 1: hashes and sizes only (texts are not kept in memory)
    entries = _entries(shard_dirs)
    keep = [True] * len(entries)
    why: dict[int, tuple[str, str]] = {}  # a dropped line -> (step, reason)
    if config.dedup.exact:
        steps.append(_cross_shard_dedup(entries, keep))
        why |= {i: ("cross_shard_dedup", "duplicate") for i, k in enumerate(keep) if not k}
    if config.dedup.minhash is not None:
        steps.append(_minhash_dedup(config.dedup.minhash, source_name, shard_dirs, entries, keep))
        why |= {i: ("minhash_dedup", "near_duplicate") for i, k in enumerate(keep) if not k and i not in why}
    kept = [i for i, k in enumerate(keep) if k]
    _check_enough(source_name, kept, heldout_docs, shard_stats, steps)
    heldout = set(heapq.nsmallest(heldout_docs, kept, key=lambda i: (entries[i][0], i)))
    heldout_hashes = {entries[i][0] for i in heldout}
    role: dict[int, str] = {}  # line index -> "train" | "heldout"; lines not in it are dropped
    for i in kept:
        if i in heldout:
            role[i] = "heldout"
        elif entries[i][0] not in heldout_hashes:  # only possible with dedup.exact off
            role[i] = "train"
        else:
            why[i] = ("heldout_split", "copy_of_heldout")
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
    dropped = DroppedSample(config.keep_dropped)
    _write_splits(shard_dirs, role, out_dir, why, dropped)
    write_dropped(out_dir, dropped)

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
    write_json(out_dir / STATS_FILE, result)
    return result
