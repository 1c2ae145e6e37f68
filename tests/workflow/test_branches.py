"""Branches of the last phase (PhaseSpec.branches): the graph trains the shared prefix once and each branch as a
train_phase + eval_phase of its own; the plan view, the dry run, the report's comparison and the audit."""

import re
import subprocess
import sys

import pytest

from runlib.audit import audit_loaded
from runlib.errors import UserError
from runlib.graph.build import build_graph, is_branch
from runlib.graph.configs import branch_specs, without_branches
from runlib.graph.plan_view import plan_rows, render
from runlib.plan import derive
from runlib.report.collect import BranchRun
from runlib.report.document import branch_table
from runlib.spec import load_spec
from runlib.spec.models import PhaseBranch
from tests.conftest import ROOT
from tests.workflow.conftest import snakemake

BRANCHES = ROOT / "specs" / "variants" / "demo-branches.yaml"
DEMO = ROOT / "specs" / "demo.yaml"


@pytest.fixture(scope="module")
def loaded():
    return load_spec(BRANCHES)


@pytest.fixture(scope="module")
def graph(loaded):
    return build_graph(loaded.spec)


def test_prefix_and_base_phase_keys_are_the_unbranched_specs(graph):
    # the variant differs from the demo by its name and the branches only, and no config holds the name
    demo = build_graph(load_spec(DEMO).spec)
    assert [(n.instance, n.key) for n in graph.nodes if not is_branch(n)] == [(n.instance, n.key) for n in demo.nodes]


def test_one_train_and_eval_per_branch_from_the_shared_checkpoint(graph):
    trains, evals = graph.branch_nodes("train_phase"), graph.branch_nodes("eval_phase")
    assert sorted(trains) == ["code-heavy", "long-decay", "reseeded"] and sorted(evals) == [*sorted(trains), "soup"]
    long = graph.phase_node("train_phase", 2)
    base = graph.phase_node("train_phase", 3)
    assert base.instance == "train_phase anneal" and not is_branch(base)
    for name, train in trains.items():
        assert train.instance == f"train_phase anneal@{name}"
        assert train.inputs["previous"] == long.key == base.inputs["previous"]
        assert evals[name].instance == f"eval_phase anneal@{name}"
        assert evals[name].inputs["model"] == train.key
    assert len(graph.of("train_phase")) == 7 and len(graph.of("eval_phase")) == 8
    assert len({n.key for n in graph.nodes}) == len(graph.nodes)


def test_the_soup_averages_its_ingredients_and_is_evaluated_as_a_phase(graph):
    (soup,) = graph.of("soup_phase")
    base, reseeded = graph.phase_node("train_phase", 3), graph.branch_nodes("train_phase")["reseeded"]
    assert soup.instance == "soup_phase anneal@soup"
    assert soup.inputs == {"ingredient0": base.key, "ingredient1": reseeded.key}
    assert soup.config.weights == [0.5, 0.5]
    evaluated = graph.branch_nodes("eval_phase")["soup"]
    assert evaluated.instance == "eval_phase anneal@soup" and evaluated.inputs["model"] == soup.key
    # evaluated as the anneal is (same context, tasks, held-out tokens), recorded under the soup's name
    as_phase = graph.phase_node("eval_phase", 3).config
    assert (
        evaluated.config.model_copy(update={"phase": "anneal"}) == as_phase and evaluated.config.phase == "anneal@soup"
    )


def test_a_branch_seed_reorders_only_that_branch(graph):
    base, reseeded = graph.phase_node("train_phase", 3).config, graph.branch_nodes("train_phase")["reseeded"].config
    assert reseeded.loader.phase_seed == 2662 and base.loader.phase_seed is None
    assert reseeded.loader.model_copy(update={"phase_seed": None}) == base.loader
    assert reseeded.model_copy(update={"loader": base.loader}) == base  # nothing else differs


def test_branch_settings(loaded, graph):
    spec = loaded.spec
    trains = graph.branch_nodes("train_phase")
    base = graph.phase_node("train_phase", 3).config
    heavy, long_decay = trains["code-heavy"].config, trains["long-decay"].config
    assert heavy.span == base.span and heavy.schedule == base.schedule and heavy.loader != base.loader
    total = spec.tokens
    assert long_decay.span.start_tokens == base.span.start_tokens
    assert long_decay.span.end_tokens == pytest.approx(total * 1.04, abs=4096)  # 92% + 12% of the run
    assert long_decay.schedule.decay_start_tokens == pytest.approx(base.span.start_tokens)  # decay: 12%
    assert base.schedule.decay_start_tokens == pytest.approx(base.span.start_tokens)  # decay: 8% = the anneal
    assert long_decay.monitor == base.monitor  # log interval pinned to the base run's


def _with_branches(spec, index: int, *branches: dict):
    phases = list(without_branches(spec).phases)
    phases[index] = phases[index].model_copy(update={"branches": [PhaseBranch.model_validate(b) for b in branches]})
    return spec.model_copy(update={"phases": phases})


def test_branch_errors_name_the_field(loaded):
    spec = loaded.spec
    plan = derive(without_branches(spec))
    with pytest.raises(UserError, match=r"phases\[0\]\.branches \(foundation\): only the last phase"):
        branch_specs(_with_branches(spec, 0, {"name": "x", "tokens": "70%"}), plan)
    with pytest.raises(UserError, match=r"phases\[3\]\.branches \(early\): .*earlier phase long \(schedule\)"):
        branch_specs(_with_branches(spec, 3, {"name": "early", "decay": "10%"}), plan)
    with pytest.raises(UserError, match=r"phases\[3\]\.branches \(same\): trains exactly as anneal;"):
        build_graph(
            _with_branches(spec, 3, {"name": "same", "mixture": {"docs": 0.4, "code": 0.35, "arithmetic": 0.25}})
        )


def test_bad_branch_exits_2_with_the_field(tmp_path):
    text = BRANCHES.read_text().replace("{name: long-decay,", "{name: code-heavy,")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = subprocess.run([sys.executable, "-m", "runlib", "plan", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "branches" in out.stderr and "code-heavy given twice" in out.stderr and "Traceback" not in out.stderr


SOUP = "    soup: {ingredients: [anneal, reseeded]}"


@pytest.mark.parametrize(
    ("soup", "needle"),
    [
        ("    soup: {ingredients: [anneal, reseded]}", "reseded is neither the phase nor one of its branches"),
        ("    soup: {ingredients: [anneal]}", "at least 2"),
        ("    soup: {ingredients: [anneal, anneal]}", "each model once"),
        ("    soup: {name: code-heavy}", "give the soup another name"),
        ("    soup: {ingredients: [anneal, reseeded], weights: [1, 2]}", "weights"),
    ],
)
def test_bad_soup_exits_2_with_the_field(tmp_path, soup, needle):
    text = BRANCHES.read_text()
    assert SOUP in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(SOUP, soup))
    out = subprocess.run([sys.executable, "-m", "runlib", "plan", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "soup" in out.stderr and needle in out.stderr and "Traceback" not in out.stderr


def test_a_soup_of_other_context_lengths_or_without_branches_is_refused(tmp_path):
    anneal = "mixture: {docs: 0.4, code: 0.35, arithmetic: 0.25}}"
    for path, old, new, needle in [
        (BRANCHES, "{name: reseeded, seed: 2662}", "{name: reseeded, seed: 2662, seq_len: 128}", "different seq_len"),
        (DEMO, anneal, anneal[:-1] + ", soup: {}}", "soup needs branches"),
    ]:
        text = path.read_text()
        assert old in text
        bad = tmp_path / "bad.yaml"
        bad.write_text(text.replace(old, new))
        out = subprocess.run([sys.executable, "-m", "runlib", "plan", str(bad)], capture_output=True, text=True)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_soup_of_a_branch_that_writes_the_models_context_is_one_length(tmp_path):
    # the phase omits seq_len (model.seq_len 256) and the branch writes 256: one context length, souped
    text = BRANCHES.read_text().replace("{name: reseeded, seed: 2662}", "{name: reseeded, seed: 2662, seq_len: 256}")
    assert "seq_len: 256}" in text
    spec_file = tmp_path / "same-length.yaml"
    spec_file.write_text(text)
    assert len(build_graph(load_spec(spec_file).spec).of("soup_phase")) == 1


def test_plan_view_shows_the_prefix_then_the_branches(graph):
    text = render(plan_rows(graph), "demo-branches.yaml")
    lines = text.splitlines()
    prefix = lines.index("shared prefix (trained once; every branch starts from its last checkpoint):")
    branched = lines.index("branched phase, from the end of train_phase long: the phase as written, then each branch")
    assert prefix < branched
    assert [line.split()[1] for line in lines[branched + 1 : branched + 11]] == [
        "anneal",
        "anneal",
        "anneal@code-heavy",
        "anneal@code-heavy",
        "anneal@long-decay",
        "anneal@long-decay",
        "anneal@reseeded",
        "anneal@reseeded",
        "anneal@soup",
        "anneal@soup",
    ]
    assert lines[-1] == "3 branches (code-heavy, long-decay, reseeded) and a soup (soup) share 34 prefix stages"
    unbranched = plan_rows(build_graph(load_spec(DEMO).spec))
    assert all("part" not in r for r in unbranched)  # the JSON rows of a spec without branches are unchanged


def test_dry_run_trains_the_prefix_once_and_each_branch_once(tmp_path, graph):
    out = snakemake(tmp_path, BRANCHES, "-n")
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", text, re.M))
    assert counts["train_phase"] == "7" and counts["eval_phase"] == "8"  # 4 phases + 3 branches (+ the soup's eval)
    assert counts["soup_phase"] == "1"
    assert counts["tokenize"] == "6" and counts["train_tokenizer"] == "1"
    jobs = re.findall(r"rule train_phase:.*?wildcards: key=(\w+)", text, re.S)
    assert sorted(jobs) == sorted(n.key for n in graph.of("train_phase"))  # each once


def test_branch_table_from_synthetic_evaluations(loaded):
    plan = derive(without_branches(loaded.spec))
    phase = plan.phases[-1]

    def run(label: str, loss: float, acc: float | None) -> BranchRun:
        tasks = {"docs-continuation": {"kind": "multiple_choice", "n": 60, "acc": acc, "acc_norm": 0.5}}
        data = {"heldout": {"docs": {"loss": loss}, "code": {"loss": loss + 1}}, "tasks": tasks if acc else {}}
        return BranchRun(label, None, phase, plan.devices, None, None, data)

    table = branch_table(
        [run("anneal", 3.0, 0.25), run("anneal@code-heavy", 2.5, 0.5), run("anneal@long-decay", 2.75, None)],
        ["docs", "code", "arithmetic"],
        "core-hours",
    )
    rows = {r[0]: r[1:] for r in table.rows}
    assert table.headers == ("", "anneal", "anneal@code-heavy", "anneal@long-decay")
    assert rows["held-out loss: docs"] == ("3.0000", "2.5000", "2.7500")
    assert rows["held-out loss: code"] == ("4.0000", "3.5000", "3.7500")
    assert rows["held-out loss: arithmetic"] == ("n/a", "n/a", "n/a")
    assert rows["docs-continuation (acc)"] == ("0.2500", "0.5000", "–")
    assert rows["planned core-hours"][0] == format(phase.hours * plan.devices, ".3g")
    assert rows["measured core-hours"] == ("–", "–", "–")


def test_audit_of_the_branches_spec_has_no_error(loaded):
    result = audit_loaded(loaded)
    assert result.count("error") == 0, [f.code for f in result.findings if f.severity == "error"]


def test_a_branch_is_named_for_export_as_its_stages_are(loaded, graph):
    spec = loaded.spec
    node = graph.named_phase_node(spec, "train_phase", "anneal@long-decay", "here")
    assert node is graph.branch_nodes("train_phase")["long-decay"]
    assert graph.named_phase_node(spec, "train_phase", "anneal", "here") is graph.phase_node("train_phase", 3)
    with pytest.raises(UserError, match=r"here: 'anneal@long-decy' is not a phase.*did you mean 'anneal@long-decay'"):
        graph.named_phase_node(spec, "train_phase", "anneal@long-decy", "here")
    # the soup's model is its soup_phase's final.pt; its evaluation is named as its stages are
    assert graph.named_phase_node(spec, "train_phase", "anneal@soup", "here") is graph.of("soup_phase")[0]
    assert graph.named_phase_node(spec, "eval_phase", "anneal@soup", "here") is graph.branch_nodes("eval_phase")["soup"]
