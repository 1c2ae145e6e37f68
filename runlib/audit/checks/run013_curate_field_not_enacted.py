"""RUN013: a curation value that no stage enacts on this machine.

Why it matters:
    curate.pii: ner asks for names and places to be masked by a named-entity model. runlib ships no such
    model and nothing is downloaded at run time, so without curate.ner.model a run that went ahead would
    keep every name while its spec says they were masked; and a curate.ner under another pii value would be
    a model named for nothing. The workflow gate refuses both before any job starts; the rule-based kinds
    (e-mail, public IPv4 and IPv6 addresses, phone numbers, Luhn-valid card numbers) are enacted, and so is
    pii: ner with a model.

Flagged:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz"}, curate: {pii: ner}}}}

Preferred:
    data: {sources: {web: {domain: web, input: {format: warc, path: "crawl/*.warc.gz"}, curate: {pii: mask}}}}

How to fix:
    Give the model (curate.ner: {model: PATH}, a spaCy pipeline folder), or use pii: mask or drop. A warning in `runlib audit`; the
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
    {"data.sources.web.curate.pii": "ner", "data.sources.web.curate.ner": {"model": "models/ner"}},
]
FAIL = [
    case({"data.sources.web.curate.pii": "ner"}, "warning"),
    case({"data.sources.web.curate.pii": "mask", "data.sources.web.curate.ner": {"model": "models/ner"}}, "warning"),
]
