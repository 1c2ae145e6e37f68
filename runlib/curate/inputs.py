"""The input files of a file-based source: what its glob matches (runlib.util.globs: bounded, symlink loops
refused) and a fingerprint of each (path, size, content digest) computed once per file version.

Fingerprints. A stage key must change when a file's content does, so each file enters
the curation config as (path, bytes, digest) with digest = runlib.util.hashing.file_digest (XXH3-128).
Hashing every input on every `runlib plan` would cost a full read of the corpus, so digests are cached
in <work>/cache/file-digests/, one JSON table per source pattern (named by a hash of the pattern made
absolute, so of the working directory too), each entry keyed by the file's path as matched and valid
only while (st_dev, st_ino, size, mtime_ns, ctime_ns) are unchanged. ctime cannot be set
from user space, so restoring an old mtime after an edit (`touch -d`, `cp -p`) still invalidates the
entry. A digest is stored only for a file whose mtime and ctime lie RACY_WINDOW_NS before the hash
started (git's "racily clean" rule, Documentation/technical/racy-git.txt): a write within the
timestamp granularity after the hash cannot then leave the same (mtime, ctime). On a network file system
whose clock runs behind this machine's by more than that window the rule is weaker; the stage re-checks
each file against its digest before reading it (`check_unchanged`). Tables are written atomically
(temporary file + rename), so concurrent writers never leave a torn table: the last writer wins and an
entry it did not know is computed again next time. An unreadable or malformed table is ignored.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from runlib.curate.config import InputFile
from runlib.errors import UserError
from runlib.store.settings import work_dir
from runlib.util.atomic import write_text_atomic
from runlib.util.globs import Match, match_files
from runlib.util.hashing import file_digest

RACY_WINDOW_NS = 2_000_000_000
"""A file changed less than this long before its hash started is hashed but its digest not cached."""

CACHE_VERSION = 1
_warned_cache = False


# -------------------------------------------------------------------------------------- fingerprints


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_path(pattern: str) -> Path:
    name = hashlib.sha256(os.path.abspath(pattern).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return work_dir() / "cache" / "file-digests" / f"{name}.json"


# a pattern's cache table: file path -> [*its signature (5 ints), its digest], as read back from JSON
# (so of any shape: _cached checks an entry before it is used)
Table = dict[str, object]


def _load_table(path: Path) -> Table:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
        return {}
    files: Table = data["files"]  # a dict, checked above
    return files


def _store_table(path: Path, pattern: str, table: Table) -> None:
    global _warned_cache
    text = json.dumps({"version": CACHE_VERSION, "pattern": os.path.abspath(pattern), "files": table})
    try:
        write_text_atomic(path, text)  # creates the folder; removes its temporary file on failure
    except OSError as exc:
        if not _warned_cache:
            _warned_cache = True
            print(
                f"runlib: warning: cannot cache input file digests in {path.parent} ({exc.strerror}); "
                "every plan will hash the inputs again",
                file=sys.stderr,
            )


def _hash(path: str, before: os.stat_result, field: str) -> tuple[str, os.stat_result, int]:
    """(digest, the stat it belongs to, when hashing started in ns); retried while the file changes."""
    for _ in range(3):
        started_ns = time.time_ns()
        try:
            digest = file_digest(path)
            after = os.stat(path)
        except OSError as exc:
            raise UserError(f"{field}: cannot read {path} ({exc.strerror}); fix its permissions") from None
        if _signature(after) == _signature(before):
            return digest, after, started_ns
        before = after
    raise UserError(f"{field}: {path} keeps changing while runlib reads it; stop writing to it, then rerun")


def _cached(table: Table, name: str, signature: list[int]) -> str | None:
    entry = table.get(name)
    if isinstance(entry, list) and len(entry) == 6 and entry[:5] == signature and isinstance(entry[5], str):
        return entry[5]
    return None


def fingerprint_files(pattern: str, matches: Iterable[Match], field: str) -> list[InputFile]:
    """(path, bytes, digest) of each matched file, in order; digests from the cache where still valid.
    The pattern's table is rewritten (when anything changed) with the entries of these files only."""
    cache = _cache_path(pattern)
    table = _load_table(cache)
    kept: Table = {}
    out: list[InputFile] = []
    for m in matches:
        name = m.path  # the table is the pattern's (its absolute spelling): the path as matched names the file
        signature = _signature(m.stat)
        digest = _cached(table, name, signature)
        if digest is not None:
            kept[name] = table[name]
        else:
            digest, st, started_ns = _hash(m.path, m.stat, field)
            signature = _signature(st)
            if max(st.st_mtime_ns, st.st_ctime_ns) <= started_ns - RACY_WINDOW_NS:
                kept[name] = [*signature, digest]
        out.append(InputFile.model_construct(path=m.path, bytes=signature[2], digest=digest))  # types known
    if kept != table:
        _store_table(cache, pattern, kept)
    return out


def source_inputs(pattern: str, field: str, directory: bool = False) -> list[InputFile]:
    """The fingerprinted files of a source: `pattern` a glob, or (directory=True) every file under it."""
    if directory:
        matches = match_files(os.path.join(glob.escape(pattern), "**", "*"), field, include_hidden=True)
    else:
        matches = match_files(pattern, field)
    return fingerprint_files(pattern, matches, field)


def check_unchanged(pattern: str, files: Iterable[InputFile], field: str) -> list[os.stat_result]:
    """UserError unless every file still has the size and digest it was keyed by (the cached digest of
    the source `pattern` while a file's stat is unchanged, a fresh hash otherwise; the cache is only read
    here); returns the stats to compare with after reading (check_still)."""
    table = _load_table(_cache_path(pattern))
    stats = []
    for file in files:
        try:
            st = os.stat(file.path)
        except OSError as exc:
            raise UserError(f"{field}: input file {file.path} is gone ({exc.strerror}); rerun snakemake") from None
        digest = None
        if st.st_size == file.bytes:
            digest = _cached(table, file.path, _signature(st))
            if digest is None:
                digest, st, _ = _hash(file.path, st, field)
        if digest != file.digest:
            now = f"{st.st_size} bytes" + (f", {digest}" if digest else "")
            raise UserError(
                f"{field}: input file {file.path} changed since this stage's key was computed (keyed as "
                f"{file.bytes} bytes, {file.digest}; now {now}); rerun snakemake, which keys the stage by the "
                "new content"
            )
        stats.append(st)
    return stats


def check_still(file: InputFile, before: os.stat_result, field: str) -> None:
    """UserError when `file` changed while the stage read it (its stat differs from `before`)."""
    try:
        after = os.stat(file.path)
    except OSError:
        after = None
    if after is None or _signature(after) != _signature(before):
        raise UserError(
            f"{field}: input file {file.path} changed while it was read; stop writing to it, then rerun snakemake"
        )
