"""Reading JSON-lines files written by the stages (metrics.jsonl, curated documents)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl file; lines that are not one are skipped; [] when there is no file."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, a 5,000-digit integer, or nesting past the stack
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
