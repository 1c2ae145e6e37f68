"""The secret key that authenticates manifests and checkpoint digests (HMAC-SHA256, runlib.util.hashing.hmac_sha256).

It lives outside the work directory, so that whoever can write the work directory (another job, another
user with group write, a compromised tool that rewrites files there) cannot recompute a manifest's MAC
after rewriting an artifact: `RUNLIB_MANIFEST_KEY_FILE`, default `$XDG_CONFIG_HOME/runlib/manifest.key`
(`~/.config/runlib/manifest.key`). It is created on first use: 32 bytes of `secrets.token_bytes`, mode
0600, in a 0700 folder. Every process that builds or reads artifacts of one work directory must read the
same key: on a cluster, a home directory shared by the nodes does it; otherwise point
RUNLIB_MANIFEST_KEY_FILE at one shared private file.

Creation is race-free for any number of processes starting at once (pytest-xdist workers, the ranks of a
job, two Snakemake runs): the key is written and fsync'd under a private temporary name and published with
link(2), which fails when the name exists, so a reader sees no key file or a whole one, and every process
reads the one that won.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from runlib.errors import UserError

KEY_FILE_ENV = "RUNLIB_MANIFEST_KEY_FILE"
KEY_BYTES = 32
MAX_KEY_BYTES = 4096  # a key file is read whole: anything larger is not a key file
_CREATED: set[Path] = set()  # key files this process created (a MAC mismatch then means the old key is gone)


def key_path() -> Path:
    """RUNLIB_MANIFEST_KEY_FILE, default $XDG_CONFIG_HOME/runlib/manifest.key (~/.config/runlib/manifest.key)."""
    explicit = os.environ.get(KEY_FILE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "runlib" / "manifest.key"


class KeyFileError(UserError):
    """The key file cannot be created or read; the message names it and the fix."""

    def __init__(self, path: Path, problem: str, fix: str):
        super().__init__(f"{path}: manifest key file {problem}; {fix} (or set {KEY_FILE_ENV} to another file)")


def _create(path: Path) -> None:
    """Publish a new random key at `path` unless one exists (race-free: write a private file, link it)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(path, f"cannot be created ({exc.strerror or exc})", "make its folder writable") from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic, and fails if another process published its key first
            _CREATED.add(path)
        except FileExistsError:
            pass
    except OSError as exc:
        raise KeyFileError(path, f"cannot be created ({exc.strerror or exc})", "make its folder writable") from None
    finally:
        tmp.unlink(missing_ok=True)


def created_here(path: Path) -> bool:
    """Whether this process created the key file at `path` (it did not exist before)."""
    return path in _CREATED


def read_key(create: bool = True) -> bytes:
    """The key's bytes; created first when missing and `create`. KeyFileError (a UserError, exit 2) when it
    is not a regular file, is accessible to others or writable by the group, is shorter than 32 bytes or
    cannot be read. Group read is allowed, for users who share a work directory (and so trust each other)."""
    path = key_path()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            raise KeyFileError(path, "does not exist", "run a stage once to create it") from None
        _create(path)
        st = os.stat(path)
    except OSError as exc:
        raise KeyFileError(path, f"cannot be read ({exc.strerror or exc})", "make it readable by you") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever
        raise KeyFileError(path, "is not a regular file", "replace it with a file of 32 random bytes")
    if st.st_mode & 0o027:  # others: no access; the group may read it (users sharing a work directory)
        raise KeyFileError(
            path,
            f"is accessible to other users (mode {stat.S_IMODE(st.st_mode):04o}): they could forge manifests",
            f"chmod 600 {path} (or 640 to share it with the group that shares your work directory)",
        )
    try:
        with open(path, "rb") as f:
            key = f.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise KeyFileError(path, f"cannot be read ({exc.strerror or exc})", "make it readable by you") from None
    if not KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise KeyFileError(
            path,
            f"holds {len(key)} bytes, not {KEY_BYTES} to {MAX_KEY_BYTES}",
            "delete it to have a new one created (the artifacts it authenticated are then refused until rebuilt)",
        )
    return key
