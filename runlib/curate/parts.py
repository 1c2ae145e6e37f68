"""A curated source's parts: where each curate shard's documents lie in train.jsonl and heldout.jsonl.

curate_source copies the shards' kept lines in shard order, and filter_quality keeps that order, so the
documents of shard i are one byte range of each split file. parts.json records those ranges:

    {"parts": N, "train": [[start, end, docs], ... N rows], "heldout": [[start, end, docs], ...]}

and one tokenize job per part reads its ranges only (runlib.data.tokenize): the tokenization of a source
spreads over as many jobs as it has shards, and the concatenation of the parts' tokens in part order is
the source's documents in file order, so the data order does not depend on how many parts there are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runlib.curate.files import write_json

PARTS_FILE = "parts.json"
SPLITS = ("train", "heldout")


class PartRanges:
    """Byte ranges of one split file, built while it is written: `advance(part)` before a part's first
    line, `add(nbytes)` for each line."""

    def __init__(self, parts: int):
        self.rows: list[list[int]] = [[0, 0, 0] for _ in range(parts)]
        self._position = 0
        self._part = 0

    def advance(self, part: int) -> None:
        """Parts before `part` are finished: they end where the file is now."""
        if part < self._part or part >= len(self.rows):
            raise ValueError(f"parts are written in order: part {part} after part {self._part}")
        for skipped in range(self._part + 1, part + 1):
            self.rows[skipped] = [self._position, self._position, 0]
        self._part = part

    def add(self, nbytes: int) -> None:
        row = self.rows[self._part]
        self._position += nbytes
        row[1] = self._position
        row[2] += 1

    def finish(self) -> list[list[int]]:
        self.advance(len(self.rows) - 1)
        return self.rows


def write_parts(out_dir: Path, train: PartRanges, heldout: PartRanges) -> None:
    rows = {"train": train.finish(), "heldout": heldout.finish()}
    write_json(Path(out_dir) / PARTS_FILE, {"parts": len(rows["train"]), **rows})


def write_one_part(curated_dir: Path) -> None:
    """parts.json for a curated folder written by other means (train.jsonl and heldout.jsonl in place): the
    whole of each file is one part."""
    ranges = {}
    for split in SPLITS:
        path = Path(curated_dir) / f"{split}.jsonl"
        ranges[split] = PartRanges(1)
        with open(path, "rb") as f:
            for line in f:
                ranges[split].add(len(line))
    write_parts(curated_dir, ranges["train"], ranges["heldout"])


def read_parts(curated_dir: Path) -> dict[str, list[list[int]]]:
    """parts.json of a curated artifact, checked against its split files: contiguous ranges from 0 that end
    at the file's size, as many rows in each split. ValueError names the file and the fix."""
    path = Path(curated_dir) / PARTS_FILE
    fix = f"rebuild the curated source (delete {Path(curated_dir)} and run the workflow again)"
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (a curated source written before parts); {fix}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc}); {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("parts"), int) or data["parts"] < 1:
        raise ValueError(f"{path}: no 'parts' count; {fix}")
    out: dict[str, list[list[int]]] = {}
    for split in SPLITS:
        rows: Any = data.get(split)
        size = (Path(curated_dir) / f"{split}.jsonl").stat().st_size
        ok = isinstance(rows, list) and len(rows) == data["parts"]
        position = 0
        for row in rows if ok else []:
            ok = (
                isinstance(row, list)
                and len(row) == 3
                and all(type(v) is int and v >= 0 for v in row)
                and row[0] == position
                and row[1] >= row[0]
            )
            if not ok:
                break
            position = row[1]
        if not ok or position != size:
            raise ValueError(f"{path}: {split} is not {data['parts']} contiguous ranges ending at {size} bytes; {fix}")
        out[split] = rows
    return out


def part_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(line number within the range, from 1; the line's bytes) of bytes [start, end) of a JSONL file."""
    with open(path, "rb") as f:
        f.seek(start)
        position, lineno = start, 0
        while position < end:
            line = f.readline()
            if not line:
                raise ValueError(f"{path}: ends at byte {position}, before its part's end {end}")
            lineno += 1
            position += len(line)
            yield lineno, line
        if position != end:
            raise ValueError(f"{path}: a line crosses its part's end at byte {end}; rebuild the curated source")
