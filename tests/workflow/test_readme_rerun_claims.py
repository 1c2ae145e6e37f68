"""The README's claims about what an edit reruns, one test per claim.

Each test quotes its claim (and fails when the README no longer says it), edits a spec the way the claim
says, builds the stage graph of both and compares the stage keys: a stage reruns exactly when its key
changes or it is new. Pure key computation, nothing is built. The claim that planning-only fields rerun
nothing is tests/spec/test_fields_enacted.py's test_planning_only_fields_change_no_key.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runlib.graph.build import StageGraph, build_graph
from runlib.spec import load_spec
from runlib.spec.models import RunSpec
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES
from tests.workflow.conftest import TINY
from tests.workflow.test_stage_configs import SKIP, graph_of, leaves, other_value, set_path

README = " ".join((ROOT / "README.md").read_text().split())
DEMO = ROOT / "specs" / "demo.yaml"
SPECS = pytest.mark.parametrize("spec_file", [DEMO, TINY], ids=["demo", "tiny"])


def claim(text: str) -> None:
    """The README still says `text` (whitespace-insensitive): the test checks a claim the user reads."""
    assert " ".join(text.split()) in README, f"the README no longer says: {text!r}; update this test with it"


def reruns(before: StageGraph, after: StageGraph) -> set[str]:
    """Stage instances of `after` that would run: a key not in `before` under the same instance name."""
    old = {n.instance: n.key for n in before.nodes}
    return {n.instance for n in after.nodes if old.get(n.instance) != n.key}


def spec_data(spec_file) -> tuple[RunSpec, dict[str, Any]]:
    spec = load_spec(spec_file).spec
    return spec, spec.model_dump(mode="json")


def edits_under(spec: RunSpec, data: dict[str, Any], prefix: tuple) -> list[tuple[str, dict[str, Any]]]:
    """(dotted path, edited spec data) for every leaf under `prefix` given another valid value."""
    out = []
    for path, value, annotation in leaves(spec):
        if path[: len(prefix)] != prefix:
            continue
        new = other_value(value, annotation)
        if new is SKIP:
            continue
        edited = set_path(data, path, new)
        try:
            graph_of(edited)
        except Exception:  # the edit does not load or derive: no spec a user could run
            continue
        out.append((".".join(map(str, path)), edited))
    return out


# ------------------------------------------------------------------------------------------ the claims


@SPECS
def test_renaming_a_run_reruns_nothing(spec_file) -> None:
    claim("`name` (renaming a run reruns nothing)")
    claim("renaming a run or editing its schedule reuses the curated data and the tokenizer")
    _, data = spec_data(spec_file)
    base = graph_of(data)
    renamed = graph_of({**data, "name": "another-name"})
    assert not reruns(base, renamed)
    assert [n.key for n in renamed.nodes] == [n.key for n in base.nodes]


@SPECS
def test_editing_the_schedule_reuses_the_curated_data_and_the_tokenizer(spec_file) -> None:
    claim("renaming a run or editing its schedule reuses the curated data and the tokenizer")
    spec, data = spec_data(spec_file)
    base = graph_of(data)
    edits = edits_under(spec, data, ("schedule",))
    assert {p for p, _ in edits} >= {"schedule.kind", "schedule.warmup", "schedule.decay", "schedule.min_lr_ratio"}
    for path, edited in edits:
        rerun = reruns(base, graph_of(edited))
        assert rerun, f"{path}: the edit reran nothing (not an edit of what training reads)"
        data_reruns = {i for i in rerun if i.split()[0] in DATA_STAGES}
        assert not data_reruns, f"{path} reruns data stages {sorted(data_reruns)}"


@SPECS
def test_editing_the_eval_section_reruns_only_evaluation(spec_file, tmp_path) -> None:
    """The issue's case: eval.heldout_tokens was read by the held-out evaluation inside training, so
    editing it retrained all four phases; that evaluation reads monitor.eval_tokens now."""
    claim("editing the eval section reruns only evaluation and the report")
    spec, data = spec_data(spec_file)
    base = graph_of(data)
    task_file = tmp_path / "task.jsonl"
    task_file.write_text('{"context": "1 + 1 =", "choices": [" 2", " 3"], "answer": 0}\n')
    source = next(iter(data["data"]["sources"]))
    eval_edits = [
        ("eval.heldout_tokens", {"heldout_tokens": 4096 if data["eval"]["heldout_tokens"] != 4096 else 2048}),
        ("eval.heldout_tokens (to all)", {"heldout_tokens": None}),
        ("eval.after_each_phase", {"after_each_phase": not data["eval"]["after_each_phase"]}),
        (
            "eval.tasks (one added)",
            {"tasks": [*data["eval"]["tasks"], {"name": "added", "kind": "multiple_choice", "from_heldout": source}]},
        ),
        ("eval.tasks (a task file)", {"tasks": [{"name": "file", "kind": "multiple_choice", "path": str(task_file)}]}),
    ]
    edits = [(p, {**data, "eval": {**data["eval"], **e}}) for p, e in eval_edits]
    edits = [(p, e) for p, e in edits if e != data]  # tiny evaluates all held-out tokens already
    edits += edits_under(spec, data, ("eval",))
    for path, edited in edits:
        after = graph_of(edited)
        rerun = reruns(base, after)
        assert rerun or path == "eval.after_each_phase", f"{path}: the edit reran nothing"
        others = {i for i in rerun if not i.startswith("eval_phase ")}
        assert not others, f"{path} reruns {sorted(others)}, not only evaluations"
    # the held-out loss during training is monitor's: editing it retrains (and only then)
    more = copy.deepcopy(data)
    more["monitor"]["eval_tokens"] = 4096
    rerun = reruns(base, graph_of(more))
    assert {i.split()[0] for i in rerun} == {"train_phase", "eval_phase"}


@SPECS
def test_editing_the_last_phase_reruns_only_that_phase_and_what_follows(spec_file) -> None:
    claim("editing the last phase reruns only that phase and what follows")
    spec, data = spec_data(spec_file)
    base = graph_of(data)
    last = len(data["phases"]) - 1
    name = data["phases"][last]["name"]
    edits = edits_under(spec, data, ("phases", last))
    edits = [(p, e) for p, e in edits if not p.endswith(".tokens")]  # a shorter phase: the caveat below
    longer = 1.25 * float(str(data["phases"][last]["tokens"]).rstrip("%"))
    edits.append((f"phases.{last}.tokens (longer)", set_path(data, ("phases", last, "tokens"), f"{longer}%")))
    exercised = 0
    for path, edited in edits:
        after = graph_of(edited)
        rerun = reruns(base, after)
        new_name = edited["phases"][last]["name"]
        mine = {f"{stage} {n}" for stage in ("train_phase", "eval_phase") for n in (name, new_name)}
        assert rerun <= mine, f"{path} reruns {sorted(rerun - mine)} besides the last phase"
        exercised += bool(rerun)
    assert exercised >= 4, f"only {exercised} edits of the last phase changed a key"

    # the README's caveat: halving the last phase lets the schedule's decay (a share of the run) reach
    # back into the phase before it, which reruns too; nothing earlier does
    shorter = float(str(data["phases"][last]["tokens"]).rstrip("%")) / 2
    rerun = reruns(base, graph_of(set_path(data, ("phases", last, "tokens"), f"{shorter}%")))
    before_last = data["phases"][last - 1]["name"]
    claim(
        "unless a shorter last phase lets the schedule's decay, a share of the whole run, reach back into the phase before: that one reruns too"
    )
    assert {i.split()[1] for i in rerun} == {name, before_last}


def test_editing_the_tracking_experiment_reruns_nothing() -> None:
    claim(
        "Two more fields reach no stage key by design: `name` (renaming a run reruns nothing) and `tracking.experiment`"
    )
    _, data = spec_data(DEMO)
    assert not reruns(graph_of(data), graph_of({**data, "tracking": {"experiment": "elsewhere"}}))


def test_ladder_rungs_reuse_the_targets_data_stages() -> None:
    claim("The rungs reuse the target's curation, tokenizer and tokenization stages (same keys, built once)")
    spec = load_spec(ROOT / "tests" / "ladder" / "ladder-tiny.yaml").spec
    ladder = build_graph(spec)
    target = build_graph(spec.model_copy(update={"ladder": None}))
    for stage in DATA_STAGES:
        assert [n.key for n in ladder.of(stage)] == [n.key for n in target.of(stage)], stage
    assert len(ladder.of("train_phase")) > len(target.of("train_phase"))  # the rungs are there


def test_the_diff_example_reruns_8_of_36_stages() -> None:
    claim("8 of 36 stages rerun (their keys change)")
    base = graph_of(spec_data(DEMO)[1])
    variant = graph_of(spec_data(ROOT / "specs" / "variants" / "demo-long-anneal.yaml")[1])
    assert (len(reruns(base, variant)), len(variant.nodes)) == (8, 36)
