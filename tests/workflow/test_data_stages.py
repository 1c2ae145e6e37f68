"""The whole DAG, run by real Snakemake on a small spec: data stages, four training phases,
evaluation and the report; no-op rerun, rebuild byte for byte, keys that ignore what a stage does not
read, partial reruns after an edit, the audit gate, MLflow children."""

import json
import shutil
import sqlite3

import pytest

from runlib.graph.build import build_graph
from runlib.graph.plan_view import plan_rows
from runlib.spec import load_spec
from runlib.store.keys import spec_key
from runlib.store.manifest import read_manifest
from tests.conftest import ROOT
from tests.workflow.conftest import TINY, snakemake

pytestmark = pytest.mark.slow


def evals(graph) -> list[dict]:
    return [
        json.loads((n.dir / "eval.json").read_text())
        for n in sorted(graph.of("eval_phase"), key=lambda n: n.params["phase"])
    ]


def jobs_run(proc) -> list[str]:
    """Rule names of the jobs a Snakemake run (or dry run) executes, from its log."""
    return [
        line.split()[1].rstrip(":")
        for line in proc.stderr.splitlines() + proc.stdout.splitlines()
        if line.startswith(("rule ", "localrule "))
    ]


def edited(tmp_path, name: str, old: str, new: str):
    text = TINY.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def export_and_compare(node, out, spec=TINY, shaped_as=None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from runlib.model.transformer import Transformer
    from runlib.train import checkpoint as ckpt

    # the Snakemake target (rules/export.smk), which runs `runlib export`
    proc = snakemake(out.parents[2], spec, "--cores", "1", f"exports/tiny/{out.name}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = (shaped_as or node).config  # a soup is shaped as its ingredients
    ours = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows)
    ours.load_state_dict(ckpt.load(node.dir / "final.pt")["model"])
    ours.set_rope(cfg.rope_theta, cfg.seq_len)
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer("def main():\n    return 1 + 2\n")["input_ids"]])
    theirs = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        assert (ours.eval()(ids) - theirs(ids).logits).abs().max().item() < 1e-5
    assert tokenizer.decode(ids[0]) == "def main():\n    return 1 + 2\n"


def test_data_dag_end_to_end(workdir):
    """The tiny spec's data stages built by Snakemake, then each artifact checked in stage order.

    Over 80 lines: one Snakemake build (minutes) feeds every check."""
    spec = load_spec(TINY).spec
    first = snakemake(workdir, TINY, "--cores", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    graph = build_graph(spec)
    assert all(row["built"] for row in plan_rows(graph))
    heldout: dict[str, int] = {}
    for node in graph.of("tokenize"):  # one job per curate shard; the held-out documents spread over them
        manifest = json.loads(node.manifest_path.read_text())
        assert manifest["counts"]["tokens_train"] > 0
        heldout[node.params["source"]] = heldout.get(node.params["source"], 0) + manifest["counts"]["docs_heldout"]
    assert heldout == dict.fromkeys(spec.data.sources, 20)

    # training ran through the four phases, evaluation after each, and the report
    results = evals(graph)
    assert [r["phase"] for r in results] == ["foundation", "enrich", "long", "anneal"]
    for source in spec.data.sources:
        assert results[-1]["heldout"][source]["loss"] < results[0]["heldout"][source]["loss"], source
    assert (workdir / "reports" / "tiny" / "run" / "report.html").exists()
    last_train = graph.find("train_phase", phase=3)
    records = [json.loads(x) for x in (last_train.dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["tokens"] == 102400 and records[-1]["lr"] == pytest.approx(3.0e-4)  # the floor, at the run's end

    # the last phase exported for Hugging Face: transformers computes the same logits as runlib's model
    export_and_compare(last_train, workdir / "exports" / "tiny" / "anneal")

    again = snakemake(workdir, TINY, "--cores", "2")
    assert again.returncode == 0 and "Nothing to be done" in again.stderr + again.stdout, again.stderr[-4000:]

    # a newer upstream file (mtime) with an unchanged key reruns nothing
    for node in graph.of("curate_source"):
        node.manifest_path.touch()
    assert "Nothing to be done" in (p := snakemake(workdir, TINY, "-n")).stderr + p.stdout

    # deleting the tokenizer rebuilds it byte for byte and reruns nothing downstream
    tok = graph.of("train_tokenizer")[0]
    before = json.loads(tok.manifest_path.read_text())
    tokenizer_bytes = (tok.dir / "tokenizer.json").read_bytes()
    shutil.rmtree(tok.dir)
    rebuilt = snakemake(workdir, TINY, "--cores", "2")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert jobs_run(rebuilt) == ["train_tokenizer", "all"] or sorted(jobs_run(rebuilt)) == ["all", "train_tokenizer"]
    after = json.loads(tok.manifest_path.read_text())
    assert after["content_hash"] == before["content_hash"]
    assert (tok.dir / "tokenizer.json").read_bytes() == tokenizer_bytes

    # renaming the run and editing what the data stages do not read reruns none of them
    other = edited(workdir, "renamed.yaml", "name: tiny", "name: tiny-renamed")
    other.write_text(other.read_text().replace("lr: 3.0e-3", "lr: 2.0e-3").replace("decay: 10%", "decay: 9%"))
    dry = snakemake(workdir, other, "-n")
    assert dry.returncode == 0 and set(jobs_run(dry)) <= {"train_phase", "eval_phase", "report", "track", "all"}, (
        jobs_run(dry)
    )

    # editing the eval section reruns only evaluation and the report
    eval_edit = edited(
        workdir,
        "eval.yaml",
        "monitor: {eval_every: 25 steps",
        "eval: {after_each_phase: true, tasks: [{name: t, kind: answer_loglik, from_heldout: code, examples: 5}]}\nmonitor: {eval_every: 25 steps",
    )
    dry = snakemake(workdir, eval_edit, "-n")
    assert set(jobs_run(dry)) == {"eval_phase", "report", "track", "all"}, jobs_run(dry)
    # editing the last phase's mixture reruns only that phase and what follows it
    anneal_edit = edited(
        workdir,
        "anneal.yaml",
        "mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}}\ncheckpoint",
        "mixture: {docs: 0.3, code: 0.5, arithmetic: 0.2}}\ncheckpoint",
    )
    dry = snakemake(workdir, anneal_edit, "-n")
    # an edited spec is a new MLflow parent: every phase's track step records it again
    assert sorted(jobs_run(dry)) == ["all", "eval_phase", "report", *["track"] * 4, "train_phase"], jobs_run(dry)

    # same curation, another tokenizer: the curated artifacts are shared, only tokenizer stages run
    bigger_vocab = edited(workdir, "vocab.yaml", "vocab_size: 768", "vocab_size: 640")
    dry = snakemake(workdir, bigger_vocab, "-n")
    assert {"train_tokenizer", "tokenize"} <= set(jobs_run(dry)), jobs_run(dry)
    assert not {"curate_shard", "curate_source"} & set(jobs_run(dry)), jobs_run(dry)

    # the MLflow store holds one parent run for the spec and a child per stage built
    db = workdir / "work" / "mlflow.db"
    with sqlite3.connect(db) as con:
        parents = con.execute(
            "select r.run_uuid from runs r join tags t on t.run_uuid = r.run_uuid where t.key = 'mlflow.runName' and t.value = ?",
            (f"tiny-{spec_key(spec)}",),
        ).fetchall()
        assert len(parents) == 1
        children = con.execute(
            "select count(*) from tags where key = 'mlflow.parentRunId' and value = ?", (parents[0][0],)
        ).fetchone()[0]
    assert children == len(graph.nodes)  # one per artifact: the rebuilt tokenizer (same key) adds none

    # an anneal branch (phases[-1].branches): the prefix and the anneal as written are reused; the branch
    # alone trains, from the long phase's checkpoint, is evaluated, and the report compares the two
    branched = edited(
        workdir,
        "branched.yaml",
        "tokens: 10%, mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}}",
        "tokens: 10%, mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}, "
        "branches: [{name: code-heavy, mixture: {docs: 0.2, code: 0.7, arithmetic: 0.1}}]}",
    )
    built = snakemake(workdir, branched, "--cores", "2")
    assert built.returncode == 0, built.stderr[-3000:]
    ran = jobs_run(built)
    assert ran.count("train_phase") == 1 and ran.count("eval_phase") == 1, ran
    branch_graph = build_graph(load_spec(branched).spec)
    branch = branch_graph.branch_nodes("train_phase")["code-heavy"]
    assert branch.inputs["previous"] == graph.find("train_phase", phase=2).key  # the long phase's end
    assert branch.key != last_train.key and branch_graph.phase_node("train_phase", 3).key == last_train.key
    branch_records = [json.loads(x) for x in (branch.dir / "metrics.jsonl").read_text().splitlines()]
    assert branch_records[-1]["tokens"] == records[-1]["tokens"]  # the same length, another mixture
    branch_eval = json.loads((branch_graph.branch_nodes("eval_phase")["code-heavy"].dir / "eval.json").read_text())
    assert set(branch_eval["heldout"]) == set(spec.data.sources)
    assert branch_eval["heldout"]["code"]["loss"] != results[-1]["heldout"]["code"]["loss"]
    # branched.yaml has the baseline's run name: its report goes beside the baseline's, which it links
    report = (workdir / "reports" / "tiny" / "run-branched" / "report.html").read_text()
    assert "Branches" in report and "anneal@code-heavy" in report
    assert "Other reports of run tiny" in report and 'href="../run/report.html"' in report
    assert "Branches" not in (workdir / "reports" / "tiny" / "run" / "report.html").read_text()  # not overwritten
    # the branch exported as its stages are named (exports/<run>/<phase>@<branch>): the branch's own weights
    export_and_compare(branch, workdir / "exports" / "tiny" / "anneal@code-heavy", branched)
    provenance = json.loads((workdir / "exports" / "tiny" / "anneal@code-heavy" / "runlib_export.json").read_text())
    assert provenance["train_phase_key"] == branch.key != last_train.key

    # a branch that differs only in its data-order seed, and the soup of it and the anneal as written
    # (phases[-1].soup): only the branch trains; the soup is their mean, evaluated and exported as a phase is
    souped = edited(
        workdir,
        "souped.yaml",
        "tokens: 10%, mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}}",
        "tokens: 10%, mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}, "
        "branches: [{name: reseeded, seed: 11}], soup: {}}",
    )
    built = snakemake(workdir, souped, "--cores", "2")
    assert built.returncode == 0, built.stderr[-3000:]
    ran = jobs_run(built)
    assert (ran.count("train_phase"), ran.count("soup_phase"), ran.count("eval_phase")) == (1, 1, 2), ran
    soup_graph = build_graph(load_spec(souped).spec)
    (soup,) = soup_graph.of("soup_phase")
    reseeded = soup_graph.branch_nodes("train_phase")["reseeded"]
    assert soup.inputs == {"ingredient0": last_train.key, "ingredient1": reseeded.key}
    reseeded_records = [json.loads(x) for x in (reseeded.dir / "metrics.jsonl").read_text().splitlines()]
    assert reseeded_records[-1]["tokens"] == records[-1]["tokens"]  # as many tokens, in another order
    assert reseeded_records[-1]["loss"] != records[-1]["loss"]
    import torch

    from runlib.train import checkpoint as ckpt

    a, b, mean = (ckpt.load(n.dir / "final.pt")["model"] for n in (last_train, reseeded, soup))
    assert any(not torch.equal(a[name], b[name]) for name in a)
    for name, tensor in mean.items():
        assert torch.allclose(tensor.double(), (a[name].double() + b[name].double()) / 2, atol=1e-7), name
    soup_eval = json.loads((soup_graph.branch_nodes("eval_phase")["soup"].dir / "eval.json").read_text())
    assert soup_eval["phase"] == "anneal@soup" and set(soup_eval["heldout"]) == set(spec.data.sources)
    report = (workdir / "reports" / "tiny" / "run-souped" / "report.html").read_text()
    assert "anneal@reseeded" in report and "anneal@soup" in report
    export_and_compare(soup, workdir / "exports" / "tiny" / "anneal@soup", souped, shaped_as=last_train)
    provenance = json.loads((workdir / "exports" / "tiny" / "anneal@soup" / "runlib_export.json").read_text())
    assert provenance["soup_phase_key"] == soup.key

    # the long phase with context parallelism 2 (each row's 256 tokens over both processes, dp 1, twice the
    # accumulation): only it and what follows retrain, its manifest records cp 2, and it reaches the
    # data-parallel run's loss (the same batches and arithmetic, reduced in another order)
    context = edited(
        workdir,
        "context.yaml",
        "batch: {micro_batch: 2}, mixture: {docs: 0.5, code: 0.5}}",
        "batch: {micro_batch: 2, grad_accum: 2}, parallelism: {context: 2}, mixture: {docs: 0.5, code: 0.5}}",
    )
    built = snakemake(workdir, context, "--cores", "2")
    assert built.returncode == 0, built.stderr[-3000:]
    assert jobs_run(built).count("train_phase") == 2  # long and anneal
    context_graph = build_graph(load_spec(context).spec)
    dp_long, cp_long = graph.find("train_phase", phase=2), context_graph.find("train_phase", phase=2)
    assert cp_long.key != dp_long.key and cp_long.inputs["previous"] == dp_long.inputs["previous"]
    dp_manifest, cp_manifest = read_manifest(dp_long.dir), read_manifest(cp_long.dir)
    mesh = (cp_manifest.details["mesh"]["cp"], cp_manifest.details["mesh"]["dp_replicate"])
    assert mesh + (dp_manifest.details["mesh"]["cp"],) == (2, 1, 1)
    dp_loss, cp_loss = dp_manifest.counts["final_loss"], cp_manifest.counts["final_loss"]
    assert abs(cp_loss - dp_loss) <= 1e-3 * dp_loss, (cp_loss, dp_loss)

    # specs/variants/tiny-pipeline.yaml: the long phase on 2 pipeline stages (tiny's tied embedding as two
    # copies); the same checks, and the anneal after it starts from the pipelined phase's final.pt
    pipelined = ROOT / "specs" / "variants" / "tiny-pipeline.yaml"
    built = snakemake(workdir, pipelined, "--cores", "2")
    assert built.returncode == 0, built.stderr[-3000:]
    assert jobs_run(built).count("train_phase") == 2  # long and anneal
    pp_graph = build_graph(load_spec(pipelined).spec)
    pp_long = pp_graph.find("train_phase", phase=2)
    assert pp_long.key not in (dp_long.key, cp_long.key) and pp_long.inputs["previous"] == dp_long.inputs["previous"]
    pp_manifest = read_manifest(pp_long.dir)
    assert (pp_manifest.details["mesh"]["pp"], pp_manifest.details["mesh"]["dp_replicate"]) == (2, 1)
    pp_loss = pp_manifest.counts["final_loss"]
    assert abs(pp_loss - dp_loss) <= 1e-3 * dp_loss, (pp_loss, dp_loss)
    anneal = read_manifest(pp_graph.find("train_phase", phase=3).dir)
    assert anneal.details["mesh"]["pp"] == 1 and anneal.counts["final_loss"] > 0


def test_gate_refuses_a_spec_with_audit_errors(workdir):
    bad = edited(workdir, "fp16.yaml", "precision: {compute: fp32}", "precision: {compute: fp16}")
    proc = snakemake(workdir, bad, "--cores", "2")
    assert proc.returncode != 0
    assert "PREC001" in proc.stderr and "no job was started" in proc.stderr
    assert not (workdir / "work" / "artifacts").exists() and not (workdir / "work" / "logs").exists()


def test_gate_refuses_a_spec_that_does_not_load(workdir):
    bad = edited(workdir, "typo.yaml", "  d_ff: 192", "  d_fff: 192")
    proc = snakemake(workdir, bad, "-n")
    assert proc.returncode != 0 and "SPEC002" in proc.stderr and "did you mean 'd_ff'" in proc.stderr
