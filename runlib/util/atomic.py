"""Atomic writes: a reader sees the old file or the new one, never half of one.

The data is fsync'd before the rename, so after a crash of the machine (not only of the process) the
name points at whole content: rename is atomic, but without the fsync a file system may commit the
rename before the data (the ext4 "zero-length file" problem; POSIX rename(2), Linux fsync(2)).

What the name points at is kept (`-o /dev/null`, run as root, became a regular 0600
file, and a symlink was replaced by a file):
- a symbolic link is followed: its target is written (atomically when the target is a regular file or
  does not exist yet), and the link stays;
- a target that is not a regular file (a character device such as /dev/null or /dev/stdout's tty, a
  FIFO, a socket's /proc/self/fd path) is written in place: rename cannot write to it, only replace it;
- a directory is refused (UserError): it is not a file to write;
- a regular file keeps its permission bits; a new file gets 0666 less the umask, as open(2) would give
  it (mkstemp's temporary file is 0600).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runlib.errors import UserError

FIFO_READER_WAIT_S = 10.0
"""How long a write to a FIFO waits for a process to open its reading end."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)  # write through a symlink
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a directory: give the path of a file to write")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(path, data)  # a device or a FIFO: written in place, never replaced
        return
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_in_place(path: Path, data: bytes) -> None:
    """Write to a device or a FIFO. open(2) of a FIFO for writing blocks until a reader opens it, forever
    if none does (`-o fifo` hung); with O_NONBLOCK it fails at once with ENXIO instead (fifo(7)). The
    descriptor is made blocking again for the write, so that a slow reader is waited for, not an error.
    A reader started together with the writer (`cat fifo & runlib ... -o fifo`) may open its end a moment
    later: the open is retried for FIFO_READER_WAIT_S, a bound, not forever."""
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise UserError(
                    f"{path} is a FIFO (named pipe) that no process read within {FIFO_READER_WAIT_S:.0f} s: "
                    "start its reader first"
                ) from None
            time.sleep(0.05)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_output(path: str | os.PathLike[str], text: str) -> None:
    """write_text_atomic for a file the user names (`-o`, `--out`): an OSError (a full device such as
    /dev/full, a parent that is a file, a read-only file system, a name too long) is a UserError naming
    the path, not a traceback. Stages call write_text_atomic: their OSError (a full disk) has its own message
    (runlib.store.diskfull)."""
    try:
        write_text_atomic(Path(path), text)
    except OSError as exc:
        raise UserError(
            f"{os.fspath(path)}: cannot write it ({exc.strerror or exc}); give a path to a file in a folder you can write"
        ) from exc


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` for a writer that wants a path of its own (a streaming writer, np.save):
    when the block ends it is fsync'd and renamed onto `path`; when the block raises it is removed. Its mode
    is 0666 less the umask, as a file open(2) creates (not mkstemp's private 0600). Give torch.save a file
    object opened on it: given a path, torch.save names its archive's root folder after the file name, which
    here holds the process id, so the same payload would give other bytes in every process."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_dir(tmp: Path, out_dir: Path) -> None:
    """Put the finished directory `tmp` where `out_dir` is. POSIX rename cannot replace a non-empty
    directory, so an old `out_dir` is first renamed aside, removed once the new one is in place, and put
    back if the second rename fails: a reader finds the old directory or the new one, whole."""
    if not out_dir.exists() and not out_dir.is_symlink():
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out_dir)
        return
    if not out_dir.is_dir() or out_dir.is_symlink():
        raise FileExistsError(f"{out_dir} exists and is not a directory runlib wrote")
    old = Path(tempfile.mkdtemp(prefix=f".old-{out_dir.name}-", dir=out_dir.parent))
    os.replace(out_dir, old)  # an empty directory may be replaced by rename
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        os.replace(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)
