"""The regular files a glob matches, walked by runlib itself: bounded, symbolic-link loops refused.

Matching. `match_files` implements the glob language of Python's `glob.glob(pattern, recursive=True)`
(`*`, `?`, `[...]` within one path component; `**` as a whole component: zero or more directories; names
starting with "." matched only by a component that starts with "."), but walks the tree itself:
`glob.glob` follows symbolic links to directories under `**` without remembering where it has been, so
one link back to an ancestor makes it run forever. Here every directory a `**`
descends into is identified by (st_dev, st_ino); meeting one again under another path is an error that
names both paths (a loop when the first is an ancestor of the second; otherwise the same files would be
read twice). The walk is bounded: at most MAX_INPUT_FILES matched files and MAX_SCANNED_ENTRIES
directory entries looked at, each an error naming the field and the fix. Only regular files match (a
directory matched by `*` is passed over; a broken link, a FIFO or a device is an error: reading a FIFO
would block); one file matched under two paths (a hard or symbolic link) is an error.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from fnmatch import translate

from runlib.errors import UserError
from runlib.util.userfile import refusal

MAX_INPUT_FILES = 100_000
"""Files one source's glob may match (each becomes a line of the curation config and a path in its key)."""

MAX_SCANNED_ENTRIES = 2_000_000
"""Directory entries one glob may look at before it is refused as too broad."""

_MAGIC = re.compile(r"[*?[]")


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


class _Walk:
    """The state of one match_files walk: what it found, the directories `**` entered, the entries looked at."""

    def __init__(self, pattern: str, field: str, include_hidden: bool, max_files: int, max_entries: int):
        self.pattern, self.field, self.include_hidden = pattern, field, include_hidden
        self.max_files, self.max_entries = max_files, max_entries
        self.seen_dirs: dict[tuple[int, int, int], str] = {}  # (st_dev, st_ino, component) -> the first path
        self.found: dict[tuple[int, int], Match] = {}
        self.scanned = 0

    def listing(self, directory: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory or ".") as it:
                entries = []
                for entry in it:
                    self.scanned += 1
                    if self.scanned > self.max_entries:
                        raise UserError(
                            f"{self.field}: {self.pattern!r} looks at more than {self.max_entries:,} directory entries (under "
                            f"{directory or '.'}); narrow the glob (a fixed directory before any '**')"
                        )
                    entries.append(entry)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as exc:
            raise UserError(
                f"{self.field}: cannot list {directory or '.'} while matching {self.pattern!r} ({exc.strerror}); "
                "fix its permissions or narrow the glob"
            ) from None
        return sorted(entries, key=lambda e: e.name, reverse=True)  # popped from the stack in name order

    def visible(self, name: str, component: str) -> bool:
        return self.include_hidden or not name.startswith(".") or component.startswith(".")

    def add(self, path: str) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if os.path.islink(path):
                raise UserError(
                    f"{self.field}: {path} (matched by {self.pattern!r}) is a broken symbolic link to "
                    f"{os.readlink(path)!r}; remove it or fix its target"
                ) from None
            return  # gone meanwhile
        except OSError as exc:
            raise UserError(f"{self.field}: cannot stat {path} ({exc.strerror}); fix its permissions") from None
        if stat.S_ISDIR(st.st_mode):
            return  # a directory matched by a wildcard: not an input file
        if not stat.S_ISREG(st.st_mode):
            raise UserError(
                f"{self.field}: {path} (matched by {self.pattern!r}) is not a regular file (a FIFO, socket or device); "
                "narrow the glob so that it matches input files only"
            )
        if refusal(path, st, "an input file") is not None:  # /proc/kmsg: "regular", and its read blocks
            raise UserError(
                f"{self.field}: {path} (matched by {self.pattern!r}) is a kernel file (/proc or /sys), not a data file; "
                "point the source at your own files"
            )
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:  # os.fsdecode's surrogate escapes: not writable into a key or a manifest
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise UserError(
                f"{self.field}: the name of {shown!r} (matched by {self.pattern!r}) is not UTF-8; rename the file"
            ) from None
        ident = (st.st_dev, st.st_ino)
        first = self.found.get(ident)
        if first is not None:
            if first.path == path:
                return
            one, other = sorted((first.path, path))
            raise UserError(
                f"{self.field}: {one} and {other} are the same file (a hard or symbolic link), so {self.pattern!r} "
                "would read it twice; narrow the glob or remove the link"
            )
        self.found[ident] = Match(path, st)
        if len(self.found) > self.max_files:
            raise UserError(
                f"{self.field}: {self.pattern!r} matches more than {self.max_files:,} files; join small files into larger "
                "ones (one curation shard reads many documents) or narrow the glob"
            )

    def enter(self, directory: str, i: int) -> bool:
        """Record a directory a `**` walks (component i); False when this very path was walked already."""
        try:
            st = os.stat(directory or ".")
        except OSError:
            return False
        ident = (st.st_dev, st.st_ino, i)
        first = self.seen_dirs.get(ident)
        if first is None:
            self.seen_dirs[ident] = directory
            return True
        if first == directory:
            return False
        if directory.startswith(first.rstrip(os.sep) + os.sep) or not first:
            raise UserError(
                f"{self.field}: {directory} is a symbolic link loop (it leads back to {first or '.'}), which "
                f"{self.pattern!r} would walk forever; remove the link or narrow the glob"
            )
        raise UserError(
            f"{self.field}: {first} and {directory} are the same directory (through a symbolic link), so "
            f"{self.pattern!r} would read its files twice; narrow the glob or remove the link"
        )


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


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
    walk = _Walk(pattern, field, include_hidden, max_files, max_entries)
    stack: list[tuple[str, int]] = [(root, 0)]

    last = len(parts) - 1
    while stack:
        directory, i = stack.pop()
        part = parts[i]
        if part == "**":
            if not walk.enter(directory, i):
                continue
            entries = walk.listing(directory)
            for entry in entries:
                if not walk.visible(entry.name, ""):
                    continue
                path = _join(directory, entry.name)
                if _is_dir(entry):
                    stack.append((path, i))
                elif i == last:
                    walk.add(path)
            if i < last:
                stack.append((directory, i + 1))  # `**` matching no directory
            continue
        matcher = matchers[i]
        if matcher is None:  # a literal component
            path = _join(directory, part)
            if i == last:
                if os.path.lexists(path):
                    walk.add(path)
            elif os.path.isdir(path):
                stack.append((path, i + 1))
            continue
        for entry in walk.listing(directory):
            if not walk.visible(entry.name, part) or not matcher.match(entry.name):
                continue
            path = _join(directory, entry.name)
            if i == last:
                walk.add(path)
            elif _is_dir(entry):
                stack.append((path, i + 1))
    return sorted(walk.found.values(), key=lambda m: m.path)
