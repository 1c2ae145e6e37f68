"""A stage that runs out of disk: said as such, with the place and the fix.

Before, a full disk surfaced as whatever the writer said: torch.save's "unexpected pos 8896 vs 8790"
(PyTorch caffe2/serialize/inline_container.cc: its writer checks the position after each short
fwrite), pyarrow's IOError text, or a traceback of OSError(ENOSPC). The build's temporary folder is
removed on any failure (runlib.store.artifacts.build_artifact), so nothing is half-committed; only
the message was wrong.

Recognised: OSError ENOSPC (no space), EDQUOT (quota) and EFBIG (a file past the size limit, `ulimit
-f`), anywhere in the exception's cause/context chain; and the texts the writers print for them
(torch's short-write errors, "No space left on device" inside a library's own exception). A failure
recognised by neither (a training worker's, seen as its exit status) is reported as a full disk when
less than LOW_FREE_BYTES are left where the stage writes.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EFBIG: "file size limit reached"}
_TEXTS = {
    "No space left on device": "disk full",
    "Disk quota exceeded": "disk quota exceeded",
    "File too large": "file size limit reached",
    "unexpected pos": "disk full",  # torch.save: a short write (PytorchStreamWriter)
    "PytorchStreamWriter failed writing file": "disk full",
    "file write failed": "disk full",
}


LOW_FREE_BYTES = 16 << 20
"""Free space below which an unrecognised failure of a stage is reported as a full disk."""


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def disk_full_cause(exc: BaseException) -> tuple[str, str | None] | None:
    """(what: 'disk full' / 'disk quota exceeded' / 'file size limit reached', the file named by the
    error or None), when `exc` comes from running out of space; None otherwise."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _ERRNOS:
            return _ERRNOS[e.errno], e.filename if isinstance(e.filename, str) else None
    for e in _chain(exc):
        text = str(e)
        for needle, what in _TEXTS.items():
            if needle in text:
                return what, None
    return None


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def disk_full_message(instance: str, where: Path, exc: BaseException) -> str | None:
    """The message for a stage that ran out of space writing under `where`; None when it did not."""
    cause = disk_full_cause(exc)
    if cause is None:
        # the error of another process (a training worker's torch.save), seen here as its exit status:
        # a disk left nearly full after the build's temporary folder was removed says what happened
        free = _free_bytes(where)
        if free is None or free >= LOW_FREE_BYTES:
            return None
        cause = ("disk full", None)
    what, file = cause
    at = Path(file) if file else where
    free = _free_bytes(at)
    shown = f"; {free / 2**20:,.1f} MiB free there now" if free is not None else ""
    if what == "file size limit reached":
        fix = "raise the file size limit (`ulimit -f`; a cluster job's limit) and rerun"
    else:
        fix = "free space there (or set RUNLIB_WORK_DIR to a larger disk) and rerun"
    detail = " ".join(str(exc).split())[:160]
    return (
        f"{instance}: {what} at {at} ({detail}{shown}): {fix}; nothing was committed, the rerun builds the stage again"
    )
