"""Opening a file the user names (a spec, an imported config, a data file) without hanging on it.

`open(path)` of a FIFO blocks until a writer opens the other end, forever if none does; reading a
character device (/dev/zero, /dev/urandom) never ends; /proc/kmsg is a *regular* file of size 0 whose
read(2) blocks until the kernel logs something (procfs, Documentation/filesystems/proc.rst). So a user
file is opened with O_NONBLOCK (open(2): a FIFO opened O_RDONLY|O_NONBLOCK returns at once), checked
with fstat on the descriptor (no window between a check and the open), and refused unless it is a
regular file outside the kernel's pseudo file systems (/proc, /sys). O_NONBLOCK has no effect on regular
files of ordinary file systems (open(2): "has no effect for regular files and block devices").
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from runlib.errors import UserError

_PSEUDO_ROOTS = ("/proc", "/sys")


class MissingFile(UserError):
    """The file does not exist (a caller may treat that apart: an artifact not built yet)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _pseudo_devices() -> set[int]:
    devices = set()
    for root in _PSEUDO_ROOTS:
        try:
            devices.add(os.stat(root).st_dev)
        except OSError:
            continue
    return devices


def refusal(path: str, st: os.stat_result, what: str) -> str | None:
    """Why `path` (with stat `st`) cannot be read as `what`, or None when it is an ordinary regular file."""
    if not stat.S_ISREG(st.st_mode):
        endless = "" if stat.S_ISDIR(st.st_mode) else " (reading a FIFO or a device may never end)"
        return f"{path} is {_kind(st.st_mode)}, not a regular file: give {what} itself{endless}"
    if st.st_dev in _pseudo_devices():
        return f"{path} is a kernel file (/proc or /sys), not a regular file: give {what} itself"
    return None


def open_regular(path: str | os.PathLike[str], what: str = "the file") -> BinaryIO:
    """`path` opened for binary reading; UserError naming it when it is missing, unreadable, or not a
    regular file of an ordinary file system (a FIFO, a device, a socket, a directory, /proc/kmsg)."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise MissingFile(f"{name}: file not found; check the path") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing only
            raise UserError(f"{name} is not a regular file: give {what} itself") from None
        raise UserError(f"{name}: cannot open it ({exc.strerror})") from None
    try:
        why = refusal(name, os.fstat(fd), what)
    except OSError as exc:
        os.close(fd)
        raise UserError(f"{name}: cannot stat it ({exc.strerror})") from None
    if why is not None:
        os.close(fd)
        raise UserError(why)
    return os.fdopen(fd, "rb")


def read_bounded(path: str | os.PathLike[str], max_bytes: int, what: str = "the file") -> bytes:
    """At most max_bytes + 1 bytes of a regular file (the caller refuses a file longer than max_bytes)."""
    with open_regular(path, what) as f:
        try:
            return f.read(max_bytes + 1)
        except OSError as exc:
            raise UserError(f"{os.fspath(path)}: cannot read it ({exc.strerror})") from None
