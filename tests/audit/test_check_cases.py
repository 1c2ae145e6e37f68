"""Every check fires on each of its fail cases and stays silent on each of its pass cases."""

import pytest

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.audit.checks import all_checks
from runlib.spec import validate_data

CASES = [
    pytest.param(check, kind, c, id=f"{check.code}-{kind}{i}")
    for check in all_checks()
    for kind, cases in (("pass", check.passes), ("fail", check.fails))
    for i, c in enumerate(cases)
]


@pytest.mark.parametrize(("check", "kind", "case"), CASES)
def test_check_case(check, kind, case):
    spec = validate_data(case_data(case.patch)).spec
    # AUDIT001 reads the other checks' findings (what an ignore entry matches): it runs with all of them
    result = audit(spec, select=None if check.code == "AUDIT001" else {check.code})
    mine = [f for f in result.findings if f.code == check.code]
    if kind == "pass":
        assert mine == [], f"{check.code} fired on a pass case: {[f.message for f in mine]}"
    else:
        assert mine, f"{check.code} stayed silent on a fail case {case.patch}"
        if case.severity:
            assert case.severity in {f.severity for f in mine}
        for f in mine:
            assert f.message and f.fix and f.path
