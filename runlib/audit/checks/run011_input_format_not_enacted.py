"""RUN011: a source field that only a warc source enacts, set on a source of another format.

Why it matters:
    input.extract turns a page's HTML into text and curate.url_filter reads each page's URL: both need
    a warc source (WARC response records carry the HTML and the WARC-Target-URI). A jsonl, parquet, text
    or builtin source holds text without URLs, so the field would do nothing while the spec says it
    does; the workflow gate refuses it before any job starts.

Flagged:
    data: {sources: {web: {domain: web, input: {format: jsonl, path: "web/*.jsonl", extract: trafilatura}}}}

Preferred:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz", extract: trafilatura}}}}

How to fix:
    Use format warc for HTML pages, or remove the field. A warning in `runlib audit` (a planned spec may
    still change its input); the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import input_refusals

CODE = "RUN011"
NAME = "input-field-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in input_refusals(ctx.spec.data.sources):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


PASS = [
    {},
    {"data.sources.web.input.format": "parquet", "data.sources.web.input.path": "data/web/*.parquet"},
    {
        "data.sources.web.input.format": "warc",
        "data.sources.web.input.path": "crawl/*.warc.gz",
        "data.sources.web.input.extract": "trafilatura",
        "data.sources.web.curate.url_filter": {"banned_words": ["casino"]},
    },
]
FAIL = [
    case({"data.sources.web.input.extract": "trafilatura"}, "warning"),
    case({"data.sources.web.curate.url_filter": {"banned_words": ["casino"]}}, "warning"),
]
