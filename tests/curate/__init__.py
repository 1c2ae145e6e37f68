"""Tests of runlib.curate; `make_spec` builds a RunSpec from the audit's base case with its sources replaced."""

from __future__ import annotations

from typing import Any

from runlib.audit.cases import case_data
from runlib.spec import validate_data
from runlib.spec.models import RunSpec


def make_spec(sources: dict[str, Any], heldout_docs: int = 2, **patch: Any) -> RunSpec:
    """The base case spec with data.sources replaced (mixtures elsewhere are not checked by the loader)."""
    return validate_data(case_data({"data.sources": sources, "data.heldout_docs": heldout_docs, **patch})).spec
