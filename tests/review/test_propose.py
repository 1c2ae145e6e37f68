"""`runlib propose`: a spec that spends a budget by the compute-optimal fit and audits clean."""

from __future__ import annotations

import math
import re

import pytest

from runlib.audit import audit_loaded
from runlib.cli import build_parser, main
from runlib.plan import derive
from runlib.plan.scaling import refit_optimum
from runlib.review.propose import propose
from runlib.spec.hardware import CATALOG
from runlib.spec.schema_export import schema_json
from tests.conftest import ROOT

# (accelerator, devices, days): a small, a mid-size and a large budget
BUDGETS = [("a100-80gb", 8, 3.0), ("h100-sxm", 64, 14.0), ("h100-sxm", 512, 30.0)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A real file behind the proposal's source, so that the source check (the glob matches) passes."""
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "part-0.jsonl").write_text('{"text": "hello"}\n')
    return f"web={folder}/*.jsonl:web:1000T"


@pytest.mark.parametrize(("accelerator", "devices", "days"), BUDGETS)
def test_proposal_audits_clean_and_sits_on_the_fit(corpus, accelerator, devices, days):
    proposal = propose(accelerator, devices, days, data=corpus)
    result = audit_loaded(proposal.loaded)
    errors = [f"{f.code} {f.path}: {f.message}" for f in result.findings if f.severity == "error"]
    assert not errors, errors
    warnings = [f.code for f in result.findings if f.severity == "warning"]
    assert not warnings, warnings

    plan = derive(proposal.loaded.spec)
    # the fit's optimum at the compute it counts, C = 6 N D (Besiroglu et al. 2024), recomputed here
    n_opt, d_opt = refit_optimum(6.0 * plan.params.total * plan.tokens_total)
    assert abs(plan.params.total / n_opt - 1) <= 0.10, (plan.params.total, n_opt)
    assert abs(plan.tokens_total / d_opt - 1) <= 0.10, (plan.tokens_total, d_opt)
    # it spends the budget: at most the device-hours and days given, at least 90% of them
    budget_hours = devices * days * 24
    assert 0.90 * budget_hours <= plan.gpu_hours <= budget_hours
    assert plan.wall_days <= days
    spec = proposal.loaded.spec
    assert spec.schedule.kind == "wsd" and spec.phases[-1].kind == "anneal"
    assert spec.parallelism.tensor == spec.parallelism.pipeline == spec.parallelism.context == 1
    # the checkpoint interval is Young's optimum for the Llama 3 failure rate, not a guess
    ck = plan.checkpoint
    assert ck.young_optimum_hours and 1 / 1.5 <= ck.interval_hours / ck.young_optimum_hours <= 1.5
    for line in ("model.layers", "batch.grad_accum", "optimizer.lr", "checkpoint.every", "tokens"):
        key = line.rsplit(".", 1)[-1]
        assert any(row.strip().startswith(f"{key}:") and "#" in row for row in proposal.text.splitlines()), key


def test_bigger_budget_bigger_model_and_more_tokens(corpus):
    small, large = (propose(a, n, d, data=corpus) for a, n, d in BUDGETS[:2])
    assert large.params > 3 * small.params and large.tokens > 3 * small.tokens
    assert propose(*BUDGETS[0], data=corpus).text == small.text  # deterministic


def test_budget_share_and_fit_are_stated_in_the_header():
    proposal = propose("a100-80gb", 8, 3.0)
    head = proposal.text.split("\nname:")[0]
    assert "Besiroglu et al. 2024" in head and "N_opt" in head and "D_opt" in head
    assert "placeholder" in head  # no --data: the source is a placeholder, said so
    assert math.isclose(proposal.loaded.spec.data.sources["web"].tokens, proposal.tokens)  # one epoch


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--accelerator", "h100", "--devices", "8", "--days", "1"], "unknown accelerator 'h100'"),
        (["--accelerator", "h100-sxm", "--devices", "12", "--days", "1"], "multiple of 8"),
        (["--accelerator", "h100-sxm", "--devices", "8", "--days", "0"], "--days"),
        (["--accelerator", "cpu", "--devices", "2", "--days", "0.01"], "outside the shapes"),
        (["--accelerator", "h100-sxm", "--devices", "8", "--days", "1", "--data", "web:1T"], "NAME=GLOB:DOMAIN:TOKENS"),
        (["--accelerator", "h100-sxm", "--devices", "8", "--days", "1", "--data", "missing.yaml"], "file not found"),
    ],
)
def test_bad_budget_exits_2(capsys, argv, needle):
    assert main(["propose", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_readme_propose_example_quotes_the_real_output(capsys):
    """Issue 28 item 8: the README quoted 'checkpoint every 320 steps' where the command says 1800. Run the
    README's example as written and compare the lines it quotes with what the command prints."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```\n\$ runlib propose (?P<args>[^\n]*)\n(?P<quoted>.*?)```", readme, re.S)
    assert block, "the README's propose example"
    assert main(["propose", *block["args"].split()]) == 0
    printed = capsys.readouterr().err
    quoted = " ".join(block["quoted"].split())
    assert quoted == " ".join(printed.splitlines()[0].split())
    assert "checkpoint every" in quoted


def test_the_hardware_pointer_lists_the_catalog(capsys):
    """`runlib propose --help` and the schema send the reader to `runlib explain hardware`: it lists every
    accelerator key (it used to answer 'unknown check code')."""
    help_text = build_parser()._subparsers._group_actions[0].choices["propose"].format_help()
    assert "`runlib explain hardware`" in " ".join(help_text.split())
    assert "`runlib explain hardware`" in schema_json()
    assert main(["explain", "hardware"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert set(CATALOG) <= listed
