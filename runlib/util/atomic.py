"""Atomic writes: a reader sees the old file or the new one, never half of one.

The data is fsync'd before the rename, so after a crash of the machine (not only of the process) the
name points at whole content: rename is atomic, but without the fsync a file system may commit the
rename before the data (the ext4 "zero-length file" problem; POSIX rename(2), Linux fsync(2)).

What the name points at is kept (issue 28 item 12: `-o /dev/null`, run as root, became a regular 0600
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

import os
import stat
import tempfile
from pathlib import Path

from runlib.errors import UserError


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
        with open(path, "wb") as f:  # a device or a FIFO: written in place, never replaced
            f.write(data)
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


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
