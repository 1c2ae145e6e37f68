"""PACK003: fim on a source that is not code.

Why it matters:
    Fill-in-the-middle teaches infilling at a cursor, which is what code editors ask of a model
    (Bavarian et al., arXiv 2207.14255; StarCoder, arXiv 2305.06161, applies it to code only).
    On prose, math or dialogue the rewritten documents (prefix, suffix, then the middle) are out
    of order text the model is never asked to produce, and at rate 0.5 half of that source's
    documents lose their left-to-right form. Usually fim was copied into the wrong source.

Flagged:
    data: {sources: {web: {domain: web, fim: {rate: 0.5}}}}

Preferred:
    data: {sources: {code: {domain: code, fim: {rate: 0.5}}, web: {domain: web}}}

How to fix:
    Remove fim from the non-code source (or set its rate to 0); if the source is code, set its
    domain: code.
"""

from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "PACK003"
NAME = "fim-on-non-code"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for name, src in ctx.spec.data.sources.items():
        if src.fim is not None and src.fim.rate > 0 and src.domain != "code":
            yield ctx.finding(
                f"data.sources.{name}.fim",
                f"source {name!r} (domain: {src.domain}) has fim with rate {src.fim.rate:g}: {src.fim.rate:.0%} of its "
                "documents are rewritten as prefix/suffix/middle, a code-infilling format, on non-code text",
                f"remove fim from data.sources.{name} (or set its domain: code if it is code)",
            )


PASS = [
    {},
    {"data.sources.web.fim": {"rate": 0.0}},
    {"data.sources.web.domain": "code", "data.sources.web.fim": {"rate": 0.5}},
]
FAIL = [
    case({"data.sources.web.fim": {"rate": 0.5, "spm_rate": 0.5}}, "warning"),
    case({"data.sources.code.domain": "math"}, "warning"),
]
