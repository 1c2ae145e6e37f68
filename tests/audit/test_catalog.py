"""Meta-tests of the check catalog: every code of CATALOG (kept here by hand, so that a check added or
removed is a deliberate change) is a registered, documented check with pass and fail cases, and the base
spec of the cases is clean."""

import re

import pytest

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.audit.checks import all_checks
from runlib.spec import validate_data

CATALOG = """
PAR001 PAR002 PAR003 PAR004 PAR005 PAR006 BATCH001 BATCH002 BATCH003 BATCH004 BATCH005
SCHED001 SCHED002 SCHED003 SCHED004 SCHED005 SCHED006 SCHED007 SCHED008 SCHED009 SCHED010 OPT001 OPT002
OPT003 OPT004 OPT005
PREC001 PREC002 PREC003 PREC004 PREC005 PREC006 PREC007 TOK001 TOK002 TOK003 TOK004 TOK005 TOK006 TOK007
PACK001 PACK002 PACK003 PACK004 MIX001 MIX002 MIX003 MIX004 MIX005 MIX006 PHASE001 PHASE002
PHASE003 PHASE004 PHASE005 PHASE006 MEM001 MEM002 BUDGET001 BUDGET002 BUDGET003 BUDGET004
CKPT001 CKPT002 CKPT003 MON001 MON002 MON003 RUN001 RUN002 RUN003 RUN004 RUN005 RUN006 RUN007 RUN008 RUN009
RUN010 RUN011 RUN012 RUN013 RUN014
MOE001 MOE002 MOE003 MOE004 MOE005 MOE006 MOE007
SRC001 AUDIT001
""".split()
SECTIONS = ("Why it matters:", "Flagged:", "Preferred:", "How to fix:")


def test_every_catalog_code_is_registered():
    registered = {c.code for c in all_checks()}
    assert sorted(set(CATALOG) - registered) == []
    assert sorted(registered - set(CATALOG)) == []


def test_codes_and_names_unique():
    checks = all_checks()
    assert len({c.code for c in checks}) == len({c.name for c in checks}) == len(checks)


@pytest.mark.parametrize("check", all_checks(), ids=lambda c: c.code)
def test_check_is_documented_and_has_cases(check):
    assert re.fullmatch(r"[A-Z]+[0-9]{3}", check.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", check.name)
    assert check.severity in ("error", "warning", "info")
    assert check.doc.startswith(f"{check.code}: ")
    positions = [check.doc.find(s) for s in SECTIONS]
    assert all(p > 0 for p in positions) and positions == sorted(positions), f"sections {SECTIONS} in order"
    assert check.module.rsplit(".", 1)[-1].startswith(check.code.lower() + "_")
    assert check.passes and check.fails


def test_base_spec_is_clean(tmp_path, monkeypatch):
    for source in ("web", "code"):  # its input files, where SRC001 looks for them (relative to the cwd)
        (tmp_path / "data" / source).mkdir(parents=True)
        (tmp_path / "data" / source / "part-0.jsonl").write_text('{"text": "a document"}\n')
    monkeypatch.chdir(tmp_path)
    result = audit(validate_data(case_data({})).spec)
    assert [(f.code, f.message) for f in result.findings] == []
