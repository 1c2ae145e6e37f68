"""The quality filters' anchors are checked at load: each names another source of the spec that has no quality
filter itself (else the models would train on unfinished data, or the graph would have a cycle)."""

from __future__ import annotations

import pytest

from runlib.audit.cases import case_data
from runlib.errors import SpecError
from runlib.spec import validate_data

WEB = {"domain": "web", "input": {"format": "builtin", "name": "python_docs"}}
WIKI = {"domain": "wiki", "input": {"format": "builtin", "name": "python_docs"}}


def _spec(web_curate: dict, wiki_curate: dict | None = None):
    sources = {"web": {**WEB, "curate": web_curate}, "wiki": {**WIKI, "curate": wiki_curate or {}}}
    return validate_data(case_data({"data.sources": sources}))


@pytest.mark.parametrize(
    ("web_curate", "wiki_curate", "path", "message"),
    [
        ({"classifier": {"positives": ["nope"]}}, None, "classifier.positives[0]", "unknown source 'nope'"),
        ({"perplexity": {"reference": ["web"]}}, None, "perplexity.reference[0]", "'web' is this source"),
        (
            {"classifier": {"positives": ["wiki"]}},
            {"perplexity": {"reference": ["web"]}},
            "classifier.positives[0]",
            "source 'wiki' has a quality filter itself",
        ),
    ],
)
def test_a_bad_anchor_is_a_spec_error_at_its_field(web_curate, wiki_curate, path, message):
    with pytest.raises(SpecError) as exc:
        _spec(web_curate, wiki_curate)
    assert f"data.sources.web.curate.{path}" in str(exc.value) and message in str(exc.value)


def test_good_anchors_load_and_one_rule_each():
    spec = _spec({"classifier": {"positives": ["wiki"]}, "perplexity": {"reference": ["wiki"], "order": 4}}).spec
    assert spec.data.sources["web"].curate.classifier.positives == ["wiki"]
    with pytest.raises(SpecError, match="give one of keep_top_fraction and keep_threshold"):
        _spec({"classifier": {"positives": ["wiki"], "keep_top_fraction": 0.1, "keep_threshold": 0.5}})
    with pytest.raises(SpecError, match=r"keep_percentiles \[50.0, 10.0\]"):
        _spec({"perplexity": {"reference": ["wiki"], "keep_percentiles": [50, 10]}})
