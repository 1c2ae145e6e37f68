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

Verified: after every rank has written, and before the rename, rank 0 writes `digests.json`: the size and
XXH3-128 digest (runlib.util.hashing) of every file of the checkpoint. Each rank digests the files it wrote
(DCP's `__<rank>_*` names, read back from its own page cache); rank 0 those of no rank (.metadata,
extra.pt, any other name). `latest_checkpoint` (resume, and a spike's rollback) takes the newest step
directory whose files all match (sizes first, then digests, split over the ranks), warning on stderr, one
line each, about every newer one it skips (truncated, flipped bytes, a missing digests.json): a corrupt
newest checkpoint costs the steps since the one before it, never every retry.

Planted checkpoints. DCP's FileSystemReader reads `.metadata` with plain pickle.load
(torch/distributed/checkpoint/filesystem.py, FileSystemReader.read_metadata, torch 2.13), so a checkpoint
directory planted by anyone who can write the scratch directory ran code on resume. Two defences:
- Authentication, before anything is unpickled: `digests.json` carries an HMAC-SHA256 (`hmac_sha256`) under
  the manifest key (runlib.util.mac_key, outside the work directory), and records `.metadata` by SHA-256 as
  well (XXH3 is not collision resistant). A checkpoint whose digests.json has no MAC or another one, or
  whose .metadata differs, is skipped like a corrupt one. Stops whoever cannot read the key file.
- An allow-list unpickler (`MetadataUnpickler`) for `.metadata`, used by every load (`_AllowListReader`)
  and by the verification: it admits only the classes DCP's metadata holds (metadata.py's dataclasses,
  filesystem.py's _StorageInfo, torch.Size, dtypes, layouts, pathlib paths) and refuses any other global
  (os.system, builtins.eval, ...) with UnsafeCheckpointError naming the file and the global, before it is
  called. Stops code execution even from a checkpoint that verifies (a key holder, a swap after the check).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import re
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from runlib.errors import UserError
from runlib.util.atomic import replace_dir
from runlib.util.hashing import ALGORITHM, file_digest, file_sha256, hmac_sha256, macs_equal
from runlib.util.mac_key import key_path, read_key

EXTRA = "extra.pt"
DIGESTS = "digests.json"
METADATA = ".metadata"  # DCP's metadata file (filesystem.py _metadata_fn), a pickle
MAC_FIELD = "hmac_sha256"
STEP_RE = re.compile(r"^step-(\d+)$")
RANK_FILE_RE = re.compile(r"^__(\d+)_")  # DCP's FileSystemWriter: __<rank>_<n>.distcp, written by that rank


# What DCP's .metadata pickles (torch 2.13: metadata.py Metadata and the dataclasses its fields hold,
# TensorProperties' _MEM_FORMAT_ENCODING; filesystem.py _StorageInfo in storage_data; torch.Size for sizes
# and offsets; torch.serialization._get_layout, which pickling a torch.layout calls; StorageMeta's
# checkpoint_id, a path). Dtypes, layouts and memory formats are admitted by their type (_TORCH_VALUES).
METADATA_GLOBALS: dict[str, frozenset[str]] = {
    "torch.distributed.checkpoint.metadata": frozenset(
        {
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        }
    ),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),
    "torch": frozenset({"Size"}),
    "pathlib": frozenset({"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),
    "pathlib._local": frozenset({"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"}),
    "collections": frozenset({"OrderedDict"}),
    "builtins": frozenset({"set", "frozenset", "slice", "complex"}),
}
_TORCH_VALUES = (torch.dtype, torch.layout, torch.memory_format)


class UnsafeCheckpointError(UserError):
    """A checkpoint's .metadata names a global that DCP metadata never holds (a planted checkpoint)."""


class MetadataUnpickler(pickle.Unpickler):
    """pickle.Unpickler whose find_class admits METADATA_GLOBALS and torch's dtypes/layouts/memory formats only,
    so unpickling a .metadata cannot call anything else (pickle's documented way to restrict globals:
    https://docs.python.org/3/library/pickle.html#restricting-globals)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in METADATA_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), _TORCH_VALUES):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not one that DCP checkpoint metadata holds")


def read_metadata(path: Path) -> Metadata:
    """A .metadata file through MetadataUnpickler; UnsafeCheckpointError naming the file when it refers to
    anything else, or is not DCP metadata."""
    try:
        with open(path, "rb") as f:
            metadata = MetadataUnpickler(f).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise UnsafeCheckpointError(
            f"{path}: refused to unpickle ({exc}): not checkpoint metadata runlib wrote (planted or corrupt); "
            f"delete the checkpoint directory {path.parent}"
        ) from None
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpointError(
            f"{path}: holds a {type(metadata).__name__}, not DCP Metadata; delete the checkpoint directory {path.parent}"
        )
    return metadata


class _AllowListReader(FileSystemReader):
    """DCP's FileSystemReader with read_metadata through MetadataUnpickler (the rest of what the original does:
    a StorageMeta with this load's id)."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        metadata = read_metadata(Path(self.path) / (METADATA if rank is None else f"__{rank}{METADATA}"))
        storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage_meta.load_id = self.load_id
        metadata.storage_meta = storage_meta
        return metadata


def _canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _distributed() else 0


def _barrier() -> None:
    if _distributed():
        dist.barrier()


def _world() -> int:
    return dist.get_world_size() if _distributed() else 1


def _broadcast_flag(value: bool) -> bool:
    return bool(_broadcast(value))


def _broadcast(value: Any) -> Any:
    """Rank 0's value on every rank (so every rank takes the same branch after it)."""
    if not _distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gather_merged(part: dict[str, Any]) -> dict[str, Any]:
    """The union of every rank's dict, on every rank."""
    if not _distributed():
        return dict(part)
    parts: list[Any] = [None] * _world()
    dist.all_gather_object(parts, part)
    return {k: v for p in parts for k, v in p.items()}


@contextlib.contextmanager
def _single_process_quietly() -> Iterator[None]:
    """DCP warns on every save/load without a process group; one process is an intended layout here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")
        yield


def is_complete(directory: Path) -> bool:
    """A finished checkpoint: DCP's metadata and the caller's extra are both there."""
    return (directory / METADATA).is_file() and (directory / EXTRA).is_file()


def _checkpoint_files(directory: Path) -> list[str]:
    """Every file of a checkpoint directory but the digest file, as sorted relative paths."""
    return sorted(
        p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file() and p.name != DIGESTS
    )


def _writer_rank(name: str, world: int) -> int:
    m = RANK_FILE_RE.match(name)
    return int(m.group(1)) if m and int(m.group(1)) < world else 0


def _file_entry(path: Path) -> dict[str, Any]:
    entry = {"bytes": path.stat().st_size, "digest": file_digest(path)}
    if path.name == METADATA:  # unpickled on load: by a digest a writer cannot collide with too
        entry["sha256"] = file_sha256(path)
    return entry


def write_digests(directory: Path) -> None:
    """Every rank: digest the files it wrote; rank 0 writes DIGESTS with all of them. After every rank wrote."""
    _barrier()
    names = _broadcast(_checkpoint_files(directory) if _rank() == 0 else None)
    rank, world = _rank(), _world()
    mine = {n: _file_entry(directory / n) for n in names if _writer_rank(n, world) == rank}
    entries = _gather_merged(mine)
    if _rank() == 0:
        record: dict[str, Any] = {"algorithm": ALGORITHM, "files": {n: entries[n] for n in names}}
        record[MAC_FIELD] = hmac_sha256(read_key(), _canonical(record))
        (directory / DIGESTS).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def verify_checkpoint(directory: Path | str) -> str | None:
    """None when every file of the checkpoint matches DIGESTS, else what is wrong (the same on every rank).

    Rank 0 reads DIGESTS and compares the sizes (a truncated file costs no read); the digests are then
    split over the ranks."""
    directory = Path(directory)
    recorded: tuple[str | None, dict[str, Any]] = _broadcast(_recorded_files(directory) if _rank() == 0 else None)
    problem, files = recorded
    if problem is not None:
        return problem
    rank, world = _rank(), _world()
    wrong: dict[str, Any] = {}
    for i, name in enumerate(sorted(files)):
        if i % world == rank:
            try:
                found = file_digest(directory / name)
            except OSError as exc:
                found = f"unreadable ({exc.strerror or exc})"
            if found != files[name]["digest"]:
                wrong[name] = found
    wrong = _gather_merged(wrong)
    if wrong:
        name = sorted(wrong)[0]
        more = f" (and {len(wrong) - 1} more files)" if len(wrong) > 1 else ""
        return f"{name}: content digest {wrong[name]}, recorded {files[name]['digest']}{more}"
    return None


def _recorded_files(directory: Path) -> tuple[str | None, dict[str, Any]]:
    """(problem, files) from DIGESTS (its MAC first), the files' sizes, .metadata's SHA-256 and its parse
    through the allow-list (rank 0)."""
    if not is_complete(directory):
        return f"incomplete (no {METADATA} or {EXTRA})", {}
    try:
        record = json.loads((directory / DIGESTS).read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        mac = record.pop(MAC_FIELD, None)
        if mac is None:
            return (
                f"{DIGESTS} has no {MAC_FIELD} (written by a runlib before checkpoints were authenticated, or planted)",
                {},
            )
        if not isinstance(mac, str) or not macs_equal(mac, hmac_sha256(read_key(), _canonical(record))):
            return (
                f"{DIGESTS} does not match the manifest key {key_path()} (planted or rewritten by someone without "
                "the key, or written under another key)"
            ), {}
        files = record["files"]
        if record.get("algorithm") != ALGORITHM or not isinstance(files, dict):
            raise ValueError(f"algorithm {record.get('algorithm')!r}, expected {ALGORITHM!r}")
        for name, entry in files.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and "digest" in entry):
                raise ValueError(f"bad entry for {name}")
    except FileNotFoundError:
        return f"no {DIGESTS} (unverifiable: written before checkpoints were verified)", {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{DIGESTS} unreadable ({exc})", {}
    for required in (METADATA, EXTRA):
        if required not in files:
            return f"{DIGESTS} does not list {required}", {}
    for name, entry in sorted(files.items()):
        path = directory / name
        if not path.is_file():
            return f"{name}: missing", {}
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{name}: {size} bytes, recorded {entry['bytes']} (truncated or overwritten)", {}
    sha = file_sha256(directory / METADATA)
    if sha != files[METADATA].get("sha256"):
        return f"{METADATA}: SHA-256 {sha}, recorded {files[METADATA].get('sha256')}", {}
    try:
        read_metadata(directory / METADATA)
    except UnsafeCheckpointError as exc:
        return str(exc), {}
    return None, files


def _options(staged: bool) -> StateDictOptions:
    """A pipeline stage's optimizer state flattened to one entry per parameter and field: the stages hold
    other parameters in their param groups, which DCP would otherwise save once, from one rank
    (torchtitan's OptimizersContainer does the same). Other layouts keep the nested form they always had."""
    return StateDictOptions(flatten_optimizer_state_dict=staged)


@dataclass
class PendingSave:
    """A checkpoint whose shards are being written in the background (save_checkpoint with a `background`
    writer): `commit()`, on every rank, waits for the write, then digests and renames it into place as a
    blocking save does. Until then the directory does not exist, so a kill leaves the older checkpoints."""

    future: Future[None]
    tmp: Path
    directory: Path

    def commit(self) -> None:
        self.future.result()  # the write's own error, if it failed
        write_digests(self.tmp)
        if _rank() == 0:
            replace_dir(self.tmp, self.directory)
        _barrier()


@dataclass
class BackgroundWriter:
    """One writer thread and its own process group (None on one process), so that DCP's collectives while a
    checkpoint is written never interleave with training's on the default group (torch's async_save takes a
    separate gloo group for the same reason: torch/distributed/checkpoint/state_dict_saver.py, async_save)."""

    executor: ThreadPoolExecutor
    group: Any

    @classmethod
    def start(cls) -> BackgroundWriter:
        group = dist.new_group(backend="gloo") if _distributed() else None  # every rank, in the same order
        return cls(ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer"), group)


def _staged_copy(state: dict[str, Any]) -> Any:
    """The state dict copied to host memory (DTensors keep their layout), as torch's async_save stages it
    (torch.distributed.checkpoint.staging.DefaultStager, synchronous, unpinned): training may change the
    live tensors while the copy is written, and a GPU's copy must not take its memory."""
    stager = DefaultStager(StagingOptions(False, False, False, False))
    try:
        return stager.stage(state)
    finally:
        stager.close()


def save_checkpoint(
    directory: Path | str,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, Any],
    staged: bool = False,
    background: BackgroundWriter | None = None,
) -> PendingSave | None:
    """Write model + optimizer (sharded, every rank), extra (rank 0) and the digests to directory, atomically.
    staged: `model` is this rank's pipeline stage (load it with staged as well). With a `background` writer
    (checkpoint.async_save) the state is copied in memory and its shards written by the writer's thread: the
    returned PendingSave's commit() finishes the save (before the next one, a rollback or the phase's end)."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a killed save's leftovers
        tmp.mkdir(parents=True)
    _barrier()
    model_state, optim_state = get_state_dict(model, optimizer, options=_options(staged))
    if _rank() == 0:
        torch.save(extra, tmp / EXTRA)
    if background is not None:
        state = _staged_copy({"model": model_state, "optimizer": optim_state})

        def write() -> None:
            with _single_process_quietly():
                dcp_save(state, checkpoint_id=str(tmp), process_group=background.group)

        return PendingSave(background.executor.submit(write), tmp, directory)
    with _single_process_quietly():
        dcp_save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(tmp))
    write_digests(tmp)  # after every rank wrote (its barrier), before the rename
    if _rank() == 0:
        replace_dir(tmp, directory)
    _barrier()
    return None


def load_checkpoint(
    directory: Path | str, model: nn.Module, optimizer: torch.optim.Optimizer | None = None, staged: bool = False
) -> dict[str, Any]:
    """Load model (and optimizer, when given) from directory into their current layout; return extra.

    .metadata is read through the allow-list unpickler (UnsafeCheckpointError for anything else); extra.pt
    with torch.load(weights_only=True). Call it on what latest_checkpoint returned (verified)."""
    directory = Path(directory)
    if not _broadcast_flag(is_complete(directory)):
        raise FileNotFoundError(f"{directory}: not a complete checkpoint (no {METADATA} or {EXTRA})")
    read_metadata(directory / METADATA)  # every rank: a refusal here is one clear error, not DCP's wrapped one
    reader = _AllowListReader(directory)  # never plain pickle on .metadata, verified or not
    if optimizer is None:
        model_state = get_model_state_dict(model)
        with _single_process_quietly():
            dcp_load({"model": model_state}, checkpoint_id=str(directory), storage_reader=reader)
        set_model_state_dict(model, model_state)
    else:
        options = _options(staged)
        model_state, optim_state = get_state_dict(model, optimizer, options=options)
        state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
        with _single_process_quietly():
            dcp_load(state, checkpoint_id=str(directory), storage_reader=reader)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=options
        )
    extra: dict[str, Any] = torch.load(directory / EXTRA, map_location="cpu", weights_only=True)
    return extra


def full_model_state_dict(model: nn.Module) -> dict[str, Any]:
    """The whole model's plain tensors (gathered from every shard) on rank 0, {} on the other ranks.

    Every rank must call it (it gathers); the keys are those of the unwrapped model's state_dict."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return state if _rank() == 0 else {}


def full_state_dicts(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    pipeline_group: dist.ProcessGroup | None = None,
    optimizer_alias: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) state dicts of whole plain tensors on rank 0 ({} elsewhere), for one file.

    The optimizer's is keyed by parameter name (DCP's format), not torch's integer indices: load it
    with load_full_state_dicts, not optimizer.load_state_dict. Every rank must call it. Under pipeline
    parallelism `model` is this rank's stage: every stage's whole tensors are gathered on its ranks (each
    holds the stage's whole state for the moment) and sent over the pipeline group to rank 0, where
    they are merged (the stages' parameter names do not overlap: runlib.model.pipeline; `optimizer_alias`:
    a stage's copy of a tied parameter whose state the whole model keeps under the tie's name, left out)."""
    if pipeline_group is None:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_state, optim_state = get_state_dict(model, optimizer, options=options)
        return (model_state, optim_state) if _rank() == 0 else ({}, {})
    model_state, optim_tree = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    optim_dict: dict[str, Any] = dict(optim_tree)
    if optimizer_alias:  # the first stage's state of the tied matrix stands for both copies
        groups: list[dict[str, Any]] = list(optim_dict.get("param_groups", []))
        optim_dict = {
            "state": {k: v for k, v in dict(optim_dict.get("state", {})).items() if k not in optimizer_alias},
            "param_groups": [{**g, "params": [p for p in g["params"] if p not in optimizer_alias]} for g in groups],
        }
    mine = _to_cpu({"model": model_state, "optimizer": optim_dict})
    first = dist.get_global_rank(pipeline_group, 0)
    parts: list[Any] | None = [None] * dist.get_world_size(pipeline_group) if _rank() == first else None
    dist.gather_object(mine, parts, dst=first, group=pipeline_group)
    if _rank() != 0 or parts is None:
        return {}, {}
    merged_model = {k: v for part in parts for k, v in part["model"].items()}
    merged_optim = {
        "state": {k: v for part in parts for k, v in part["optimizer"].get("state", {}).items()},
        "param_groups": _merge_param_groups([part["optimizer"].get("param_groups", []) for part in parts]),
    }
    return merged_model, merged_optim


def renamed_optimizer_state(optim_state: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """A name-keyed optimizer state with each parameter in `names` (old -> new) renamed, kept under the old
    name too (a tied matrix: the whole model's one state, the last pipeline stage's copy)."""
    state = dict(optim_state.get("state", {}))
    for old, new in names.items():
        if old in state:
            state[new] = state[old]
    groups = [
        {**g, "params": list(g["params"]) + [names[p] for p in g["params"] if p in names]}
        for g in optim_state.get("param_groups", [])
    ]
    return {"state": state, "param_groups": groups}


def _to_cpu(tree: Any) -> Any:
    """Tensors of a nested dict/list on the CPU (plain tensors: a full state dict's)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_to_cpu(v) for v in tree]
    return tree


def _merge_param_groups(stages: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The stages' optimizer param groups as one optimizer's: group i's parameters of every stage (each stage
    builds the same groups, runlib.train.optim, over its own parameters)."""
    merged: list[dict[str, Any]] = []
    for groups in stages:
        for i, group in enumerate(groups):
            if i == len(merged):
                merged.append({**group, "params": list(group["params"])})
            else:
                merged[i]["params"] += list(group["params"])
    return merged


def _own_part(
    module: nn.Module, model_state: dict[str, Any], optim_state: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The entries of whole state dicts that `module` holds (a pipeline stage holds some of the model's)."""
    names = set(get_model_state_dict(module).keys())  # unwrapped names (DDP's module. prefix dropped)
    if names >= set(model_state):
        return model_state, optim_state
    model_part = {k: v for k, v in model_state.items() if k in names}
    if optim_state is None:
        return model_part, None
    groups = [{**g, "params": [p for p in g["params"] if p in names]} for g in optim_state.get("param_groups", [])]
    state = {k: v for k, v in optim_state.get("state", {}).items() if k in names}
    return model_part, {"state": state, "param_groups": groups}


def load_full_state_dicts(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    model_state: dict[str, Any],
    optim_state: dict[str, Any] | None,
) -> None:
    """Load whole state dicts (full_state_dicts' output, read on every rank) into any layout.

    optimizer None or optim_state None: the weights only (e.g. the previous phase's final weights)."""
    options = StateDictOptions(full_state_dict=True)
    model_state, optim_state = _own_part(model, model_state, optim_state)
    if optimizer is None or optim_state is None:
        set_model_state_dict(model, model_state, options=options)
    else:
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state, options=options)


def latest_checkpoint(directory: Path | str, at_most_step: int | None = None) -> Path | None:
    """The verified step-<n> checkpoint of highest n (n <= at_most_step, when given) under directory, or None.

    Every rank calls it (the verification is split over them) and gets the same answer. Each newer step
    directory that fails verification is skipped with one line on stderr (rank 0)."""
    directory = Path(directory)

    def candidates() -> list[tuple[int, str]]:
        if not directory.is_dir():
            return []
        found = [(int(m.group(1)), p.name) for p in directory.iterdir() if (m := STEP_RE.match(p.name))]
        return sorted((n, name) for n, name in found if at_most_step is None or n <= at_most_step)

    steps: list[tuple[int, str]] = _broadcast(candidates() if _rank() == 0 else None)
    for i in range(len(steps) - 1, -1, -1):
        path = directory / steps[i][1]
        problem = verify_checkpoint(path)
        if problem is None:
            return path
        if _rank() == 0:
            then = "trying the one before it" if i > 0 else "no older one"
            print(f"runlib: skipping corrupt checkpoint {path}: {problem}; {then}", file=sys.stderr, flush=True)
    return None


def prune_checkpoints(directory: Path | str, keep: int) -> None:
    """Keep the `keep` newest step-<n> checkpoints (rank 0 only)."""
    if _rank() != 0:
        return
    found = sorted((int(m.group(1)), p) for p in Path(directory).iterdir() if (m := STEP_RE.match(p.name)))
    for _, path in found[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
