"""The RUN checks and the rules behind them (runlib.plan.enact): the audit reports what the trainer
cannot enact, the workflow gate refuses it, and the trainer's last guard reads the same rules."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.audit.checks import all_checks
from runlib.errors import UserError
from runlib.plan import derive
from runlib.plan.enact import train_config_refusals
from runlib.plan.memory import phase_memory
from runlib.spec import load_spec_text, validate_data
from runlib.train.config import build_train_phase_configs
from runlib.train.phase import train_phase
from runlib.workflow.snake import GateRefused, Workflow
from tests.conftest import ROOT

DEMO = ROOT / "specs" / "demo.yaml"
RUN_CHECKS = [c for c in all_checks() if c.code.startswith("RUN")]
# refusals of planning-only fields, which no stage config carries (the stage trains with the value its config
# holds): the workflow gate is their only guard
GATE_ONLY = {"RUN010"}  # batch.ramp[].micro_batch: the trainer uses batch.micro_batch throughout
# refusals of what other stages read (an input format, a named file): those stages fail on it themselves, the
# gate refuses it first (tests/audit/test_gate_fields.py)
NOT_TRAINING = {"RUN011", "RUN012", "RUN013"}
GUARDED = [c for c in RUN_CHECKS if c.code not in GATE_ONLY | NOT_TRAINING]


def _phase_refusals(spec, index: int = 0) -> set[str]:
    """The codes the trainer's guard raises for one phase, from the phase's stage config."""
    config = build_train_phase_configs(spec, derive(spec))[index]
    return {r.code for r in train_config_refusals(config)}


def test_run_family_is_a_warning_family():
    assert [c.code for c in RUN_CHECKS] == [f"RUN{i:03d}" for i in range(1, 15)]
    assert {c.severity for c in RUN_CHECKS} == {"warning"}


@pytest.mark.parametrize(
    ("check", "case"),
    [(c, f) for c in GUARDED for f in c.fails],
    ids=lambda x: getattr(x, "code", None) or "",
)
def test_trainer_guard_refuses_what_the_audit_flags(check, case):
    spec = validate_data(case_data(case.patch)).spec
    codes = set().union(*(_phase_refusals(spec, i) for i in range(len(spec.phases))))
    assert check.code in codes
    finding = next(f for f in audit(spec, select={check.code}).findings if f.code == check.code)
    assert "the runner refuses it" in finding.message
    assert re.match(r"(phases\[\d+\]\.)?(parallelism|precision|optimizer|model|hardware)\.", finding.path)


@pytest.mark.parametrize(("check", "case"), [(c, f) for c in RUN_CHECKS if c.code in GATE_ONLY for f in c.fails])
def test_gate_only_refusals_are_planning_only_fields_the_audit_flags(check, case):
    spec = validate_data(case_data(case.patch)).spec
    finding = next(f for f in audit(spec, select={check.code}).findings if f.code == check.code)
    assert "the runner refuses it" in finding.message
    assert re.fullmatch(r"batch\.ramp\[\d+\]\.micro_batch", finding.path)
    # no stage config holds the value (only the plan's memory estimate, recorded beside the measurement, moves)
    ramp = [{k: v for k, v in stage.items() if k != "micro_batch"} for stage in case.patch["batch.ramp"]]
    plain = validate_data(case_data({**case.patch, "batch.ramp": ramp})).spec

    def configs(s):
        return [c.model_dump(exclude={"estimates"}) for c in build_train_phase_configs(s, derive(s))]

    assert configs(spec) == configs(plain)


@pytest.mark.parametrize(("check", "case"), [(c, p) for c in RUN_CHECKS for p in c.passes])
def test_trainer_guard_accepts_the_pass_cases(check, case):
    spec = validate_data(case_data(case.patch)).spec
    for i in range(len(spec.phases)):
        assert check.code not in _phase_refusals(spec, i)


def test_context_parallelism_is_refused_only_where_the_chunks_do_not_fit():
    """Context 2 on cpu is enacted (gloo all-gathers the keys); a seq_len that 2 x cp does not divide is not."""
    fits = validate_data(case_data({"hardware.accelerator": "cpu", "parallelism.context": 2})).spec
    assert [f for f in audit(fits, select={"RUN001"}).findings if f.code == "RUN001"] == []
    patch = {"phases[2].parallelism": {"context": 2, "tensor": 4}, "phases[2].seq_len": 4100}
    spec = validate_data(case_data(patch)).spec  # 4100 cuts into 4 chunks, but a rank's 2050 not into tensor 4
    (finding,) = [f for f in audit(spec, select={"RUN001"}).findings if f.code == "RUN001"]
    assert finding.path == "phases[2].parallelism.context" and "seq_len 4100 is not divisible by 8" in finding.message
    assert "divisible by 8" in finding.fix


def _demo_with(tmp_path, text: str):
    path = tmp_path / "variant.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def gate_env(work, tmp_path, monkeypatch):
    # Workflow sets these for the stage jobs; monkeypatch restores them after the test
    for name in ("RUNLIB_SPEC", "RUNLIB_PYTHON"):
        monkeypatch.setenv(name, "")
    return tmp_path


def test_gate_refuses_a_context_degree_the_sequence_does_not_divide(gate_env, capsys):
    # three times the processes, the sequence in 2 x 3 chunks: 256 tokens do not cut into 6
    text = (
        DEMO.read_text().replace("context: 1,", "context: 3,", 1).replace("devices_per_node: 2", "devices_per_node: 6")
    )
    spec = load_spec_text(text).spec
    assert (spec.parallelism.context, spec.hardware.devices_per_node) == (3, 6)
    spec_path = _demo_with(gate_env, text)
    with pytest.raises(GateRefused, match="the audit found"):
        Workflow(spec_path)
    err = capsys.readouterr().err
    assert re.search(r"variant\.yaml:64:\d+: PAR004 parallelism\.context", err)  # the audit's error
    assert "not divisible by 2 x" in err


def test_gate_refusal_is_not_lifted_by_audit_ignore(gate_env, capsys):
    text = DEMO.read_text().replace("compute: fp32,", "compute: fp8,", 1)
    text = text.replace("  ignore:\n", '  ignore:\n    RUN006: "we want fp8"\n    PREC003: "we want fp8"\n', 1)
    spec_path = _demo_with(gate_env, text)
    with pytest.raises(GateRefused):
        Workflow(spec_path)
    assert "RUN006 precision.compute" in capsys.readouterr().err


def test_gate_passes_the_demo(gate_env):
    workflow = Workflow(str(DEMO))
    assert workflow.graph.of("train_phase")


def test_hsdp_memory_shards_within_a_node():
    spec = validate_data(
        case_data({"hardware.nodes": 2, "hardware.devices_per_node": 4, "parallelism.sharding": "fsdp"})
    ).spec
    plan = derive(spec)
    s = plan.phases[0].settings
    hsdp = replace(s, parallelism=s.parallelism.model_copy(update={"sharding": "hsdp"}))

    def memory(settings, nodes):
        return phase_memory(spec.model, spec.precision, plan.params, plan.vocab_rows, settings, 1.0, nodes)

    fsdp_mem, one_node, two_nodes = memory(s, 2), memory(hsdp, 1), memory(hsdp, 2)
    assert one_node == fsdp_mem  # one node: hsdp is fsdp
    for part in ("weights", "master_weights", "gradients", "optimizer_states"):
        assert getattr(two_nodes, part) == pytest.approx(2 * getattr(fsdp_mem, part))  # 4 shards, not 8
    assert two_nodes.buffers == fsdp_mem.buffers and two_nodes.activations == fsdp_mem.activations


def test_train_phase_stage_refuses_what_the_gate_refuses(tmp_path):
    """A train_phase run by hand (past the gate) stops before launching anything."""
    spec = validate_data(case_data({"parallelism.context": 2, "model.position": "alibi"})).spec
    config = build_train_phase_configs(spec, derive(spec))[0]
    with pytest.raises(UserError, match="RUN001 parallelism.context"):
        train_phase(config, {}, tmp_path / "out", "0" * 16)
    assert not (tmp_path / "out").exists()
