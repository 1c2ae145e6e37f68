"""The files the curation stages write and how: one JSON object per line (docs.jsonl, train.jsonl,
heldout.jsonl, dropped.jsonl), stats.json, the MinHash signatures; each written atomically (a killed job
leaves the old file or none, never half of one)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from runlib.curate.dropped import DroppedSample
from runlib.util.atomic import atomic_file, write_text_atomic

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "offsets.npy"  # docs.jsonl's line offsets and size: int64, docs + 1 (write_jsonl_indexed)
STATS_FILE = "stats.json"
TRAIN_FILE = "train.jsonl"
HELDOUT_FILE = "heldout.jsonl"
DROPPED_FILE = "dropped.jsonl"  # a sample of the documents each step dropped, per reason (curate.keep_dropped)

_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def jsonl_line(row: dict[str, Any]) -> str:
    """One JSON object on one line: UTF-8 text, with the characters str.splitlines() would break on escaped
    (json escapes the control characters itself; U+0085, U+2028 and U+2029 it leaves raw)."""
    line = json.dumps(row, ensure_ascii=False)
    for char, escaped in _LINE_BREAKS.items():
        if char in line:
            line = line.replace(char, escaped)
    return line + "\n"


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(jsonl_line(row))


def write_jsonl_indexed(path: Path, rows: Iterable[dict[str, Any]]) -> np.ndarray:
    """write_jsonl, returning the byte offset of each line and the file's size (n + 1 int64): where a reader
    seeks to read one document (OFFSETS_FILE)."""
    offsets = [0]
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        for row in rows:
            line = jsonl_line(row).encode("utf-8")
            f.write(line)
            offsets.append(offsets[-1] + len(line))
    return np.asarray(offsets, dtype=np.int64)


def read_lines_at(path: Path, spans: list[tuple[int, int]]) -> list[bytes]:
    """The lines of a JSONL file at these byte spans [start, end) (from its OFFSETS_FILE), by seeking to each."""
    out = []
    with open(path, "rb") as f:
        for start, end in spans:
            f.seek(start)
            data = f.read(end - start)
            if len(data) != end - start or not data.endswith(b"\n"):
                raise ValueError(f"{path}: no line at bytes {start}..{end}, where its offsets say; rebuild it")
            out.append(data)
    return out


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def write_json(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_dropped(out_dir: Path, dropped: DroppedSample) -> None:
    """dropped.jsonl with the sample, or no such file when curate.keep_dropped is 0 (the artifact's files are
    those of a spec without the field)."""
    if dropped.per_reason:
        write_jsonl(out_dir / DROPPED_FILE, dropped.rows)
    else:
        (out_dir / DROPPED_FILE).unlink(missing_ok=True)
