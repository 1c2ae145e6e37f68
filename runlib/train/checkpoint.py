"""Checkpoints: model, optimizer, scheduler position, scaler, RNG and data position in one file,
written atomically (temporary file, then rename) and loaded with weights_only=True."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

CKPT_RE = re.compile(r"^step-(\d+)\.pt$")


def rng_state() -> dict[str, Any]:
    """Data order is a pure function of (seed, phase, step); torch's generator is the only RNG left."""
    return {"torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def latest(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := CKPT_RE.match(p.name))]
    return max(found)[1] if found else None


def prune(directory: Path, keep: int) -> None:
    found = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := CKPT_RE.match(p.name)))
    for _, path in found[:-keep] if keep > 0 else []:
        path.unlink(missing_ok=True)
