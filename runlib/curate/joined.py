"""Reading a source's documents as its join left them: each curate shard's docs.jsonl with curate_source's
fate codes (fates.npy, runlib.curate.source), one shard at a time. score_quality scores a shard's survivors,
filter_shard writes them, and the quality models of other sources train on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from runlib.curate.files import DOCS_FILE, STATS_FILE
from runlib.curate.npyfile import NpyFile, sorted_range
from runlib.curate.partition import SHARD_SHIFT
from runlib.curate.source import FATE_DTYPE, FATES_FILE, HELDOUT


def rebuild(directory: Path) -> str:
    return f"delete {directory} and run the workflow again"


def shard_docs(shard_dir: Path) -> int:
    """How many documents a curate_shard output holds (its stats.json)."""
    path = Path(shard_dir) / STATS_FILE
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["counts"]["docs"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a curate_shard output ({exc}); {rebuild(Path(shard_dir))}") from None


def fate_codes(source_dir: Path, shard: int, lines: int) -> NDArray[np.uint8]:
    """The join's fate code of each of one shard's `lines` documents (0: trained on), from the rows of
    curate_source's fates.npy in the shard's id range: read with pread, nothing else of the table."""
    path = Path(source_dir) / FATES_FILE
    with NpyFile(path) as table:
        if table.dtype != FATE_DTYPE or table.ndim != 1:
            raise ValueError(f"{path}: not a table of {FATE_DTYPE}; {rebuild(Path(source_dir))}")
        lo, hi = shard << SHARD_SHIFT, (shard + 1) << SHARD_SHIFT
        rows = table.rows(0, *sorted_range(table, 0, "id", lo, hi))
    local = (rows["id"] & np.uint64((1 << SHARD_SHIFT) - 1)).astype(np.int64)
    if len(local) and (local.max() >= lines or np.any(np.diff(local) <= 0)):
        raise ValueError(f"{path}: names line {local.max()} of shard {shard}, which has {lines}; rebuild both")
    out = np.zeros(lines, dtype=np.uint8)
    out[local] = rows["code"]
    return out


def shard_lines(shard_dir: Path, lines: int) -> Iterator[bytes]:
    """The lines of a curate_shard's docs.jsonl, checked to be `lines` of them."""
    path = Path(shard_dir) / DOCS_FILE
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += 1
            if n > lines:
                break
            yield line
    if n != lines:
        raise ValueError(f"{path}: {n} lines, its stats say {lines}; {rebuild(Path(shard_dir))}")


def joined_lines(shard_dir: Path, source_dir: Path, shard: int) -> Iterator[tuple[int, bytes]]:
    """(fate code, line) of each document of one shard, in input order."""
    lines = shard_docs(shard_dir)
    codes = fate_codes(source_dir, shard, lines).tolist()
    yield from zip(codes, shard_lines(shard_dir, lines), strict=True)


def joined_texts(source_dir: Path, shard_dirs: list[Path]) -> Iterator[dict[str, Any]]:
    """The rows of a source's documents trained on after its join (before any quality filter), shard by shard
    in input order: what a quality model of another source trains on."""
    for shard, directory in enumerate(shard_dirs):
        for code, line in joined_lines(directory, source_dir, shard):
            if code == 0:
                yield json.loads(line)


def part_texts(shard_dir: Path, source_dir: Path, shard: int) -> tuple[list[str], int]:
    """(the texts of one shard's documents kept by the join, those trained on then those held out, each in
    input order; how many are trained on): what score_quality scores and the order of its scores.npy."""
    train: list[str] = []
    heldout: list[str] = []
    for code, line in joined_lines(shard_dir, source_dir, shard):
        if code == 0:
            train.append(json.loads(line)["text"])
        elif code == HELDOUT:
            heldout.append(json.loads(line)["text"])
    return train + heldout, len(train)
