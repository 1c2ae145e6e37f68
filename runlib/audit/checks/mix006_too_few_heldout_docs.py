"""MIX006: too few held-out documents per source.

Why it matters:
    Each source is a channel with its own held-out perplexity, the signal that shows whether a
    phase or a mixture change helps or hurts that domain. With fewer than ~200 documents the
    per-source loss is dominated by which documents happened to be picked (document losses vary
    widely), so differences between evaluations are noise; with none there is no per-source
    signal at all.

Flagged:
    data: {heldout_docs: 20}

Preferred:
    data: {heldout_docs: 200}

How to fix:
    Set data.heldout_docs to at least 200 (the documents are taken out of training, a negligible
    share of any real source).
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "MIX006"
NAME = "too-few-heldout-docs"
SEVERITY = "warning"
MIN_DOCS = 200


def check(ctx: Context) -> Iterator[Finding]:
    n = ctx.spec.data.heldout_docs
    if n >= MIN_DOCS:
        return
    trained = sorted({name for p in ctx.spec.phases for name, w in p.mixture.items() if w > 0})
    if n == 0 and trained:
        message = f"heldout_docs: 0: no held-out documents, so sources {', '.join(trained)} get no held-out loss"
    else:
        message = (
            f"heldout_docs: {n}: per-source held-out loss from fewer than {MIN_DOCS} documents is too noisy to compare"
        )
    yield ctx.finding(
        "data.heldout_docs",
        message,
        f"set data.heldout_docs: {MIN_DOCS} (or more)",
        value=MIN_DOCS,
    )


PASS = [{}, {"data.heldout_docs": 1000}]
FAIL = [
    case({"data.heldout_docs": 199}, "warning"),
    case({"data.heldout_docs": 0}, "warning"),
]
