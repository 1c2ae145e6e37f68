"""Atomic writes: a reader sees the old file or the new one, never half of one.

The data is fsync'd before the rename, so after a crash of the machine (not only of the process) the
name points at whole content: rename is atomic, but without the fsync a file system may commit the
rename before the data (the ext4 "zero-length file" problem; POSIX rename(2), Linux fsync(2)).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
