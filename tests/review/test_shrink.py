"""`runlib shrink`: every committed published spec shrinks to a spec that audits with no error and keeps
the run's structure; one shrunk published spec (OLMo 2 7B, two stages) runs end to end through Snakemake,
and `runlib diff` against an edit of it lists exactly the jobs `snakemake -n` reruns."""

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from runlib.audit import audit
from runlib.cli import main
from runlib.curate.builtin import builtin_documents
from runlib.eval.harness.gate import harness_refusals
from runlib.graph.build import build_graph
from runlib.plan import derive
from runlib.review.diff import diff_files
from runlib.review.shrink import MIN_PHASE_STEPS, SHRINK_CHOICES, shrink, shrink_file, wall_minutes
from runlib.review.standins import BYTES_PER_TRAIN_TOKEN, builtin_texts
from runlib.spec import load_spec, load_spec_text
from runlib.store.command import snakemake_command
from runlib.store.settings import rebuild_hint
from runlib.util.report_dirs import report_dir
from tests.conftest import ROOT

PUBLISHED = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "specs" / "variants").glob("*.yaml"))
OLMO2 = ROOT / "specs" / "olmo2-7b.yaml"


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_every_published_spec_shrinks_to_a_spec_that_audits_clean(path, tmp_path, capsys):
    original = load_spec(path).spec
    text, _ = shrink_file(path, minutes=3)
    shrunk = load_spec_text(text, f"{path.stem}-shrunk.yaml").spec  # the YAML as written, comments and all
    result = audit(shrunk)
    assert result.count("error") == 0, [(f.code, f.path, f.message) for f in result.findings if f.severity == "error"]
    # the workflow's gate (runlib.workflow.snake): no value the trainer refuses (RUN*, even ignored), no lm-eval
    # task this machine cannot run, and a stage graph that builds (a ladder's rungs among others)
    out = tmp_path / f"{path.stem}-shrunk.yaml"
    out.write_text(text)
    capsys.readouterr()
    assert main(["audit", str(out), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    refused = [f for f in report["findings"] + report["ignored"] if f["code"].startswith("RUN")]
    assert not refused, [(f["code"], f["path"], f["message"]) for f in refused]
    assert harness_refusals(shrunk.eval.tasks, shrunk.model) == []
    build_graph(shrunk)
    # the structure is kept
    assert {n: s.domain for n, s in shrunk.data.sources.items()} == {
        n: s.domain for n, s in original.data.sources.items()
    }
    assert [(p.name, p.kind, dict(p.mixture)) for p in shrunk.phases] == [
        (p.name, p.kind, dict(p.mixture)) for p in original.phases
    ]
    for key in ("packing", "boundary_targets", "loss_normalization"):
        assert getattr(shrunk.data, key) == getattr(original.data, key)
    assert {n: s.fim for n, s in shrunk.data.sources.items()} == {n: s.fim for n, s in original.data.sources.items()}
    assert shrunk.schedule.kind == original.schedule.kind and shrunk.tokenizer.digits == original.tokenizer.digits
    assert shrunk.hardware.accelerator == "cpu" and shrunk.precision.compute == "fp32"
    # the held-out loss during training is as small as the one after each phase (monitor.eval_tokens defaults to 32Ki)
    assert shrunk.monitor.eval_tokens == shrunk.eval.heldout_tokens == 8192
    # the block's structure (RUN008 refuses these under tensor parallelism only; the shrunk run has none)
    for key in ("activation", "norm", "bias", "norm_bias", "parallel_block", "embedding_norm", "dropout"):
        assert getattr(shrunk.model, key) == getattr(original.model, key), key
    assert shrunk.model.position == ("alibi" if original.model.position == "relative" else original.model.position)
    assert [p.optimizer for p in shrunk.phases] == [p.optimizer for p in original.phases]
    assert (shrunk.ladder is None) == (original.ladder is None)
    assert (shrunk.batch.ramp is None, shrunk.batch.linear_ramp is None) == (
        original.batch.ramp is None,
        original.batch.linear_ramp is None,
    )
    # a mixture of experts stays one (at most 8 experts, its router and balancing as published), latent
    # attention and MTP modules stay
    om, sm = original.model, shrunk.model
    assert (sm.moe is None, sm.attention is None, sm.mtp is None) == (
        om.moe is None,
        om.attention is None,
        om.mtp is None,
    )
    if om.moe is not None and sm.moe is not None:
        assert 2 <= sm.moe.experts <= min(om.moe.experts, 8) and 1 <= sm.moe.top_k <= sm.moe.experts
        for key in ("score", "normalize_top_k", "route_scale", "aux_loss", "bias_update_rate", "z_loss"):
            assert getattr(sm.moe, key) == getattr(om.moe, key), key
        assert (sm.moe.dense_layers > 0) == (om.moe.dense_layers > 0) and sm.moe.dense_layers < sm.layers
    gqa = (original.model.kv_heads or original.model.heads) < original.model.heads
    assert ((shrunk.model.kv_heads or shrunk.model.heads) < shrunk.model.heads) == gqa
    # the phases keep their published shares of the run, but for phases raised to the minimum of steps
    plan_original, plan_shrunk = audit(original).plan, result.plan
    kept = [i for i, p in enumerate(plan_shrunk.phases) if p.steps > MIN_PHASE_STEPS]

    def shares(plan) -> list[float]:
        total = sum(plan.phases[i].tokens for i in kept)
        return [plan.phases[i].tokens / total for i in kept]

    assert shares(plan_shrunk) == pytest.approx(shares(plan_original), abs=0.02)
    # no finding of shrink's own choices: TOK004 is avoided, the others are silenced with a
    # reason naming shrink (a published spec with too few held-out documents keeps its MIX006 in view)
    shown = {f.code for f in result.findings}
    assert not shown & {"TOK004", "SCHED008", "PAR005"}, shown
    assert "MIX006" not in shown or original.data.heldout_docs < 200
    for ignored in result.ignored:
        if ignored.finding.code in SHRINK_CHOICES and ignored.finding.code not in original.audit.ignore:
            assert ignored.reason.startswith("runlib shrink"), ignored.reason


def test_stand_ins_are_said_in_comments_and_ignores_stay_needed():
    text, summary = shrink_file(OLMO2, minutes=3)
    assert text.count("# stand-in:") == 9 and "web text -> builtin python_docs" in text
    assert "code text -> builtin python_code" in text and "math text -> builtin arithmetic" in text
    assert "pretrained tokenizers/allenai_dolma2.json" in text and "0 error(s)" in summary
    data = yaml.safe_load(text)
    assert data["data"]["sources"]["starcoder"]["input"]["name"] == "python_code"
    # OLMo 2's stage 2 keeps its shape: its own linear decay to 0, its seed, the seeded branches and the soup;
    # shrink's own choices (20 held-out documents, the published LR at a tiny compute) are silenced by name
    anneal = data["phases"][-1]
    assert anneal["optimizer"] == {"lr_decay_to": 0.0, "lr_decay_shape": "linear"} and anneal["seed"] == 42
    assert anneal["branches"] == [{"name": "seed42069", "seed": 42069}, {"name": "seed666", "seed": 666}]
    assert anneal["soup"] == {"name": "soup"}
    ignore = data["audit"]["ignore"]
    assert sorted(ignore) == ["MIX006", "SCHED008"]
    assert ignore["MIX006"].startswith("runlib shrink") and ignore["SCHED008"].startswith("runlib shrink")
    # the pretrained tokenizer's 22 special tokens: the trained stand-in reserves what TOK004 asks for
    assert data["tokenizer"]["reserved_tokens"] == 100


def test_schedule_and_ramp_shape_in_percent():
    demo = shrink(load_spec(ROOT / "specs" / "demo.yaml"), minutes=3)
    spec = load_spec_text(yaml.safe_dump(demo.data)).spec
    result = audit(spec)
    assert "SCHED006" not in {f.code for f in result.findings}  # the WSD decay still covers the anneal phase
    anneal = result.plan.phases[-1]
    assert result.plan.schedule.decay_start_tokens == pytest.approx(anneal.span.start_tokens, rel=1e-6)
    assert spec.schedule.warmup.unit == "percent" and spec.schedule.warmup.amount == pytest.approx(2.0)

    ramp = shrink(load_spec(ROOT / "specs" / "variants" / "llama2-7b-ramp.yaml"), minutes=3).data["batch"]["ramp"]
    sizes = [int(re.match(r"(\d+) sequences", r["global_batch"]).group(1)) for r in ramp]
    assert sizes[1] == 2 * sizes[0]  # 4Mi -> 8Mi tokens
    assert float(ramp[1]["after"].rstrip("%")) == pytest.approx(
        100 * 252e6 / load_spec(ROOT / "specs" / "llama2-7b.yaml").spec.tokens, rel=1e-3
    )


def test_multistep_levels_and_linear_ramp_keep_their_share_of_the_run():
    # DeepSeek LLM's levels at 80% and 90% (arXiv 2401.02954 section 2.3), here one written in tokens
    text = (ROOT / "specs" / "deepseek-llm-67b.yaml").read_text()
    assert "{after: 80%, lr_ratio: 0.316}" in text
    loaded = load_spec_text(text.replace("{after: 80%, lr_ratio: 0.316}", "{after: 1.6T tokens, lr_ratio: 0.316}"))
    data = shrink(loaded, minutes=3).data
    levels = [(float(x["after"].rstrip("%")), x["lr_ratio"]) for x in data["schedule"]["lr_steps"]]
    assert levels == [(pytest.approx(80, rel=1e-4), 0.316), (90, 0.1)]  # 1.6T of the run's whole steps: ~80%
    assert "min_lr_ratio" not in data["schedule"] and "decay" not in data["schedule"]
    spec = load_spec_text(yaml.safe_dump(data)).spec
    plan = audit(spec).plan
    assert plan.schedule.lr_at(0.85 * plan.tokens_total) == pytest.approx(0.316 * spec.optimizer.lr)

    # BLOOM's --rampup-batch-size 192 16 9765625 (20B of 366B tokens): whole micro-batches of the 2 ranks, the
    # same share of the run, up to the steady batch
    bloom = load_spec(ROOT / "specs" / "bloom-176b.yaml")
    data = shrink(bloom, minutes=3).data
    ramp = data["batch"]["linear_ramp"]
    start, increment = (int(ramp[k].split()[0]) for k in ("start", "increment"))
    steady = data["batch"]["micro_batch"] * data["batch"]["grad_accum"] * 2
    assert start % 8 == 0 and increment % 8 == 0 and start + increment <= steady
    over = float(ramp["over"].rstrip("%")) / 100
    assert over == pytest.approx(20e9 / derive(bloom.spec).tokens_total, rel=1e-3)
    plan = audit(load_spec_text(yaml.safe_dump(data)).spec).plan
    assert plan.tokens_total == data["tokens"]
    assert plan.phases[0].span.segments[0].tokens_per_step == start * 128


def test_two_stage_ramp_lands_on_whole_steps():
    # Gopher: 3M then 6M tokens per batch, the switch at 50% (Rae et al. 2021, Table 1): the shrunk run's
    # phases are whole steps whose tokens are the run's (PHASE001), the switch within a step of 50%
    data = shrink(load_spec(ROOT / "specs" / "gopher-280b.yaml"), minutes=3).data
    sizes = [int(r["global_batch"].split()[0]) for r in data["batch"]["ramp"]]
    assert sizes[1] == 2 * sizes[0]
    result = audit(load_spec_text(yaml.safe_dump(data)).spec)
    assert "PHASE001" not in {f.code for f in result.findings}
    assert result.plan.tokens_total == data["tokens"]
    switch = float(data["batch"]["ramp"][1]["after"].rstrip("%")) / 100
    assert switch == pytest.approx(0.5, abs=sizes[1] * 128 / data["tokens"])


def _demo_with_tasks(tasks: str, qk_norm: bool = False) -> str:
    text = (ROOT / "specs" / "demo.yaml").read_text()
    block = "    - {name: docs-continuation, kind: multiple_choice, from_heldout: docs, examples: 60}\n"
    assert block in text and "  qk_norm: false\n" in text
    text = text.replace(block, tasks, 1)
    return text.replace("  qk_norm: false\n", f"  qk_norm: {str(qk_norm).lower()}\n", 1)


LM_EVAL_TASKS = """\
    - {name: arith, kind: lm_eval, task: runlib_arith_mc, examples: 40}
    - {name: held, kind: lm_eval, task: runlib_heldout_loglik, from_heldout: code}
    - {name: hellaswag, kind: lm_eval, task: hellaswag, download: true}
    - {name: local, kind: lm_eval, task: my_task, path: tasks/not-here.yaml}
"""


def test_lm_eval_tasks_run_offline(tmp_path):
    path = tmp_path / "demo-lm-eval.yaml"
    path.write_text(_demo_with_tasks(LM_EVAL_TASKS))
    text, summary = shrink_file(path, minutes=3)
    assert "0 error(s)" in summary
    tasks = {t["name"]: t for t in yaml.safe_load(text)["eval"]["tasks"]}
    assert tasks["arith"] == {"name": "arith", "kind": "lm_eval", "task": "runlib_arith_mc", "examples": 20}
    assert tasks["held"]["task"] == "runlib_heldout_loglik" and tasks["held"]["from_heldout"] == "code"
    for name in ("hellaswag", "local"):  # the shipped held-out task on the first used source, said in a comment
        assert (tasks[name]["task"], tasks[name]["from_heldout"]) == ("runlib_heldout_mc", "docs"), name
    assert text.count("# stand-in: lm-eval task") == 2
    assert "downloads its data from the Hugging Face Hub" in text and "'tasks/not-here.yaml' is not here" in text
    shrunk = load_spec_text(text).spec
    refusals = harness_refusals(shrunk.eval.tasks, shrunk.model)
    assert [r for r in refusals if "not installed" not in r.problem] == []

    # a model lm-eval cannot score (no Hugging Face architecture has OLMo 2's QK-norm): runlib's own tasks
    path.write_text(_demo_with_tasks(LM_EVAL_TASKS, qk_norm=True))
    text, _ = shrink_file(path, minutes=3)
    kinds = {t["kind"] for t in yaml.safe_load(text)["eval"]["tasks"]}
    assert "lm_eval" not in kinds and text.count("# stand-in: lm-eval task") == 4
    shrunk = load_spec_text(text).spec
    assert harness_refusals(shrunk.eval.tasks, shrunk.model) == []


def test_minutes_scale_the_tokens():
    loaded = load_spec(OLMO2)
    small, large = shrink(loaded, minutes=2).data["tokens"], shrink(loaded, minutes=8).data["tokens"]
    assert 3.5 < large / small < 4.5


@pytest.mark.parametrize("minutes", ["inf", "nan", "1e300", "0", "-5"])
def test_minutes_out_of_range_is_exit_2_not_a_traceback(minutes, capsys):
    """--minutes inf ended in OverflowError (exit 1), 1e300 in a spec of 10^300 tokens."""
    assert main(["shrink", str(OLMO2), "--minutes", minutes]) == 2
    err = capsys.readouterr().err
    assert "--minutes" in err and "10,080" in err and "Traceback" not in err, err


def test_declared_tokens_are_what_the_stand_ins_hold():
    """Issue 28 item 4: a stand-in's declared tokens come from its own documents, not from the published
    epochs (OLMo 2's dclm: 1.00 epoch declared, 4.37 measured after tokenizing). The measured side is checked
    on a real run in test_shrunk_olmo2_runs_end_to_end_and_diff_matches_the_dry_run."""
    for name in BYTES_PER_TRAIN_TOKEN:  # the documents shrink sizes are the ones the curation stage reads
        assert builtin_texts(name, 157) == [text for _, text in builtin_documents(name, 157)[0]], name
    loaded = load_spec(OLMO2)
    data = shrink(loaded, minutes=10).data
    spec = load_spec_text(yaml.safe_dump(data)).spec
    heldout = spec.data.heldout_docs
    plan = derive(spec)
    for source in plan.sources:
        inp = spec.data.sources[source.name].input
        size = sum(len(t.encode()) for t in builtin_texts(inp.name, inp.max_docs))
        expected = size * (inp.max_docs - heldout) / inp.max_docs / BYTES_PER_TRAIN_TOKEN[inp.name]
        assert source.tokens_available == pytest.approx(expected, rel=1e-3), source.name
    # the repetition shows before the run: dclm's 150 stand-in documents are seen more than 4 times
    dclm = next(s for s in plan.sources if s.name == "dclm")
    assert dclm.epochs > 4 and "MIX003" in {f.code for f in audit(spec).findings}


def test_the_stated_time_is_a_range_that_holds_the_measured_run():
    # OLMo 2 shrunk for "~10 min" ran in 4 minutes in all
    _, summary = shrink_file(OLMO2, minutes=10)
    low, high = wall_minutes(shrink(load_spec(OLMO2), minutes=10).data["tokens"], 10)
    assert low <= 4 <= high
    assert f"time: ~{low:.0f}-{high:.0f} min on 2 CPU cores" in summary and "tokens/s" in summary


def test_printed_commands_run_from_another_directory(tmp_path, monkeypatch, capsys):
    """Issue 28 item 7: each snakemake command runlib prints (shrink's run and export lines, export's and
    verify's fix) runs from where the user is: a dry run of each, exactly as printed, from a directory
    outside the repository (targets before --config, the Snakefile named with -s)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    assert main(["shrink", str(ROOT / "specs" / "demo.yaml"), "--minutes", "0.5", "-o", "small demo.yaml"]) == 0
    lines = capsys.readouterr().err.splitlines()
    commands = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines if ": " in line}
    assert "exports/" in commands["export it"]
    assert main(["export", "small demo.yaml", "--phase", "anneal", "--out", "out"]) == 2
    fix = capsys.readouterr().err.split("fix: ", 1)[1].strip()
    assert fix == snakemake_command("small demo.yaml", cores="all")
    assert rebuild_hint("tokenize", "0" * 16, "small demo.yaml").endswith(f"&& {fix}")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent)
    # the fix is the run line's form (no target) with --cores all: the two forms run below
    for label, command in (("run", commands["run it"]), ("export", commands["export it"])):
        dry = subprocess.run(f"{command} -n", shell=True, cwd=elsewhere, env=env, capture_output=True, text=True)
        assert dry.returncode == 0, (label, command, dry.stderr[-2000:])
        jobs = {rule for rule, _ in dry_run_jobs(dry)}
        assert "train_phase" in jobs, (label, jobs)
        assert ("export_hf" in jobs) == (label == "export"), (label, jobs)


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["shrink", str(OLMO2), "--minutes", "0"]) == 2
    assert "--minutes" in capsys.readouterr().err
    assert main(["shrink", str(tmp_path / "none.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def dry_run_jobs(proc) -> list[tuple[str, str | None]]:
    """(rule, key wildcard) of every job a Snakemake dry run lists."""
    jobs: list[tuple[str, str | None]] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := re.match(r"(?:local)?rule (\w+):", line):
            jobs.append((m.group(1), None))
        elif (m := re.match(r"\s+wildcards: key=([0-9a-f]{16})", line)) and jobs:
            jobs[-1] = (jobs[-1][0], m.group(1))
    return jobs


@pytest.mark.slow
def test_shrunk_olmo2_runs_end_to_end_and_diff_matches_the_dry_run(tmp_path, monkeypatch):
    from tests.workflow.conftest import snakemake

    monkeypatch.setenv("RUNLIB_WORK_DIR", str(tmp_path / "work"))
    spec = tmp_path / "olmo2-shrunk.yaml"
    assert main(["shrink", str(OLMO2), "--minutes", "0.5", "-o", str(spec)]) == 0
    started = time.monotonic()
    run = snakemake(tmp_path, spec, "--cores", "2", timeout=600)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    name = load_spec(spec).spec.name
    assert (report_dir(name, spec, "run", tmp_path / "reports") / "report.html").exists()
    print(f"shrunk OLMo 2 7B end to end: {seconds:.0f} s")
    # the epochs the audit declares before the run are those tokenizing measured (within
    # 1.25x: BYTES_PER_TRAIN_TOKEN was measured on this spec; another Python's standard library moves it)
    from runlib.graph.measured import measured_tokens

    shrunk_spec = load_spec(spec).spec
    measured = measured_tokens(shrunk_spec)
    assert set(measured) == set(shrunk_spec.data.sources)
    before, after = derive(shrunk_spec), derive(shrunk_spec, measured)
    for declared, counted in zip(before.sources, after.sources, strict=True):
        assert 1 / 1.25 <= declared.epochs / counted.epochs <= 1.25, (declared.name, declared.epochs, counted.epochs)

    text = spec.read_text()
    edits = {  # the anneal's mixture only; then one source's curation (data stages and all after them)
        "anneal": ("mixture: {dclm_hq: 0.5, flan: 0.17,", "mixture: {dclm_hq: 0.4, flan: 0.27,"),
        "curation": ("name: python_docs, max_docs: 154,", "name: python_docs, max_docs: 140,"),
    }
    for label, (old, new) in edits.items():
        assert old in text, label
        b = tmp_path / f"{label}.yaml"
        b.write_text(text.replace(old, new, 1))
        d = diff_files(spec, b)
        dry = snakemake(tmp_path, b, "-n")
        assert dry.returncode == 0, dry.stderr[-2000:]
        jobs = dry_run_jobs(dry)
        stage_jobs = sorted((rule, key) for rule, key in jobs if rule not in ("track", "report", "all"))
        assert stage_jobs == sorted((r.stage, r.key) for r in d.reruns), label
        assert stage_jobs, label
    assert {r.stage for r in d.reruns} >= {"curate_shard", "curate_source", "tokenize", "train_tokenizer"}
    assert math.isfinite(d.rerun_device_hours)
