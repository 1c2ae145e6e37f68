"""The input files of a file-based source: what its glob matches (bounded, symlink loops refused) and a
fingerprint of each (path, size, content digest) computed once per file version.

Matching. `match_files` implements the glob language of Python's `glob.glob(pattern, recursive=True)`
(`*`, `?`, `[...]` within one path component; `**` as a whole component: zero or more directories; names
starting with "." matched only by a component that starts with "."), but walks the tree itself:
`glob.glob` follows symbolic links to directories under `**` without remembering where it has been, so
one link back to an ancestor makes it run forever (issue 8, problem 5). Here every directory a `**`
descends into is identified by (st_dev, st_ino); meeting one again under another path is an error that
names both paths (a loop when the first is an ancestor of the second; otherwise the same files would be
read twice). The walk is bounded: at most MAX_INPUT_FILES matched files and MAX_SCANNED_ENTRIES
directory entries looked at, each an error naming the field and the fix. Only regular files match (a
directory matched by `*` is passed over; a broken link, a FIFO or a device is an error: reading a FIFO
would block); one file matched under two paths (a hard or symbolic link) is an error.

Fingerprints. A stage key must change when a file's content does (issue 8, problem 3), so each file enters
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
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import translate
from pathlib import Path

from runlib.curate.config import InputFile
from runlib.errors import UserError
from runlib.util.hashing import file_digest
from runlib.util.userfile import refusal
from runlib.workflow.settings import work_dir

MAX_INPUT_FILES = 100_000
"""Files one source's glob may match (each becomes a line of the curation config and a path in its key)."""

MAX_SCANNED_ENTRIES = 2_000_000
"""Directory entries one glob may look at before it is refused as too broad."""

RACY_WINDOW_NS = 2_000_000_000
"""A file changed less than this long before its hash started is hashed but its digest not cached."""

CACHE_VERSION = 1
_MAGIC = re.compile(r"[*?[]")
_warned_cache = False


@dataclass(frozen=True)
class Match:
    path: str
    """The path as the pattern spells it (doc ids are taken relative to the pattern's fixed part)."""
    stat: os.stat_result
    """os.stat of the file (links followed)."""


# ------------------------------------------------------------------------------------------ matching


def has_magic(text: str) -> bool:
    return _MAGIC.search(text) is not None


def _split(pattern: str) -> tuple[str, list[str]]:
    """(the fixed directory the walk starts from, the remaining components); empty components dropped."""
    absolute = pattern.startswith(os.sep)
    parts = [p for p in pattern.split(os.sep) if p]
    fixed: list[str] = []
    while parts and not has_magic(parts[0]) and len(parts) > 1:
        fixed.append(parts.pop(0))
    root = os.path.join(os.sep if absolute else "", *fixed) if fixed else (os.sep if absolute else "")
    return root, parts


def _join(directory: str, name: str) -> str:
    if not directory:
        return name
    return directory + name if directory.endswith(os.sep) else directory + os.sep + name


def match_files(
    pattern: str,
    field: str,
    include_hidden: bool = False,
    max_files: int | None = None,
    max_entries: int | None = None,
) -> list[Match]:
    """The regular files `pattern` matches, sorted by path; `field` names the spec field in errors.

    See the module docstring for the rules. `include_hidden` lets wildcards and `**` match names that
    start with "." (a `text` source given as a directory reads every file under it).
    """
    max_files = MAX_INPUT_FILES if max_files is None else max_files
    max_entries = MAX_SCANNED_ENTRIES if max_entries is None else max_entries
    root, parts = _split(pattern)
    if not parts:  # "/" or ""
        return []
    matchers = [None if p == "**" or not has_magic(p) else re.compile(translate(p)) for p in parts]
    seen_dirs: dict[tuple[int, int, int], str] = {}  # (st_dev, st_ino, component) -> the first path
    found: dict[tuple[int, int], Match] = {}
    scanned = 0
    stack: list[tuple[str, int]] = [(root, 0)]

    def listing(directory: str) -> list[os.DirEntry[str]]:
        nonlocal scanned
        try:
            with os.scandir(directory or ".") as it:
                entries = []
                for entry in it:
                    scanned += 1
                    if scanned > max_entries:
                        raise UserError(
                            f"{field}: {pattern!r} looks at more than {max_entries:,} directory entries (under "
                            f"{directory or '.'}); narrow the glob (a fixed directory before any '**')"
                        )
                    entries.append(entry)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as exc:
            raise UserError(
                f"{field}: cannot list {directory or '.'} while matching {pattern!r} ({exc.strerror}); "
                "fix its permissions or narrow the glob"
            ) from None
        return sorted(entries, key=lambda e: e.name, reverse=True)  # popped from the stack in name order

    def visible(name: str, component: str) -> bool:
        return include_hidden or not name.startswith(".") or component.startswith(".")

    def is_dir(entry: os.DirEntry[str]) -> bool:
        try:
            return entry.is_dir()
        except OSError:
            return False

    def add(path: str) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if os.path.islink(path):
                raise UserError(
                    f"{field}: {path} (matched by {pattern!r}) is a broken symbolic link to "
                    f"{os.readlink(path)!r}; remove it or fix its target"
                ) from None
            return  # gone meanwhile
        except OSError as exc:
            raise UserError(f"{field}: cannot stat {path} ({exc.strerror}); fix its permissions") from None
        if stat.S_ISDIR(st.st_mode):
            return  # a directory matched by a wildcard: not an input file
        if not stat.S_ISREG(st.st_mode):
            raise UserError(
                f"{field}: {path} (matched by {pattern!r}) is not a regular file (a FIFO, socket or device); "
                "narrow the glob so that it matches input files only"
            )
        if refusal(path, st, "an input file") is not None:  # /proc/kmsg: "regular", and its read blocks
            raise UserError(
                f"{field}: {path} (matched by {pattern!r}) is a kernel file (/proc or /sys), not a data file; "
                "point the source at your own files"
            )
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:  # os.fsdecode's surrogate escapes: not writable into a key or a manifest
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise UserError(
                f"{field}: the name of {shown!r} (matched by {pattern!r}) is not UTF-8; rename the file"
            ) from None
        ident = (st.st_dev, st.st_ino)
        first = found.get(ident)
        if first is not None:
            if first.path == path:
                return
            one, other = sorted((first.path, path))
            raise UserError(
                f"{field}: {one} and {other} are the same file (a hard or symbolic link), so {pattern!r} "
                "would read it twice; narrow the glob or remove the link"
            )
        found[ident] = Match(path, st)
        if len(found) > max_files:
            raise UserError(
                f"{field}: {pattern!r} matches more than {max_files:,} files; join small files into larger "
                "ones (one curation shard reads many documents) or narrow the glob"
            )

    def enter(directory: str, i: int) -> bool:
        """Record a directory a `**` walks (component i); False when this very path was walked already."""
        try:
            st = os.stat(directory or ".")
        except OSError:
            return False
        ident = (st.st_dev, st.st_ino, i)
        first = seen_dirs.get(ident)
        if first is None:
            seen_dirs[ident] = directory
            return True
        if first == directory:
            return False
        if directory.startswith(first.rstrip(os.sep) + os.sep) or not first:
            raise UserError(
                f"{field}: {directory} is a symbolic link loop (it leads back to {first or '.'}), which "
                f"{pattern!r} would walk forever; remove the link or narrow the glob"
            )
        raise UserError(
            f"{field}: {first} and {directory} are the same directory (through a symbolic link), so "
            f"{pattern!r} would read its files twice; narrow the glob or remove the link"
        )

    last = len(parts) - 1
    while stack:
        directory, i = stack.pop()
        part = parts[i]
        if part == "**":
            if not enter(directory, i):
                continue
            entries = listing(directory)
            for entry in entries:
                if not visible(entry.name, ""):
                    continue
                path = _join(directory, entry.name)
                if is_dir(entry):
                    stack.append((path, i))
                elif i == last:
                    add(path)
            if i < last:
                stack.append((directory, i + 1))  # `**` matching no directory
            continue
        matcher = matchers[i]
        if matcher is None:  # a literal component
            path = _join(directory, part)
            if i == last:
                if os.path.lexists(path):
                    add(path)
            elif os.path.isdir(path):
                stack.append((path, i + 1))
            continue
        for entry in listing(directory):
            if not visible(entry.name, part) or not matcher.match(entry.name):
                continue
            path = _join(directory, entry.name)
            if i == last:
                add(path)
            elif is_dir(entry):
                stack.append((path, i + 1))
    return sorted(found.values(), key=lambda m: m.path)


# -------------------------------------------------------------------------------------- fingerprints


def _signature(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_path(pattern: str) -> Path:
    name = hashlib.sha256(os.path.abspath(pattern).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return work_dir() / "cache" / "file-digests" / f"{name}.json"


def _load_table(path: Path) -> dict[str, list]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def _store_table(path: Path, pattern: str, table: dict[str, list]) -> None:
    global _warned_cache
    text = json.dumps({"version": CACHE_VERSION, "pattern": os.path.abspath(pattern), "files": table})
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
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


def _cached(table: dict[str, list], name: str, signature: list[int]) -> str | None:
    entry = table.get(name)
    if isinstance(entry, list) and len(entry) == 6 and entry[:5] == signature and isinstance(entry[5], str):
        return entry[5]
    return None


def fingerprint_files(pattern: str, matches: Iterable[Match], field: str) -> list[InputFile]:
    """(path, bytes, digest) of each matched file, in order; digests from the cache where still valid.
    The pattern's table is rewritten (when anything changed) with the entries of these files only."""
    cache = _cache_path(pattern)
    table = _load_table(cache)
    kept: dict[str, list] = {}
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
