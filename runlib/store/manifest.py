"""The manifest of an artifact (`artifacts/<stage>/<key>/manifest.json`): a typed model, one reader, one writer.

Every part of runlib that looks at a built artifact (the stage runner, `runlib plan`, the run report,
MLflow tracking, the stages that read their inputs' manifests) goes through `read_manifest`, so a
manifest that is not valid JSON, does not match the model, or does not verify is one clear error naming
the file and the command that rebuilds the artifact.

The file holds two more top-level fields than the model, both over the canonical JSON of everything else
(sorted keys, no spaces), added by `write_manifest` and checked by `read_manifest`:
- `manifest_xxh3_128`, a checksum (runlib.util.hashing.bytes_digest): a manifest corrupted or edited by
  hand after the build (an `eos_id`, a count, a file's digest) is an error on every read, not a silent
  change of what a stage uses. Anyone can recompute it, so it stops accidents, not a writer.
- `manifest_hmac_sha256`, an HMAC-SHA256 (RFC 2104) under the key of runlib.util.mac_key, which lives
  outside the work directory. Threat it stops: someone who can write the work directory but cannot read
  the key file rewrites an artifact's files and "reseals" its manifest (new file digests, content hash and
  checksum): the MAC no longer matches, so every read, `runlib verify` and the next stage refuse it. It
  does not stop someone who can read the key (the same user, root), nor bytes crafted to collide with a
  recorded XXH3-128 digest (not collision resistant; runlib.util.hashing) under an intact manifest.
  The other protection, the chain of `input_digests` (runlib.store.artifacts), needs no key.
A manifest written by a runlib before manifests carried a MAC is refused with the rebuild command; the
stages' versions (runlib.graph.registry, 4 and up) changed with it, so a fresh build never
meets one under its own key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from runlib.errors import UserError
from runlib.store.settings import artifacts_dir, rebuild_hint
from runlib.util.atomic import atomic_file
from runlib.util.hashing import bytes_digest, hmac_sha256, macs_equal
from runlib.util.mac_key import created_here, key_path, read_key
from runlib.util.userfile import MissingFile, read_bounded

MANIFEST = "manifest.json"
CHECKSUM_FIELD = "manifest_xxh3_128"
MAC_FIELD = "manifest_hmac_sha256"
MAX_MANIFEST_BYTES = 16 << 20
"""A manifest lists an artifact's files and counts (kilobytes); past this it is not one of runlib's."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Timings(_Model):
    started_at: float
    """Unix time the build started."""

    wall_seconds: float
    """Seconds the build took (the stage function, hashing the outputs included)."""


class OutputFile(_Model):
    xxh3_128: str
    """Digest of the file's bytes, 'xxh3_128:<32 hex digits>' (runlib.util.hashing.file_digest)."""

    bytes: int
    """Size of the file."""


class InputDigests(_Model):
    """What a stage read of one input artifact, recorded when it was built (after verifying that input)."""

    stage: str
    """The input's stage (its artifact folder)."""

    key: str
    """The input's key."""

    content_hash: str
    """The input's content hash when it was read."""

    files: dict[str, str]
    """The input's output files (relative path -> XXH3-128 digest) when it was read."""


class Manifest(_Model):
    """What a built artifact is: which stage instance built it from which config and inputs, and what it holds."""

    stage: str
    """Stage kind (= rule name = artifact folder), e.g. curate_shard."""

    instance: str
    """Human name of the stage instance, e.g. 'curate_shard code/0'."""

    key: str
    """The artifact's key (its folder name): a hash of stage, code version, config and input keys."""

    config: dict[str, Any]
    """The stage config the artifact was built from (StageConfig.model_dump(mode='json'))."""

    inputs: dict[str, str]
    """Input role -> the input artifact's key."""

    input_digests: dict[str, InputDigests] = {}
    """Input role -> the digests of that input's files when this artifact was built from it: the chain that
    `runlib verify` and each stage check against the input's manifest now (runlib.store.artifacts).
    Every stage run records it; empty only for manifests a test or benchmark writes by hand."""

    counts: dict[str, Any]
    """The stage's headline numbers (documents, tokens, losses)."""

    details: dict[str, Any]
    """Everything else the stage returned about what it wrote."""

    timings: Timings
    """When and how long."""

    libraries: dict[str, str]
    """Versions of Python, runlib and the libraries the build loaded."""

    outputs: dict[str, OutputFile]
    """Every output file (relative path) with its digest and size; the manifest itself excluded."""

    content_hash: str
    """SHA-256 over the sorted (path, xxh3_128 digest) list of the outputs: equal for byte-equal rebuilds."""


def manifest_path(directory: str | Path) -> Path:
    return Path(directory) / MANIFEST


def _canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def rebuild_advice(directory: Path, spec_path: str | None = None) -> str:
    """How to rebuild the artifact in `directory`: the commands when it is in this work directory."""
    directory = Path(directory)
    try:
        inside = directory.resolve().parent.parent == artifacts_dir().resolve()
    except OSError:
        inside = False
    if inside:
        return f"rebuild it with: {rebuild_hint(directory.parent.name, directory.name, spec_path)}"
    return "delete the artifact folder to rebuild it"


class ManifestError(UserError):
    """A manifest that is missing, unreadable, invalid or edited: `problem` says which, the message also
    names the file and how to rebuild the artifact."""

    def __init__(self, path: Path, problem: str, advice: bool = True):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" + (f"; {rebuild_advice(path.parent)}" if advice else ""))


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of the artifact in `directory`; ManifestError (a UserError) naming the file if it is
    missing, invalid, does not match its own checksum (edited or corrupted after the build) or its MAC
    (rewritten without the key, or written under another key)."""
    path = manifest_path(directory)
    # a manifest replaced by a FIFO or a link to /dev/zero hung every reader; one of nested arrays ended
    # in json's RecursionError: regular files only, bounded, any nesting an error
    try:
        raw = read_bounded(path, MAX_MANIFEST_BYTES, "the artifact's manifest")
    except MissingFile:
        raise ManifestError(path, "no manifest (the artifact is not built)", advice=False) from None
    except UserError as exc:
        raise ManifestError(path, f"not a readable manifest ({exc})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(path, f"over {MAX_MANIFEST_BYTES >> 20} MiB: not a manifest runlib wrote")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ManifestError(path, f"not a readable JSON manifest ({str(exc)[:200] or 'nested too deeply'})") from None
    checksum = data.pop(CHECKSUM_FIELD, None) if isinstance(data, dict) else None
    mac = data.pop(MAC_FIELD, None) if isinstance(data, dict) else None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise ManifestError(
            path, f"not a valid manifest ({problems}); it was written by another runlib version or edited"
        ) from None
    if checksum is None:
        raise ManifestError(path, f"no {CHECKSUM_FIELD} checksum (written by an older runlib, or edited)")
    canonical = _canonical(data)
    if checksum != bytes_digest(canonical):
        raise ManifestError(
            path, f"edited or corrupted after the build (its content does not match its {CHECKSUM_FIELD} checksum)"
        )
    if mac is None:
        raise ManifestError(
            path, f"no {MAC_FIELD} (written by a runlib before manifests were authenticated, or edited)"
        )
    if not isinstance(mac, str) or not macs_equal(mac, hmac_sha256(read_key(), canonical)):
        new_key = (
            " (created just now: the key these manifests were written under is gone)"
            if created_here(key_path())
            else ""
        )
        raise ManifestError(
            path,
            f"its {MAC_FIELD} does not match the manifest key {key_path()}{new_key}: the manifest was rewritten "
            "by someone without that key (its artifact may have been tampered with), or written under another "
            "key (another user, or a node that does not share the key file)",
        )
    return manifest


def find_manifest(directory: str | Path) -> Manifest | None:
    """read_manifest, or None when the artifact is not built (no manifest file)."""
    if not manifest_path(directory).exists():
        return None
    return read_manifest(directory)


def write_manifest(directory: str | Path, manifest: Manifest) -> Path:
    """Write the manifest into `directory` atomically (sorted keys, two-space indent) with its checksum
    and MAC fields; returns its path."""
    path = manifest_path(directory)
    data = json.loads(json.dumps(manifest.model_dump(mode="json"), default=str))  # as a reader will see it
    canonical = _canonical(data)
    data[CHECKSUM_FIELD] = bytes_digest(canonical)
    data[MAC_FIELD] = hmac_sha256(read_key(), canonical)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    with atomic_file(path) as tmp:  # plain permissions (mkstemp's are private)
        tmp.write_text(text + "\n", encoding="utf-8")
    return path
