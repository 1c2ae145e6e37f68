"""RUN011: a source whose input format the curation stage cannot read (WARC).

Why it matters:
    The schema accepts input.format: warc so that a spec can plan a web crawl (Common Crawl ships
    WARC files), but runlib's curation stage reads jsonl, parquet, text and builtin sources only: a
    WARC source passed schema, audit, diff and plan and then failed in its first curation job. Web
    curation (WARC records, HTML extraction) is not built yet; until then the workflow gate
    refuses the spec before any job starts.

Flagged:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz"}}}}

Preferred:
    data: {sources: {web: {domain: web, input: {format: jsonl, path: "crawl/*.jsonl"}}}}
    # one {"text": ...} object per line, extracted from the WARC records beforehand

How to fix:
    Convert the records to jsonl (e.g. the text of each response record, one JSON object per line)
    and point input.path at those files. A warning in `runlib audit` (a planned spec may name WARC
    input); the workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.enact import input_refusals
from runlib.audit.registry import Context, Finding, case

CODE = "RUN011"
NAME = "input-format-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in input_refusals(ctx.spec.data.sources):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix, value="jsonl")


PASS = [{}, {"data.sources.web.input.format": "parquet", "data.sources.web.input.path": "data/web/*.parquet"}]
FAIL = [
    case({"data.sources.web.input.format": "warc", "data.sources.web.input.path": "crawl/*.warc.gz"}, "warning"),
]
