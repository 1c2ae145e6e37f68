"""Content-addressed artifacts: `artifacts/<stage>/<key>/` with a manifest.json, committed atomically,
verified when read.

Commit protocol (what runlib.graph.stages.run_stage does with the functions here):
1. Take the artifact's build lock (`build_lock`: fcntl.flock on `<work>/locks/<stage>/<key>.lock`). A
   second process building the same artifact (another spec sharing the stage, a `--nolock` Snakemake
   run) waits for it, then finds the artifact built. The kernel releases the lock when its holder dies,
   so a killed build never leaves a stale lock. Across the nodes of a cluster the file system must
   support it: NFS clients emulate flock with whole-file fcntl locks since Linux 2.6.12 (flock(2),
   NOTES); Lustre needs its `flock` mount option.
2. Under the lock, remove this key's temporary directories (`.tmp-<key>-<pid>`): only the lock holder
   builds, so every one left is an orphan of a killed build (`remove_orphans`).
3. Built already (its manifest exists)? Verify it cheaply (manifest checksum and file sizes), write the
   stamps (4), never rebuild. Else verify every input in full (`verify_artifact`), build into
   `.tmp-<key>-<pid>`, hash the outputs, write the manifest last (fsync'd) and rename the directory
   into place (`build_artifact`): the commit. A directory with a manifest is always a whole artifact.
4. Write the built marker and the done stamp (runlib.store.settings) atomically, outside the artifact.
   They are the only outputs Snakemake knows of, so whatever Snakemake deletes (`--rerun-incomplete`,
   the outputs of a failed job) is those, and the next run rewrites them from the committed artifact.
A kill before the rename leaves an orphan the next build removes; after it, an artifact without stamps
that the next run stamps without rebuilding.

The manifest's content hash covers the output files only (not timings), so a rebuild of an unchanged key
can be compared byte for byte. File digests are XXH3-128 (runlib.util.hashing); what verification costs
per GB is what `runlib verify` prints.

Two protections against an artifact rewritten after its build together with its manifest (a "reseal":
new file digests, content hash and checksum, so the artifact verifies against its own record):
- The chain (here, no key needed). A manifest records, in `input_digests`, the digest of every file of
  every input it was built from (each input verified in full first). `verify_artifact` (so `runlib
  verify`, and `run_stage` for a built artifact) compares them with the inputs' manifests now, and before
  a stage builds, every artifact upstream of it is checked so (`chain_problems`). Threat it stops: a reseal
  of an artifact that already has a consumer, by anyone, even with the key: the consumer's record no
  longer matches, so `runlib verify` names both and the next stage refuses to run. It cannot see a reseal
  of an artifact nothing has read yet. Files that hold measurements of the job rather than its result
  (MEASUREMENT_FILES: a phase's throughput) are left out, so a rebuild of a deleted artifact keeps its
  consumers valid when its result is equal.
- The MAC (runlib.store.manifest): each manifest carries an HMAC-SHA256 under a key kept outside the
  work directory (runlib.util.mac_key). Threat it stops: a reseal by anyone who can write the work
  directory but not read the key file, including of an artifact nothing has read yet.
Neither stops someone who holds the key and rewrites a whole chain, nor bytes crafted to collide with a
recorded XXH3-128 digest (not collision resistant) under intact manifests.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib import __version__
from runlib.errors import UserError
from runlib.store.manifest import (
    MANIFEST,
    InputDigests,
    Manifest,
    ManifestError,
    find_manifest,
    read_manifest,
    rebuild_advice,
    write_manifest,
)
from runlib.store.settings import lock_file
from runlib.util.hashing import file_digest

if TYPE_CHECKING:
    from runlib.store.node import Addressed, StageNode

__all__ = [
    "MANIFEST",
    "ArtifactError",
    "Manifest",
    "Verification",
    "build_artifact",
    "build_lock",
    "chain_problems",
    "input_record",
    "find_manifest",
    "is_built",
    "read_manifest",
    "remove_orphans",
    "verify_artifact",
    "verify_node",
]
TRACKED_LIBRARIES = (
    "pydantic",
    "tokenizers",
    "numpy",
    "pyarrow",
    "pandera",
    "torch",
    "accelerate",
    "mlflow",
    "snakemake",
)
TMP_PREFIX = ".tmp-"
# Output files that record measurements of the job that built them (throughput, memory, wall times), not its
# result: they differ between two builds of one key (tests/workflow/test_faults.py MEASURED), and no stage
# reads them, so the chain does not compare them.
MEASUREMENT_FILES: dict[str, frozenset[str]] = {"train_phase": frozenset({"metrics.jsonl", "run.json"})}


def output_digests(directory: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        out[path.relative_to(directory).as_posix()] = {"xxh3_128": file_digest(path), "bytes": path.stat().st_size}
    return out


def content_hash(outputs: dict[str, dict[str, Any]]) -> str:
    listing = "\n".join(f"{name} {info['xxh3_128']}" for name, info in sorted(outputs.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "runlib": __version__}
    for name in TRACKED_LIBRARIES:
        if name in sys.modules or name in ("tokenizers", "numpy"):
            try:
                versions[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                pass
    return versions


def input_record(stage: str, manifest: Manifest) -> InputDigests:
    """What a consumer records of an input it read (after verifying it): its files' digests."""
    return InputDigests(
        stage=stage,
        key=manifest.key,
        content_hash=manifest.content_hash,
        files={name: info.xxh3_128 for name, info in manifest.outputs.items()},
    )


def chain_problems(directory: Path, manifest: Manifest) -> list[str]:
    """Where the inputs' manifests now differ from what the artifact in `directory` recorded reading (its
    `input_digests`), one line each naming the input, the file and the fix. An input that is not built
    (deleted to be rebuilt) is not compared; one whose manifest does not read is a problem."""
    problems = []
    for role, read in sorted(manifest.input_digests.items()):
        where = Path(directory).parent.parent / read.stage / read.key
        name = f"input {role} ({read.stage}/{read.key})"
        if not (where / MANIFEST).exists():
            continue
        try:
            now = read_manifest(where)
        except ManifestError as exc:
            problems.append(f"{name}: what this artifact was built from cannot be checked: {exc.problem}")
            continue
        skip = MEASUREMENT_FILES.get(read.stage, frozenset())
        current = {n: info.xxh3_128 for n, info in now.outputs.items() if n not in skip}
        recorded = {n: digest for n, digest in read.files.items() if n not in skip}
        changed = sorted(n for n in current.keys() | recorded.keys() if current.get(n) != recorded.get(n))
        if changed:
            first = changed[0]
            what = (
                f"{first}: digest now {current.get(first, '(no such file)')}, read {recorded.get(first, '(no such file)')}"
                + (f"; and {len(changed) - 1} more file(s)" if len(changed) > 1 else "")
            )
            problems.append(
                f"{name}: not what this artifact was built from ({what}); the input was rewritten and its "
                f"manifest resealed after this artifact read it, or rebuilt with other bytes: rebuild that "
                f"input (rm -r {shlex.quote(str(where))}), then this artifact"
            )
    return problems


def is_built(node: Addressed) -> bool:
    return node.manifest_path.exists()


# ------------------------------------------------------------------------------------------ verification


@dataclass(frozen=True)
class Verification:
    """What checking one artifact against its manifest found."""

    directory: Path
    manifest: Manifest | None  # None when the manifest itself does not read or verify
    problems: tuple[str, ...]  # one line each, naming the file; empty when the artifact verifies
    checked_bytes: int  # bytes of the files whose size matched (hashed when full)
    seconds: float
    full: bool  # digests too, not only the manifest's checksum and the sizes

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_artifact(directory: Path, full: bool = True) -> Verification:
    """Check the artifact in `directory`: its manifest's checksum and MAC, that it is this folder's
    manifest, every output file's size and (full) XXH3-128 digest, that no file was added, and that its
    built inputs are what it recorded reading (`chain_problems`: their manifests, not their files)."""
    started = time.perf_counter()
    directory = Path(directory)

    def result(manifest: Manifest | None, problems: list[str], checked_bytes: int = 0) -> Verification:
        return Verification(directory, manifest, tuple(problems), checked_bytes, time.perf_counter() - started, full)

    try:
        manifest = read_manifest(directory)
    except ManifestError as exc:
        return result(None, [f"{MANIFEST}: {exc.problem}"])
    problems: list[str] = []
    if (manifest.stage, manifest.key) != (directory.parent.name, directory.name):
        problems.append(
            f"{MANIFEST}: it is the manifest of {manifest.stage}/{manifest.key}, not of this folder "
            f"({directory.parent.name}/{directory.name})"
        )
    checked = 0
    for name, info in sorted(manifest.outputs.items()):
        path = directory / name
        try:
            st = path.lstat()
        except FileNotFoundError:
            problems.append(f"{name}: missing")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{name}: not a regular file")
            continue
        if st.st_size != info.bytes:
            problems.append(f"{name}: {st.st_size} bytes, the manifest says {info.bytes} (truncated or rewritten)")
            continue
        checked += st.st_size
        if full:
            digest = file_digest(path)
            if digest != info.xxh3_128:
                problems.append(
                    f"{name}: its content differs from what was built (digest {digest}, the manifest says "
                    f"{info.xxh3_128})"
                )
    listed = set(manifest.outputs) | {MANIFEST}
    for path in sorted(p for p in directory.rglob("*") if not p.is_dir()):
        name = path.relative_to(directory).as_posix()
        if name not in listed:
            problems.append(f"{name}: not in the manifest (added after the build)")
    problems += chain_problems(directory, manifest)
    return result(manifest, problems, checked)


class ArtifactError(UserError):
    """An artifact that does not verify; the message names it, its files and how to rebuild it."""


def describe_failure(node: StageNode, verification: Verification, spec_path: str | None = None, limit: int = 5) -> str:
    problems = list(verification.problems)
    shown = "; ".join(problems[:limit]) + (f"; and {len(problems) - limit} more" if len(problems) > limit else "")
    return f"artifact {node.stage}/{node.key} ({node.instance}): {shown}; {rebuild_advice(node.dir, spec_path)}"


def verify_node(node: StageNode, full: bool = True, spec_path: str | None = None) -> Manifest:
    """The node's manifest once its artifact verifies; ArtifactError naming what differs otherwise (with
    the commands that rebuild it, for the spec at `spec_path`, default $RUNLIB_SPEC)."""
    verification = verify_artifact(node.dir, full=full)
    if not verification.ok:
        raise ArtifactError(describe_failure(node, verification, spec_path))
    assert verification.manifest is not None
    return verification.manifest


# ------------------------------------------------------------------------------------------ locking


@contextlib.contextmanager
def build_lock(node: Addressed, log: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the artifact's build lock (exclusive flock) for the block; waits for another holder, saying
    who it is (the holder writes its host, pid and start time into the lock file)."""
    path = lock_file(node.stage, node.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another process"
            say = log or (lambda text: print(text, file=sys.stderr, flush=True))
            say(f"{node.instance}: waiting for {holder} building it (lock {path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.ctime()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def remove_orphans(node: Addressed) -> list[Path]:
    """Remove this key's temporary build directories; call only under the build lock (then none is in use)."""
    parent = node.dir.parent
    if not parent.is_dir():
        return []
    orphans = sorted(p for p in parent.glob(f"{TMP_PREFIX}{node.key}-*") if p.is_dir())
    for orphan in orphans:
        shutil.rmtree(orphan, ignore_errors=True)
    return orphans


# ------------------------------------------------------------------------------------------ building


def build_artifact(
    node: StageNode, build: Callable[[Path], dict[str, Any]], input_digests: dict[str, InputDigests] | None = None
) -> Manifest:
    """Run `build(tmp_dir)` and commit its files as node's artifact; returns the manifest. Call under
    the node's build lock. `input_digests`: role -> what the build read of that input (`input_record` of
    its verified manifest), the chain its consumers' checks compare.

    `build` writes its files into tmp_dir and returns what the manifest should record about them
    (at least "counts"; anything else goes under "details")."""
    final = node.dir
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{TMP_PREFIX}{node.key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    started = time.time()
    try:
        result = json.loads(json.dumps(build(tmp), default=str))  # as the manifest file will hold it
        outputs = output_digests(tmp)
        manifest = Manifest.model_validate(
            {
                "stage": node.stage,
                "instance": node.instance,
                "key": node.key,
                "config": node.config.model_dump(mode="json"),
                "inputs": node.inputs,
                "input_digests": {role: d.model_dump() for role, d in (input_digests or {}).items()},
                "counts": result.get("counts", {}),
                "details": {k: v for k, v in result.items() if k != "counts"},
                "timings": {"started_at": started, "wall_seconds": round(time.time() - started, 3)},
                "libraries": library_versions(),
                "outputs": outputs,
                "content_hash": content_hash(outputs),
            }
        )
        write_manifest(tmp, manifest)
        if (final / MANIFEST).exists():  # built meanwhile by a process that did not take the lock: keep that one
            shutil.rmtree(tmp)
            return read_manifest(final)
        if final.exists():
            shutil.rmtree(final)  # leftovers without a manifest: never a committed artifact
        os.replace(tmp, final)
        return manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
