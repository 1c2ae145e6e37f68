"""Errors a user can cause: each carries a message naming the file, field and fix; the CLI exits 2."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in an input file, rendered as `file:line:col: CODE path: message` and, when there is
    one, a second line `  fix: ...` (what to write instead, with an example of a valid value)."""

    file: str
    line: int | None
    col: int | None
    code: str
    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        at = f" {self.path}:" if self.path else ""
        text = f"{where}: {self.code}{at} {self.message}"
        return f"{text}\n  fix: {self.fix}" if self.fix else text

    def as_finding(self) -> dict[str, object]:
        """The diagnostic in the shape of an audit finding (runlib.audit.registry.Finding.as_dict), for
        `runlib audit --format json` on a spec that does not load."""
        return {
            "code": self.code,
            "severity": "error",
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "message": self.message,
            "fix": self.fix,
            "value": None,
        }


class UserError(Exception):
    """A mistake in user input; the CLI prints it without a traceback and exits with status 2."""


class SpecError(UserError):
    """A spec that cannot be loaded: every problem found, at once."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))
