"""AUDIT001: an audit.ignore entry that names an unknown code, has no reason, or matches nothing.

Why it matters:
    audit.ignore silences a finding with a written reason. An entry with a misspelled code
    silences nothing while the author believes a problem is accepted; an entry whose finding no
    longer occurs is stale and would silently hide the problem if it came back; an entry without
    a reason silences nothing either (a finding may be silenced only with a written reason).
    AUDIT001 itself cannot be ignored.

Flagged:
    audit: {ignore: {MON01: "no spike policy in smoke tests", PHASE002: ""}}

Preferred:
    audit: {ignore: {MON001: "no spike policy in smoke tests"}}

How to fix:
    Correct the code (the finding suggests the closest known one), write the reason, or remove the
    entry once its finding is gone.
"""

import difflib
from collections.abc import Iterator

from runlib.audit.registry import Context, Finding, case

CODE = "AUDIT001"
NAME = "stale-audit-ignore"
SEVERITY = "warning"


def check(ctx: Context) -> Iterator[Finding]:
    ignore = ctx.spec.audit.ignore
    if not ignore:
        return
    from runlib.audit.checks import all_checks  # lazily: this module is itself one of the checks

    known = sorted(c.code for c in all_checks())
    fired = {f.code for f in ctx.prior}
    for key, reason in ignore.items():
        code = key.upper()
        path = f"audit.ignore.{key}"
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
        elif not reason.strip():
            yield ctx.finding(
                path,
                f"audit.ignore.{key} has no reason: it silences nothing (a finding is silenced only with a written reason)",
                f'write why {code} is acceptable for this run, e.g. {key}: "deliberate: ..."',
            )
        elif code not in fired:
            yield ctx.finding(
                path,
                f"audit.ignore.{key} matches no finding: {code} does not fire on this spec",
                "remove the entry (it would silently hide the problem if it came back)",
            )


PASS = [{}, {"monitor.spike": "__delete__"}]  # MON001 fires, and nothing is ignored
FAIL = [
    case({"audit.ignore": {"XYZ999": "typo"}}, "warning"),  # unknown code
    case({"audit.ignore": {"MON001": "we do not monitor"}}, "warning"),  # matches no finding
    case({"audit.ignore": {"MON001": "  "}, "monitor.spike": "__delete__"}, "warning"),  # no reason
]
