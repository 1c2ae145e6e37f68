"""`snakemake --until train_phase` stopped with Snakemake's "BUG: Out of jobs ready to be started": each phase's job depends on the previous phase's, and Snakemake's --until starts no
job depending on an --until job (runlib/workflow/until.py). The gate now refuses it before any job, with
the targets that build every phase and stop there."""

from __future__ import annotations

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from runlib.store.settings import done_stamp
from runlib.workflow.until import self_dependent_stages, until_from_argv, until_refusal
from tests.conftest import ROOT
from tests.workflow.conftest import TINY, snakemake


def test_until_train_phase_is_refused_with_the_command_that_works(tmp_path):
    proc = snakemake(tmp_path, TINY, "-n", "--cores", "2", "--until", "train_phase")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "BUG" not in out.replace('("BUG: Out of jobs ready"', ""), out[-3000:]
    assert "runlib: --until train_phase: each train_phase job depends on another" in out, out[-3000:]
    graph = build_graph(load_spec(TINY).spec)
    last = max(graph.of("train_phase"), key=lambda n: int(n.params.get("phase", 0)))
    # the command runs from anywhere: the Snakefile named, the targets before --config (runlib.store.command)
    assert f"-s {ROOT / 'Snakefile'} --cores 2 {tmp_path / 'work' / 'done' / 'train_phase' / last.key} --config" in out


def test_only_self_dependent_rules_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path))
    graph = build_graph(load_spec(TINY).spec)
    assert self_dependent_stages(graph) == {"train_phase"}
    assert until_refusal(["tokenize", "eval_phase"], graph, done_stamp, "tiny.yaml") is None
    assert until_from_argv(["snakemake", "-n", "--until", "tokenize", "train_phase", "--cores", "2"]) == [
        "tokenize",
        "train_phase",
    ]
    assert until_from_argv(["snakemake", "--until=train_phase"]) == ["train_phase"]
