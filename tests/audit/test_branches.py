"""The branches of the last phase, audited as the runs they will be (runlib.audit.branches): a finding a
branch's run has and the base run lacks is reported at the branch's path and line; good branches add nothing."""

import pytest

from runlib.audit import audit_loaded
from runlib.audit.branches import own_path
from runlib.graph.configs import branch_specs
from runlib.plan import derive
from runlib.spec import load_spec, load_spec_text
from runlib.spec.branches import branch_run, without_branches
from tests.conftest import ROOT
from tests.heavy import heavy_imports

BRANCHES = ROOT / "specs" / "variants" / "demo-branches.yaml"
DEMO = ROOT / "specs" / "demo.yaml"
CODE_HEAVY = "{name: code-heavy, mixture: {docs: 0.2, code: 0.6, arithmetic: 0.2}}"
LONG_DECAY = "{name: long-decay, tokens: 12%, decay: 12%}"


def _audit(*edits: tuple[str, str]):
    """The audit of demo-branches.yaml with each (old, new) text replaced once, and the text."""
    text = BRANCHES.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return audit_loaded(load_spec_text(text, "branches.yaml")), text


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _found(result) -> list[tuple[str, str, str]]:
    return [(f.code, f.path, f.message) for f in result.findings]


def test_good_branches_add_no_finding():
    # demo-branches is the demo plus two sound branches (one of them a 12% anneal: PHASE001/PHASE002 stay out)
    assert _found(audit_loaded(load_spec(BRANCHES))) == _found(audit_loaded(load_spec(DEMO)))


def test_a_branch_mixture_that_does_not_sum_to_one_is_flagged_at_the_branch_line():
    bad = "{name: code-heavy, mixture: {docs: 0.2, code: 0.5, arithmetic: 0.2}}"
    result, text = _audit((CODE_HEAVY, bad))
    mix = [f for f in result.findings if f.code == "MIX001"]
    assert [f.path for f in mix] == ["phases[3].branches[0].mixture"]
    assert mix[0].line == _line_of(text, "name: code-heavy") and mix[0].severity == "error"
    assert mix[0].message.startswith("branch 'code-heavy': ") and "sum to 0.9" in mix[0].message
    assert mix[0].value == {"docs": 0.222222, "code": 0.555556, "arithmetic": 0.222222}
    assert result.exit_code() == 1


def test_an_unknown_branch_source_is_flagged_not_raised():
    result, _ = _audit((CODE_HEAVY, "{name: code-heavy, mixture: {docs: 0.2, cod: 0.6, arithmetic: 0.2}}"))
    (unknown,) = [f for f in result.findings if f.code == "MIX002"]
    assert unknown.path == "phases[3].branches[0].mixture.cod" and unknown.value == "code"


def test_a_longer_branch_context_on_the_same_rope_theta_is_flagged_at_its_seq_len():
    # a branch at 1024 on the rope_theta 10,000 is above the bound there (~3,400): not flagged; at 8192 (~100,000) it is
    result, _ = _audit((LONG_DECAY, "{name: long-decay, seq_len: 1024}"))
    assert not [f for f in result.findings if f.code == "PHASE004"]
    result, text = _audit((LONG_DECAY, "{name: long-decay, seq_len: 8192}"))
    (rope,) = [f for f in result.findings if f.code == "PHASE004"]
    assert rope.path == "phases[3].branches[1].seq_len" and rope.line == _line_of(text, "name: long-decay")
    assert "at phases[3].rope_theta" in rope.message and "seq_len 8192 with rope_theta 10,000" in rope.message
    assert rope.value is None  # the value is for phases[3].rope_theta, which the branch cannot set


def test_a_long_branch_is_flagged_at_the_branch_and_the_base_findings_are_not_repeated():
    result, _ = _audit((LONG_DECAY, "{name: long-decay, tokens: 50%, decay: 50%}"))
    (budget,) = [f for f in result.findings if f.code == "BUDGET001"]
    assert budget.path == "phases[3].branches[1]" and "at budget.days" in budget.message
    assert [f.path for f in result.findings if f.code == "BUDGET003"] == ["tokens"]  # the base run's, not repeated
    assert not [f for f in result.findings if f.code in ("PHASE001", "PHASE002")]
    # the decay, 50% of the run's tokens over a branch's run of 142%: 35%, over SCHED005's 30%
    (decay,) = [f for f in result.findings if f.code == "SCHED005"]
    assert decay.path == "phases[3].branches[1].decay" and "35% of the run" in decay.message
    assert decay.fix.startswith("set phases[3].branches[1].decay to 10-20% of the run")


def test_ignore_entries_reach_branch_findings_and_are_not_stale():
    bad = "{name: code-heavy, mixture: {docs: 0.2, code: 0.5, arithmetic: 0.2}}"
    ignore = '    MIX001@phases[3].branches[0]: "a deliberate under-weighted branch"\n'
    anchor = "audit:\n  ignore:\n"
    result, _ = _audit((CODE_HEAVY, bad), (anchor, anchor + ignore))
    assert [i.finding.path for i in result.ignored if i.finding.code == "MIX001"] == ["phases[3].branches[0].mixture"]
    assert not [f for f in result.findings if f.code in ("MIX001", "AUDIT001")]


def test_a_branch_run_is_the_one_the_workflow_trains():
    spec = load_spec(BRANCHES).spec
    trained = branch_specs(spec, derive(without_branches(spec)))
    for b in spec.phases[-1].branches:
        run = branch_run(spec, b)
        assert run.model_copy(update={"monitor": trained[b.name].monitor}) == trained[b.name]


@pytest.mark.parametrize(
    ("path", "fields", "mapped"),
    [
        ("phases[3].mixture", ["mixture"], "phases[3].branches[1].mixture"),
        ("phases[3].mixture.web", ["mixture", "tokens"], "phases[3].branches[1].mixture.web"),
        ("phases[3].tokens", ["tokens"], "phases[3].branches[1].tokens"),
        ("schedule.decay", ["tokens", "decay"], "phases[3].branches[1].decay"),
        ("schedule.decay", ["tokens"], None),
        ("phases[3].mixtures", ["mixture"], None),
        ("phases[3].rope_theta", ["seq_len"], None),
        ("phases[2].mixture", ["mixture"], None),
    ],
)
def test_own_path(path, fields, mapped):
    assert own_path(path, 3, 1, fields) == mapped


def test_the_branch_audit_imports_nothing_heavy(tmp_path):
    code = (
        "from runlib.graph.measured import audit_spec_file; audit_spec_file('specs/demo.yaml');"
        "audit_spec_file('specs/variants/demo-branches.yaml')"
    )
    assert heavy_imports(code, tmp_path) == []
