"""AUDIT001: an audit.ignore entry that names an unknown code, has no reason, matches nothing, or hides more than it names.

Why it matters:
    audit.ignore silences a finding with a written reason. An entry with a misspelled code
    silences nothing while the author believes a problem is accepted; an entry whose finding no
    longer occurs is stale and would silently hide the problem if it came back; an entry without
    a reason silences nothing either (a finding may be silenced only with a written reason).
    `CODE@PATH` silences the code only at PATH and under it; a bare `CODE` silences it at every
    path, so a new finding of the same code elsewhere (another source repeated too often, another
    phase) is hidden by a reason written for something else: when a bare code hides findings at
    more than one path this check lists them (an info), so that the entry can be narrowed.
    AUDIT001 itself cannot be ignored.

Flagged:
    audit: {ignore: {MON01: "no spike policy in smoke tests", PHASE002: ""}}
    audit: {ignore: {MIX003: "wiki is small"}}        # also hides MIX003 on the code source

Preferred:
    audit: {ignore: {MON001: "no spike policy in smoke tests"}}
    audit: {ignore: {"MIX003@data.sources.wiki": "wiki is small"}}

How to fix:
    Correct the code (the finding suggests the closest known one), write the reason, remove the
    entry once its finding is gone, or narrow a bare code to the path it was meant for with
    `CODE@PATH` (the finding lists the paths it hides).
"""

import difflib
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case, ignore_entries, summarize

CODE = "AUDIT001"
NAME = "stale-audit-ignore"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    ignore = ctx.spec.audit.ignore
    if not ignore:
        return
    from runlib.audit.checks import all_checks  # lazily: this module is itself one of the checks

    known = sorted(c.code for c in all_checks())
    for entry in ignore_entries(ignore):
        key, code = entry.key, entry.code
        path = f"audit.ignore.{key}"
        hidden = [f for f in ctx.prior if entry.covers(f)]
        if code not in known:
            close = difflib.get_close_matches(code, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            yield ctx.finding(
                path,
                f"audit.ignore names {key!r}, which is not a check code: it silences nothing",
                f"{hint}use a code from `runlib explain`, or remove the entry",
                value=close[0] if close else None,
            )
        elif code == CODE:
            yield ctx.finding(
                path, f"{CODE} findings cannot be ignored", "remove the entry; fix what AUDIT001 reports instead"
            )
        elif entry.path == "":
            yield ctx.finding(
                path,
                f"audit.ignore.{key} has no path after '@': it silences nothing",
                f"name the finding's path, e.g. {code}@checkpoint.every, or write the bare code {code} for every path",
            )
        elif not entry.reason.strip():
            yield ctx.finding(
                path,
                f"audit.ignore.{key} has no reason: it silences nothing (a finding is silenced only with a written reason)",
                f'write why {code} is acceptable for this run, e.g. {key}: "deliberate: ..."',
            )
        elif not hidden:
            fired = sorted({f.path for f in ctx.prior if f.code == code})
            elsewhere = entry.path is not None and fired
            where = f"fires at {summarize(fired)}, not at {entry.path}" if elsewhere else "does not fire on this spec"
            yield ctx.finding(
                path,
                f"audit.ignore.{key} matches no finding: {code} {where}",
                "remove the entry (it would silently hide the problem if it came back)"
                + (f", or point it at the path meant: {code}@<path>" if elsewhere else ""),
            )
        elif entry.path is None and len(paths := sorted({f.path for f in hidden})) > 1:
            yield ctx.finding(
                path,
                f"audit.ignore.{key} is a bare code: it hides {len(hidden)} {code} findings at {len(paths)} paths "
                f"({summarize(paths)}), each silenced with the one reason {entry.reason.strip()!r}",
                f'name the path it was written for, e.g. "{code}@{paths[0]}": ..., so that {code} elsewhere is reported',
                severity="info",
            )


PASS = [
    {},
    {"monitor.spike": "__delete__"},  # MON001 fires, and nothing is ignored
    {"monitor.spike": "__delete__", "audit.ignore": {"MON001@monitor.spike": "no spikes in smoke tests"}},
    {"monitor.spike": "__delete__", "audit.ignore": {"MON001@monitor": "no spikes in smoke tests"}},  # under it
    {"monitor.spike": "__delete__", "audit.ignore": {"MON001": "no spikes in smoke tests"}},  # one path only
]
FAIL = [
    case({"audit.ignore": {"XYZ999": "typo"}}, "warning"),  # unknown code
    case({"audit.ignore": {"MON001": "we do not monitor"}}, "warning"),  # matches no finding
    case({"audit.ignore": {"MON001": "  "}, "monitor.spike": "__delete__"}, "warning"),  # no reason
    # the path names something MON001 does not fire at
    case({"monitor.spike": "__delete__", "audit.ignore": {"MON001@monitor.eval_every": "x"}}, "warning"),
    case({"monitor.spike": "__delete__", "audit.ignore": {"MON001@": "x"}}, "warning"),  # no path after @
    # a bare code hides MIX003 on both sources (each used 10x): an info listing both paths
    case(
        {"data.sources.web.tokens": "200M", "data.sources.code.tokens": "50M", "audit.ignore": {"MIX003": "small"}},
        "info",
    ),
]
