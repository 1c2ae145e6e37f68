"""The check catalog: one module per code (see runlib.audit.registry for the module contract)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from runlib.audit.registry import CheckInfo


@cache
def all_checks() -> tuple[CheckInfo, ...]:
    """Every check module in this package, in code order; AUDIT001 last (it reads the others' findings)."""
    checks = [
        CheckInfo.from_module(importlib.import_module(f"{__name__}.{m.name}"))
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_")
    ]
    return tuple(sorted(checks, key=lambda c: (c.code.startswith("AUDIT"), c.code)))


def get_check(code: str) -> CheckInfo | None:
    return next((c for c in all_checks() if c.code == code.upper()), None)
