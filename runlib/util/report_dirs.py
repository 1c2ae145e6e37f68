"""Where a spec file's reports go: one rule for the audit report, the run report, the Snakemake target and
the workflow's closing message, so that two spec files of the same run name (a variant, a copy being edited)
never write over each other's report.

- reports/<run>/<kind> for the run's own spec file (the file named after the run: demo.yaml for `name: demo`);
- reports/<run>/<kind>-<file stem> for another file with the same run name;
- either name + "-<8 hex digits of the file's absolute path>" when that directory holds the report of
  another file of the same name (its SPEC_PATH_FILE says whose).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

SPEC_PATH_FILE = "spec-path.txt"
"""In each report directory: the absolute path of the spec file it was written from (one line)."""
REPORTS = Path("reports")


def spec_path_text(spec_file: str | Path) -> str:
    """The absolute path of a spec file as SPEC_PATH_FILE records it."""
    return str(Path(spec_file).resolve())


def report_dir(run_name: str, spec_file: str | Path | None, kind: str, root: Path = REPORTS) -> Path:
    """The report directory of kind `kind` ("audit", "run") of the spec file (None: a spec not from a file)."""
    stem = Path(spec_file).stem if spec_file is not None else run_name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "spec"
    out = root / run_name / (kind if safe == run_name else f"{kind}-{safe}")
    if spec_file is None:
        return out
    mine = spec_path_text(spec_file)
    owner = recorded_spec_path(out)
    if owner and owner != mine:
        out = out.with_name(f"{out.name}-{hashlib.sha256(mine.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}")
    return out


def recorded_spec_path(directory: Path) -> str | None:
    """The spec file a report directory was written from (its SPEC_PATH_FILE), or None."""
    try:
        return (Path(directory) / SPEC_PATH_FILE).read_text(encoding="utf-8").strip()[:4096] or None
    except (OSError, UnicodeDecodeError):
        return None


def sibling_reports(directory: Path, kind: str) -> list[Path]:
    """The other report directories of kind `kind` beside `directory` (reports/<run>/<kind>[-*]), by name."""
    directory = Path(directory)
    try:
        entries = sorted(directory.parent.iterdir())
    except OSError:
        return []
    return [
        d
        for d in entries
        if d.name != directory.name
        and (d.name == kind or d.name.startswith(f"{kind}-"))
        and d.is_dir()
        and not d.is_symlink()
    ]
