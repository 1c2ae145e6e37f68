"""MIX003's fix for a source that is a phase's whole mixture: scaling its weight and renormalizing gives the
weight back (1), so the fix names what does lower its epochs there (fewer tokens, other sources)."""

from __future__ import annotations

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.spec import validate_data

ALONE = {"web": 1.0}


def mix003(patch: dict):
    result = audit(validate_data(case_data(patch)).spec)
    return next(f for f in result.findings if f.code == "MIX003" and f.path == "data.sources.web.tokens")


def test_a_source_mixed_with_others_gets_new_weights() -> None:
    finding = mix003({"data.sources.web.tokens": "100M"})
    assert "scale its mixture weights by" in finding.fix and "renormalize the rest" in finding.fix


def test_a_source_alone_in_its_phases_is_not_told_to_renormalize() -> None:
    patch = {"data.sources.web.tokens": "100M", **{f"phases[{i}].mixture": ALONE for i in range(4)}}
    finding = mix003(patch)
    assert "renormalize" not in finding.fix, finding.fix
    assert "whole mixture of foundation, enrich, long, anneal" in finding.fix
    assert "on 0." in finding.fix and "x the tokens" in finding.fix  # the factor that gives 4 epochs
