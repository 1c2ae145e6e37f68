"""Test helper: write a curated shard directory (train.jsonl, heldout.jsonl) as filter_shard does."""

import hashlib
import json
from pathlib import Path


def write_curated(directory: Path, train: list[str], heldout: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split, texts in (("train", train), ("heldout", heldout)):
        with open(directory / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i, text in enumerate(texts):
                row = {"id": f"{split}-{i}", "text": text, "sha256": hashlib.sha256(text.encode()).hexdigest()}
                f.write(json.dumps(row) + "\n")
    return directory
