"""The anchor sources of the quality filters (curate.classifier.positives, curate.perplexity.reference): each
must be another source of the spec whose own curation has no quality filter, so that the models are trained
on finished data and the stage graph has no cycle."""

from __future__ import annotations

from runlib.spec.models import RunSpec


def anchor_problems(spec: RunSpec) -> list[tuple[str, str]]:
    """(field path, problem) for each anchor that is unknown, the source itself, or itself filtered."""
    sources = spec.data.sources
    filtered = {n for n, s in sources.items() if s.curate.classifier is not None or s.curate.perplexity is not None}
    problems = []
    for name, source in sources.items():
        curate = source.curate
        fields = (
            ("classifier.positives", curate.classifier.positives if curate.classifier else []),
            ("perplexity.reference", curate.perplexity.reference if curate.perplexity else []),
        )
        for field, anchors in fields:
            for i, anchor in enumerate(anchors):
                path = f"data.sources.{name}.curate.{field}[{i}]"
                if anchor not in sources:
                    problems.append((path, f"unknown source {anchor!r}; sources: {', '.join(sources)}"))
                elif anchor == name:
                    problems.append((path, f"{anchor!r} is this source: name another source, whose text to keep"))
                elif anchor in filtered:
                    problems.append(
                        (path, f"source {anchor!r} has a quality filter itself: anchor on a source without one")
                    )
    return problems
