"""What the checks read from this machine, gathered once before they run: checks themselves never do I/O.

Two facts, both bounded so that `runlib audit` stays in milliseconds and cannot block:
- per file source (SRC001), how the curation stage's expansion of its `input.path` would end, found by
  listing directories only (no file is read or hashed);
- the files the spec names that are not usable here (RUN012: runlib.audit.named_files).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runlib.audit.named_files import named_file_refusals
from runlib.errors import UserError
from runlib.plan.enact import Refusal
from runlib.spec.models import RunSpec
from runlib.util.globs import has_magic, match_files

AUDIT_MAX_DIRECTORY_ENTRIES = 20_000
"""Directory entries the audit lists per source before it stops (runlib.util.globs allows 2,000,000 for the
stage itself): an audit stays in milliseconds; a larger glob is reported as not checked."""

MatchState = Literal["ok", "none", "absent", "problem", "unchecked"]


@dataclass(frozen=True)
class SourceFiles:
    """How a file source's glob expands here."""

    state: MatchState
    detail: str
    """'ok': how many files; 'none'/'absent': the glob's fixed directory; 'problem': the matcher's reason;
    'unchecked': how many entries the audit stopped after."""
    sample: list[str] = field(default_factory=list)
    """For 'none': up to three file names in the directory, to show what is there."""


@dataclass(frozen=True)
class FileFacts:
    here: str
    """The working directory, which relative paths are read from."""
    sources: dict[str, SourceFiles]
    """File sources with a path (builtin sources and sources without a path are absent)."""
    named_file_refusals: list[Refusal]


def gather_files(spec: RunSpec, max_entries: int = AUDIT_MAX_DIRECTORY_ENTRIES) -> FileFacts:
    sources: dict[str, SourceFiles] = {}
    for name, source in spec.data.sources.items():
        if source.input.format == "builtin" or not source.input.path:
            continue
        field_name = f"data.sources.{name}.input.path"
        state, detail = match_state(source.input.path, source.input.format == "text", field_name, max_entries)
        sources[name] = SourceFiles(state, detail, sample_names(detail) if state == "none" else [])
    return FileFacts(os.getcwd(), sources, named_file_refusals(spec))


def sample_names(directory: str, limit: int = 3) -> list[str]:
    """Up to `limit` file names in `directory` (sorted; one bounded listing), to show what is there."""
    names: list[str] = []
    try:
        with os.scandir(directory or ".") as it:
            for i, entry in enumerate(it):
                if i >= 1_000:
                    break
                if not entry.name.startswith(".") and entry.is_file():
                    names.append(entry.name)
    except OSError:
        return []
    return sorted(names)[:limit]


def fixed_directory(pattern: str) -> str:
    """The directory the glob's walk starts from: its leading components without wildcards ("data/web" for
    "data/web/*.jsonl"; "" for a pattern whose first component has one: the working directory)."""
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts[:-1]:
        if has_magic(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) if fixed != [""] else os.sep


def match_state(pattern: str, text_format: bool, field: str, max_entries: int) -> tuple[MatchState, str]:
    """('ok' | 'none' | 'absent' | 'problem' | 'unchecked', detail): how the curation stage's expansion of
    `pattern` would end, found by listing directories only ('absent': nothing matches and the glob's fixed
    directory does not exist either). The expansion is the one of runlib.graph.configs.source_files:
    a `text` source whose path is a directory reads every file under it, any other path is a glob
    (runlib.util.globs.match_files)."""
    root = fixed_directory(pattern)
    if root and not os.path.isdir(root):  # match_files' walk would start there and find nothing: skip it
        return "absent", root
    directory = text_format and Path(pattern).is_dir()
    glob_pattern = os.path.join(glob.escape(pattern), "**", "*") if directory else pattern
    try:
        found = match_files(glob_pattern, field, include_hidden=directory, max_entries=max_entries)
    except UserError as exc:
        if f"more than {max_entries:,} directory entries" in str(exc):
            return "unchecked", f"more than {max_entries:,} directory entries"
        return "problem", str(exc).removeprefix(f"{field}: ")
    if found:
        return "ok", f"{len(found):,} file(s)"
    return "none", root
