"""RUN013: a curation value that no stage enacts on this machine.

Why it matters:
    curate.pii: ner asks for names and places to be masked by a named-entity model. runlib ships no such
    model and nothing is downloaded at run time, so a run that went ahead would keep every name while its
    spec says they were masked. The workflow gate refuses it before any job starts; the rule-based kinds
    (e-mail, public IPv4 and IPv6 addresses, phone numbers, Luhn-valid card numbers) are enacted.

Flagged:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz"}, curate: {pii: ner}}}}

Preferred:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz"}, curate: {pii: mask}}}}

How to fix:
    Use pii: mask or drop, or mask names before the data reaches runlib. A warning in `runlib audit`; the
    workflow gate refuses it.
"""

from collections.abc import Iterator

from runlib.audit.checks._refusals import REFUSED
from runlib.audit.registry import Context, Finding, case
from runlib.plan.enact import curate_refusals

CODE = "RUN013"
NAME = "curate-field-not-enacted"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    for r in curate_refusals(ctx.spec.data.sources):
        yield ctx.finding(r.field, f"{r.reason}{REFUSED}", r.fix)


PASS = [
    {},
    {"data.sources.web.curate.pii": "mask"},
    {"data.sources.web.curate.pii": "drop"},
]
FAIL = [
    case({"data.sources.web.curate.pii": "ner"}, "warning"),
]
