"""One-file checkpoints (a phase's final.pt: whole state dicts, runlib.train.dist_checkpoint.full_state_dicts),
written atomically (temporary file, then rename) and loaded with weights_only=True. The resumable
checkpoints inside a phase are sharded: runlib.train.dist_checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)
