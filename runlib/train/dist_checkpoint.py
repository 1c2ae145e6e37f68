"""Sharded checkpoints of a parallelised model and its optimizer, with torch.distributed.checkpoint (DCP).

    save_checkpoint(directory, model, optimizer, extra)   # every rank calls it
    extra = load_checkpoint(directory, model, optimizer)  # every rank; optimizer None: weights only
    state = full_model_state_dict(model)                  # every rank; the full tensors on rank 0
    model_sd, optim_sd = full_state_dicts(model, optimizer)        # one-file form (final.pt), rank 0
    load_full_state_dicts(model, optimizer, model_sd, optim_sd)    # every rank, into any layout

A checkpoint is a directory: DCP's files (`.metadata` and one `__<rank>_0.distcp` per rank: each rank
writes only its shards, no gathering) plus `extra.pt`, the caller's dict (step counters, RNG, data
position: anything torch.load(weights_only=True) reads back), written by rank 0. It is written to a
temporary sibling directory and renamed into place by rank 0 after every rank has finished, so a
killed job leaves either the old checkpoint or the new one, never a partial one (`is_complete`).
All ranks must see one filesystem (a shared one across nodes).

State dicts come from torch.distributed.checkpoint.state_dict.get_state_dict / set_state_dict, keyed
by parameter names without wrapper prefixes (DDP's module., FSDP's), with DTensor shards. DCP's load
reshards to whatever layout the model has now, so a checkpoint resumes on another world size, another
sharding or another tensor degree (within fp32 tolerance of the uninterrupted run, as the optimizer's
arithmetic is then split differently; bitwise on the same layout).

World size 1 without a process group works (DCP's no_dist mode): the same directory layout, loadable
by any layout later, and the other way round.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

EXTRA = "extra.pt"
STEP_RE = re.compile(r"^step-(\d+)$")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _broadcast_flag(value: bool) -> bool:
    if not _distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


@contextlib.contextmanager
def _single_process_quietly():
    """DCP warns on every save/load without a process group; one process is an intended layout here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")
        yield


def is_complete(directory: Path) -> bool:
    """A finished checkpoint: DCP's metadata and the caller's extra are both there."""
    return (directory / ".metadata").is_file() and (directory / EXTRA).is_file()


def save_checkpoint(directory: Path | str, model, optimizer, extra: dict[str, Any]) -> None:
    """Write model + optimizer (sharded, every rank) and extra (rank 0) to directory, atomically."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a killed save's leftovers
        tmp.mkdir(parents=True)
    _barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    with _single_process_quietly():
        dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
    if _rank() == 0:
        torch.save(extra, tmp / EXTRA)
        old = directory.with_name(f".{directory.name}.old")
        if directory.exists():  # rename cannot replace a non-empty directory: move the old one aside first
            shutil.rmtree(old, ignore_errors=True)
            os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
    _barrier()


def load_checkpoint(directory: Path | str, model, optimizer=None) -> dict[str, Any]:
    """Load model (and optimizer, when given) from directory into their current layout; return extra."""
    directory = Path(directory)
    if not _broadcast_flag(is_complete(directory)):
        raise FileNotFoundError(f"{directory}: not a complete checkpoint (no .metadata or {EXTRA})")
    if optimizer is None:
        model_state = get_model_state_dict(model)
        with _single_process_quietly():
            dcp.load({"model": model_state}, checkpoint_id=str(directory))
        set_model_state_dict(model, model_state)
    else:
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optim_state}
        with _single_process_quietly():
            dcp.load(state, checkpoint_id=str(directory))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return torch.load(directory / EXTRA, map_location="cpu", weights_only=True)


def full_model_state_dict(model) -> dict[str, torch.Tensor]:
    """The whole model's plain tensors (gathered from every shard) on rank 0, {} on the other ranks.

    Every rank must call it (it gathers); the keys are those of the unwrapped model's state_dict."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return state if _rank() == 0 else {}


def full_state_dicts(model, optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) state dicts of whole plain tensors on rank 0 ({} elsewhere), for one file.

    The optimizer's is keyed by parameter name (DCP's format), not torch's integer indices: load it
    with load_full_state_dicts, not optimizer.load_state_dict. Every rank must call it."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return (model_state, optim_state) if _rank() == 0 else ({}, {})


def load_full_state_dicts(model, optimizer, model_state: dict[str, Any], optim_state: dict[str, Any] | None) -> None:
    """Load whole state dicts (full_state_dicts' output, read on every rank) into any layout.

    optimizer None or optim_state None: the weights only (e.g. the previous phase's final weights)."""
    options = StateDictOptions(full_state_dict=True)
    if optimizer is None or optim_state is None:
        set_model_state_dict(model, model_state, options=options)
    else:
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state, options=options)


def latest_checkpoint(directory: Path | str, at_most_step: int | None = None) -> Path | None:
    """The complete step-<n> checkpoint of highest n (n <= at_most_step, when given) under directory, or None."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    found = [
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := STEP_RE.match(p.name)) and is_complete(p) and (at_most_step is None or int(m.group(1)) <= at_most_step)
    ]
    return max(found)[1] if found else None


def prune_checkpoints(directory: Path | str, keep: int) -> None:
    """Keep the `keep` newest step-<n> checkpoints (rank 0 only)."""
    if _rank() != 0:
        return
    found = sorted((int(m.group(1)), p) for p in Path(directory).iterdir() if (m := STEP_RE.match(p.name)))
    for _, path in found[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
