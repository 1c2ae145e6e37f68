"""What a check is, what it reports, and the context it reads.

A check is a module under runlib/audit/checks/ with:
  CODE, NAME, SEVERITY        stable code ("PREC001"), kebab-case name, default severity
  a docstring                 first line "CODE: summary", then sections "Why it matters:",
                              "Flagged:", "Preferred:", "How to fix:" (shown by `runlib explain CODE`)
  check(ctx) -> Iterator[Finding]
  PASS, FAIL                  cases as data: patches over the base spec (cases_base.yaml) on which the
                              check must stay silent / must fire (run by one parametrized test)
A check reads the spec, the plan and the facts gathered for it from this machine (runlib.audit.facts); it
never does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal, TypeAlias, TypeGuard

from runlib.audit.facts import FileFacts
from runlib.plan import Plan
from runlib.spec import RunSpec, SourceMap

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
DELETE = "__delete__"  # in a case patch: remove the key
# what a finding's value may be: data the JSON view writes as it is (runlib.audit.render.json_view)
JsonValue: TypeAlias = "str | int | float | bool | None | Sequence[JsonValue] | Mapping[str, JsonValue]"


def is_json_value(x: object) -> TypeGuard[JsonValue]:
    """Whether x is JSON data: None, a str, bool, int or float, or a list or tuple of JSON data, or a dict of
    str keys to JSON data."""
    if x is None or isinstance(x, (str, bool, int, float)):
        return True
    if isinstance(x, (list, tuple)):
        return all(is_json_value(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and is_json_value(v) for k, v in x.items())
    return False


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: Severity
    path: str  # spec path, e.g. "phases[2].seq_len"
    message: str  # what was found, with the numbers
    fix: str  # how to fix it
    value: JsonValue = None  # the corrected value, when there is exactly one
    line: int | None = None
    col: int | None = None

    def as_dict(self) -> dict[str, JsonValue]:
        return {
            "code": self.code,
            "severity": self.severity,
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "message": self.message,
            "fix": self.fix,
            "value": self.value,
        }


@dataclass(frozen=True, slots=True)
class IgnoreEntry:
    """One `audit.ignore` entry: `CODE` silences the code everywhere; `CODE@PATH` only at PATH and
    under it (PATH followed by '.' or '['), e.g. `MIX003@data.sources.web` or
    `CKPT002@checkpoint.every`. The path is a finding's path as the report prints it."""

    key: str  # as written in the spec
    code: str  # upper-cased
    path: str | None  # None: every path
    reason: str

    def covers(self, finding: Finding) -> bool:
        if finding.code != self.code:
            return False
        if self.path is None or finding.path == self.path:
            return True
        return finding.path.startswith(self.path) and finding.path[len(self.path)] in ".["


def ignore_entries(ignore: dict[str, str]) -> list[IgnoreEntry]:
    """The spec's ignore entries, parsed (with or without a reason: AUDIT001 reports those without)."""
    entries = []
    for key, reason in ignore.items():
        code, at, path = key.partition("@")
        entries.append(IgnoreEntry(key, code.strip().upper(), path.strip() if at else None, reason))
    return entries


def ignoring_entry(entries: list[IgnoreEntry], finding: Finding) -> IgnoreEntry | None:
    """The entry that silences a finding: the one with the longest matching path (a bare code last);
    entries without a reason silence nothing, and AUDIT001 is never silenced."""
    best: IgnoreEntry | None = None
    for entry in entries:
        if finding.code == "AUDIT001" or not entry.reason.strip() or not entry.covers(finding):
            continue
        if best is None or len(entry.path or "") > len(best.path or ""):
            best = entry
    return best


def summarize(items: list[str], head: int = 3, tail: int = 1) -> str:
    """A long list for a message: the first few, '... N more', the last ('1, 2, 3, ... 110 more, 117')."""
    if len(items) <= head + tail + 1:
        return ", ".join(items)
    return ", ".join([*items[:head], f"... {len(items) - head - tail} more", *items[len(items) - tail :]])


@dataclass(frozen=True, slots=True)
class Case:
    """A check's test case: a patch over the base spec, and for a fail case the expected severity."""

    patch: Mapping[str, object]  # dotted spec path -> the value there (runlib.audit.cases.apply_patch)
    severity: Severity | None = None


def case(patch: Mapping[str, object], severity: Severity | None = None) -> Case:
    return Case(patch, severity)


@dataclass
class Context:
    """What a check reads: the spec, its plan, what this machine holds of its files, and where each path sits
    in the file."""

    spec: RunSpec
    plan: Plan
    files: FileFacts
    source_map: SourceMap | None = None
    code: str = ""
    severity: Severity = "error"
    prior: list[Finding] = field(default_factory=list)  # findings of the checks run before (AUDIT001 reads them)

    def finding(
        self, path: str, message: str, fix: str, value: object = None, severity: Severity | None = None
    ) -> Finding:
        """A finding of this check at `path` (its line and column from the source map, when there is one);
        `value`, the corrected value, must be JSON data (is_json_value): the JSON view writes it as it is."""
        if not is_json_value(value):
            raise TypeError(f"{self.code}: a finding's value must be JSON data, not {value!r}")
        line = col = None
        if self.source_map is not None:
            pos = self.source_map.position(path)
            if pos:
                line, col = pos
        return Finding(self.code, severity or self.severity, path, message, fix, value, line, col)


@dataclass(frozen=True)
class CheckInfo:
    code: str
    name: str
    severity: Severity
    doc: str
    run: Callable[[Context], Iterator[Finding]]
    passes: tuple[Case, ...]
    fails: tuple[Case, ...]
    module: str

    @classmethod
    def from_module(cls, module: ModuleType) -> CheckInfo:
        def as_case(c: Case | Mapping[str, object]) -> Case:
            return c if isinstance(c, Case) else Case(dict(c))

        return cls(
            code=module.CODE,
            name=module.NAME,
            severity=module.SEVERITY,
            doc=(module.__doc__ or "").strip(),
            run=module.check,
            passes=tuple(as_case(c) for c in getattr(module, "PASS", ())),
            fails=tuple(as_case(c) for c in getattr(module, "FAIL", ())),
            module=module.__name__,
        )
