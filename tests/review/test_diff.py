"""`runlib diff`: field changes with both files' lines, the plan's changes, findings in and out, the stages
that rerun, the exit status, and the layering (no torch, accelerate or mlflow)."""

import json

import pytest

from runlib.cli import main
from runlib.graph.build import build_graph
from runlib.plan import derive
from runlib.review.diff import diff_files, render_markdown, render_text, review_graph
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.heavy import heavy_imports

DEMO = ROOT / "specs" / "demo.yaml"
LONG_ANNEAL = ROOT / "specs" / "variants" / "demo-long-anneal.yaml"
LLAMA2 = ROOT / "specs" / "llama2-7b.yaml"
LLAMA2_RAMP = ROOT / "specs" / "variants" / "llama2-7b-ramp.yaml"
TINY = ROOT / "tests" / "fixtures" / "tiny.yaml"


def edited(tmp_path, name, old, new, base=TINY):
    text = base.read_text()
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.fixture(scope="module", autouse=True)
def _no_artifacts(tmp_path_factory):
    """An empty work directory: no tokenized source of this machine changes the epochs compared here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RUNLIB_WORK_DIR", str(tmp_path_factory.mktemp("work")))
        yield


@pytest.fixture(scope="module")
def demo_diff():
    return diff_files(DEMO, LONG_ANNEAL)


def test_demo_long_anneal_fields_plan_and_reruns(demo_diff):
    d = demo_diff
    fields = {c.path: (c.a, c.b, c.line_a, c.line_b) for c in d.fields}
    assert set(fields) == {"name", "description", "schedule.decay", "phases[0].tokens", "phases[3].tokens"}
    assert fields["phases[3].tokens"][:2] == ("8%", "16%")
    # the lines are where each file has the value
    demo_lines, variant_lines = DEMO.read_text().splitlines(), LONG_ANNEAL.read_text().splitlines()
    assert "decay: 8%" in demo_lines[fields["schedule.decay"][2] - 1]
    assert "decay: 16%" in variant_lines[fields["schedule.decay"][3] - 1]
    rows = {(r.section, r.quantity): r for r in d.plan}
    assert (rows["phase anneal", "tokens"].a, rows["phase anneal", "tokens"].b) == (163_840, 327_680)
    assert rows["phase anneal", "steps"].b == 80 and not rows["run", "parameters"].changed
    assert rows["phase long", "LR at start"].changed is False  # inside the stable part of the WSD schedule
    assert ("run", "core-hours") in rows and d.hours_unit == "core-hours"
    # data, tokenizer and tokenization keep their keys; every phase reruns (the foundation phase shrank)
    assert {r.stage for r in d.reruns} == {"train_phase", "eval_phase"} and len(d.reruns) == 8
    assert all(r.key_before for r in d.reruns)
    assert d.rerun_device_hours == pytest.approx(sum(r.device_hours for r in d.reruns if r.stage == "train_phase"))
    assert {f.code for f in d.appeared} == {"PHASE002"} and d.exit_code() == 0


def test_markdown_is_a_pull_request_comment(demo_diff):
    md = render_markdown(demo_diff)
    assert md.startswith("### runlib diff") and "no new audit errors; 8 of 36 stages rerun" in md
    assert "| `phases[3].tokens` | 8% | 16% |" in md
    assert "| phase anneal | tokens | 163,840 | 327,680 | +100.0% |" in md
    assert "| train_phase anneal |" in md
    text = render_text(demo_diff)
    assert "phases[3].tokens: 8% -> 16%" in text


def test_llama2_batch_ramp_with_absent_input_files():
    d = diff_files(LLAMA2, LLAMA2_RAMP)
    assert {c.path for c in d.fields} >= {"batch.ramp[1].global_batch", "batch.ramp[1].after"}
    rows = {(r.section, r.quantity): r for r in d.plan if r.changed}
    assert rows["phase pretrain", "steps"].b < rows["phase pretrain", "steps"].a
    assert "SCHED004" in {f.code for f in d.appeared}
    assert [r.instance for r in d.reruns] == ["train_phase pretrain", "eval_phase pretrain"]
    # the data and the tokenizer file are not on this machine: placeholders on both sides
    assert d.placeholder_sources == ["public_mix", "tokenizer.pretrained"] and d.hours_unit == "GPU-hours"
    assert d.rerun_device_hours > 100_000  # 2T tokens of a 7B model


def test_same_value_written_differently_is_no_change(tmp_path):
    b = edited(tmp_path, "b.yaml", "global_batch: 1Ki tokens", "global_batch: 1024 tokens")
    b2 = edited(tmp_path, "b2.yaml", "kind: adamw, lr: 3.0e-3", "kind: adamw, eps: 1.0e-8, lr: 3.0e-3")  # the default
    d = diff_files(TINY, b)
    assert d.fields == [] and d.reruns == [] and not [r for r in d.plan if r.changed]
    assert diff_files(TINY, b2).fields == []


def test_tokenizer_edit_reruns_tokenizer_and_all_after_it_not_curation(tmp_path):
    b = edited(tmp_path, "b.yaml", "train_bytes: 400K", "train_bytes: 300K")
    d = diff_files(TINY, b)
    stages = {r.stage for r in d.reruns}
    assert stages == {"train_tokenizer", "tokenize", "train_phase", "eval_phase"}


def test_review_graph_equals_the_workflow_graph():
    spec = load_spec(TINY).spec
    graph, placeholders = review_graph(spec, derive(spec))
    assert placeholders == []
    assert [(n.instance, n.key) for n in graph.nodes] == [(n.instance, n.key) for n in build_graph(spec).nodes]


def test_exit_1_on_a_new_error_and_json(tmp_path, capsys):
    b = edited(
        tmp_path,
        "b.yaml",
        "mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}",
        "mixture: {docs: 0.5, code: 0.4, arithmetic: 0.2}",
    )
    assert main(["diff", str(TINY), str(b), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["errors"]["new"] >= 1 and any(f["code"] == "MIX001" for f in out["findings"]["appeared"])
    assert out["exit_code"] == 1
    # the reverse fixes the error: exit 0
    assert main(["diff", str(b), str(TINY)]) == 0


def test_bad_input_exits_2_without_traceback(tmp_path, capsys):
    assert main(["diff", str(TINY), str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert "missing.yaml" in err and "Traceback" not in err
    bad = edited(tmp_path, "bad.yaml", "layers: 2", "layers: two")
    assert main(["diff", str(bad), str(TINY)]) == 2
    assert "model.layers" in capsys.readouterr().err


def test_diff_and_shrink_do_not_import_heavy_modules(tmp_path):
    code = (
        "from runlib.cli import main;"
        f"main(['diff', {str(DEMO)!r}, {str(LONG_ANNEAL)!r}, '--format', 'markdown']);"
        f"main(['shrink', {str(LLAMA2)!r}, '-o', {str(tmp_path / 's.yaml')!r}])"
    )
    assert not {"torch", "accelerate", "mlflow"} & set(heavy_imports(code, tmp_path))


LADDER = ROOT / "specs" / "demo-ladder.yaml"
BRANCHES = ROOT / "specs" / "variants" / "demo-branches.yaml"


def test_rung_and_branch_reruns_carry_their_own_hours(tmp_path):
    from runlib.graph.configs import branch_specs, without_branches
    from runlib.ladder.rungs import ladder_rungs

    # a ladder: the rungs rerun, each with its own plan's hours (not the 1.3M-parameter target's)
    b = edited(tmp_path, "ladder-b.yaml", "lr: 4.0e-3", "lr: 3.0e-3", base=LADDER)
    d = diff_files(LADDER, b)
    spec = load_spec(b).spec
    rungs = {r.name: r.plan for r in ladder_rungs(spec, derive(spec)).rungs}
    trains = [r for r in d.reruns if r.stage == "train_phase"]
    assert len(trains) == 2 * len(rungs)
    for r in trains:
        rung, phase = r.instance.removeprefix("train_phase ").split("/")
        plan = rungs[rung]
        (own,) = [p for p in plan.phases if p.name == phase]
        assert r.device_hours == pytest.approx(own.hours * plan.devices)
    target = derive(spec)
    assert max(r.device_hours for r in trains) < target.phases[0].hours * target.devices
    # branches: only the branched phase reruns, each branch by its own tokens
    c = edited(tmp_path, "branches-b.yaml", "tokens: 12%, decay: 12%", "tokens: 10%, decay: 10%", base=BRANCHES)
    d = diff_files(BRANCHES, c)
    spec = load_spec(c).spec
    plans = {name: derive(s) for name, s in branch_specs(spec, derive(without_branches(spec))).items()}
    trains = {r.instance: r.device_hours for r in d.reruns if r.stage == "train_phase"}
    last = spec.phases[-1].name
    plan = plans["long-decay"]
    assert trains == {f"train_phase {last}@long-decay": pytest.approx(plan.phases[-1].hours * plan.devices)}
    base = derive(without_branches(spec))
    assert trains[f"train_phase {last}@long-decay"] != pytest.approx(base.phases[-1].hours * base.devices)
