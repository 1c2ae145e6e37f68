"""One-file checkpoints (a phase's final.pt: whole state dicts, runlib.train.dist_checkpoint.full_state_dicts),
written atomically (temporary file, then rename) and loaded with weights_only=True. The resumable
checkpoints inside a phase are sharded: runlib.train.dist_checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from runlib.util.atomic import atomic_file


def save(path: Path, payload: dict[str, Any]) -> None:
    # to a file object: torch.save names the zip's root folder after a path's file name, and the temporary
    # name holds the process id, so the same state would give other bytes in every process
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        torch.save(payload, f)


def load(path: Path) -> dict[str, Any]:
    saved: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return saved
