"""Errors a user can cause: each carries a message naming the file, field and fix; the CLI exits 2."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in an input file, rendered as `file:line:col: CODE message`."""

    file: str
    line: int | None
    col: int | None
    code: str
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        at = f" {self.path}:" if self.path else ""
        return f"{where}: {self.code}{at} {self.message}"


class UserError(Exception):
    """A mistake in user input; the CLI prints it without a traceback and exits with status 2."""


class SpecError(UserError):
    """A spec that cannot be loaded: every problem found, at once."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))
