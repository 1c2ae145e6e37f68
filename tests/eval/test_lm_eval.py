"""lm-evaluation-harness on runlib's Hugging Face export: lm-eval scores the same items as runlib's own
scorer (runlib.eval.tasks) the same, option by option; the eval stage runs kind: lm_eval tasks; what
cannot run offline is refused when the spec loads or at the workflow's gate, with the fix."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from runlib.audit.cases import case_data
from runlib.errors import SpecError
from runlib.eval.config import EvalConfig, EvalModelConfig
from runlib.eval.harness.gate import harness_refusals
from runlib.eval.harness.taskfiles import arithmetic_items, write_task
from runlib.eval.stage import LM_EVAL_WORK, evaluate_phase
from runlib.eval.tasks import _request, heldout_tasks, loglikelihoods, score_answer_loglik, score_multiple_choice
from runlib.export.hf import ExportShape, write_export
from runlib.model.transformer import Transformer
from runlib.spec import validate_data
from runlib.spec.models import EvalTaskSpec, ModelSpec
from runlib.train import checkpoint as ckpt
from runlib.workflow.snake import GateRefused, Workflow
from tests.conftest import ROOT
from tests.helpers import write_fake_manifest

MAX_LEN = 128
MODEL = ModelSpec(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, seq_len=MAX_LEN)
DEMO = ROOT / "specs" / "demo.yaml"


def special_ids(tok) -> dict[str, int]:
    return {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}


def model_for(vocab: int) -> Transformer:
    torch.manual_seed(0)
    return Transformer(MODEL, vocab, MAX_LEN).eval()


@pytest.fixture(scope="module")
def harness(source, tmp_path_factory):
    """A random tiny Llama-shaped model, exported; lm-eval's `hf` model over the export; task files of
    12 held-out items (multiple choice) and 40 additions (multiple choice and gold-answer log-likelihood)."""
    from runlib.eval.harness.run import harness_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the eval stage runs (tiny matrices: threads only contend)
    root = tmp_path_factory.mktemp("lm-eval")
    model = model_for(source.vocab)
    shape = ExportShape(MODEL, source.vocab, MAX_LEN, MAX_LEN, MODEL.rope_theta, eos_id=source.eos, pad_id=None)
    export = write_export(
        model.state_dict(), shape, source.tokenizer.to_str(), special_ids(source.tokenizer), root / "hf", {}
    )
    heldout = heldout_tasks(source.token_dir, source.tokenizer, 12, seed=1234).multiple_choice
    mc, answers = arithmetic_items(40)
    items = {"runlib_heldout_mc": heldout, "runlib_arith_mc": mc, "runlib_arith_loglik": answers}
    for name, examples in items.items():
        kind = "answer_loglik" if name.endswith("loglik") else "multiple_choice"
        write_task(root / "tasks", name, kind, examples, cache_dir=root / "cache")
    yield model, harness_model(export, MAX_LEN), root / "tasks", items
    torch.set_num_threads(threads)


@pytest.mark.parametrize("task", ["runlib_heldout_mc", "runlib_arith_mc"])
def test_lm_eval_scores_equal_runlibs(source, harness, task):
    from runlib.eval.harness.run import evaluate_task

    model, lm, tasks, items = harness
    examples = items[task]
    theirs = evaluate_task(lm, task, [tasks], limit=None, item_logliks=True)
    ours = score_multiple_choice(model, source.tokenizer, examples, MAX_LEN)
    # option by option: lm-eval's log-likelihood (transformers' LlamaForCausalLM on the export) is runlib's
    requests = [_request(source.tokenizer, source.eos, e.context, c, MAX_LEN) for e in examples for c in e.choices]
    ours_ll = [ll for ll, _ in loglikelihoods(model, requests)]
    theirs_ll = [ll for row in theirs["item_logliks"] for ll in row]
    assert len(theirs_ll) == len(ours_ll) == sum(len(e.choices) for e in examples)
    assert max(abs(a - b) for a, b in zip(theirs_ll, ours_ll, strict=True)) < 1e-4
    # and so the scores: acc, acc_norm (lm-eval's: log-likelihood per character of the option), chance
    for key in ("acc", "acc_norm", "chance_acc", "n"):
        assert theirs[key] == pytest.approx(ours[key], abs=1e-12), key
    # the equality is not luck: every item's best option wins by more than the two's difference
    margins = [lls[0] - lls[1] for lls in (sorted(row, reverse=True) for row in theirs["item_logliks"])]
    assert min(margins) > 1e-3


def test_lm_eval_answer_loglik_equals_runlibs(source, harness):
    from runlib.eval.harness.run import evaluate_task

    model, lm, tasks, items = harness
    theirs = evaluate_task(lm, "runlib_arith_loglik", [tasks], limit=25)
    ours = score_answer_loglik(model, source.tokenizer, items["runlib_arith_loglik"][:25], MAX_LEN)
    assert theirs["n"] == ours["n"] == 25
    assert theirs["loglik_mean"] == pytest.approx(ours["loglik_mean"], rel=1e-6)


def test_task_files_are_lm_eval_yaml(tmp_path):
    mc, answers = arithmetic_items(5)
    again, _ = arithmetic_items(5)
    assert mc == again and all(len(set(e.choices)) == 4 and e.choices[e.answer].startswith(" ") for e in mc)
    assert all(int(a.answer) == eval(a.context.rstrip("=")) for a in answers)  # noqa: S307 (our own additions)
    path = write_task(tmp_path, "runlib_arith_mc", "multiple_choice", mc)
    text = path.read_text()
    assert 'task: "runlib_arith_mc"' in text and 'target_delimiter: ""' in text and "doc_to_choice: choices" in text
    rows = [json.loads(line) for line in (tmp_path / "runlib_arith_mc.jsonl").read_text().splitlines()]
    assert rows[0] == {"context": mc[0].context, "choices": list(mc[0].choices), "answer": mc[0].answer}
    assert re.search(r'test: "/.*runlib_arith_mc\.jsonl"', text)  # absolute: datasets reads it from the cwd


# ----------------------------------------------------------------------------------------- the eval stage


def test_eval_stage_runs_lm_eval_tasks(source, tmp_path):
    tokenizer_dir = shutil.copytree(source.token_dir.parent.parent / "tokenizer", tmp_path / "tokenizer")
    token_dir = shutil.copytree(source.token_dir, tmp_path / "tokens")
    write_fake_manifest(tokenizer_dir, details={"eos_id": source.eos, "special_ids": special_ids(source.tokenizer)})
    write_fake_manifest(token_dir, counts={"tokens_heldout": 1000, "bytes_heldout": 3000})
    model_dir = tmp_path / "model"
    ckpt.save(model_dir / "final.pt", {"model": model_for(source.vocab).state_dict()})
    config = EvalConfig(
        phase="main",
        phase_index=0,
        end_tokens=1000,
        seq_len=MAX_LEN,
        rope_theta=MODEL.rope_theta,
        model=EvalModelConfig(spec=MODEL, vocab_rows=source.vocab, position_rows=MAX_LEN),
        heldout_tokens=256,
        tasks=[
            EvalTaskSpec(name="ours", kind="multiple_choice", from_heldout="web", examples=12),
            EvalTaskSpec(name="theirs", kind="lm_eval", task="runlib_heldout_mc", from_heldout="web", examples=12),
            EvalTaskSpec(name="sums", kind="lm_eval", task="runlib_arith_loglik", examples=10),
            EvalTaskSpec(name="capped", kind="lm_eval", task="runlib_heldout_loglik", from_heldout="web", examples=30),
        ],
    )
    out = tmp_path / "out"
    out.mkdir()
    summary = evaluate_phase(config, model_dir, tokenizer_dir, {"web": token_dir}, out)
    tasks = json.loads((out / "eval.json").read_text())["tasks"]
    assert set(tasks) == {"ours", "theirs", "sums", "capped"}
    # the same held-out items, scored by runlib and by lm-eval on the export: the same numbers
    assert tasks["theirs"]["kind"] == "lm_eval" and tasks["theirs"]["task"] == "runlib_heldout_mc"
    for key in ("acc", "acc_norm", "chance_acc", "n"):
        assert tasks["theirs"][key] == pytest.approx(tasks["ours"][key], abs=1e-12), key
    assert tasks["sums"]["n"] == 10 and tasks["sums"]["loglik_mean"] < 0 and "perplexity" in tasks["sums"]
    # 12 held-out documents make at most 12 items: the cap says so
    assert tasks["capped"]["n"] == 12 and "12 of 30 examples" in tasks["capped"]["examples_cap"]
    assert summary["counts"]["theirs_acc"] == tasks["theirs"]["acc"]
    assert not (out / LM_EVAL_WORK).exists() and sorted(p.name for p in out.iterdir()) == ["eval.json"]


# ----------------------------------------------------------------------------------------- refused, with the fix


def _spec_with_tasks(tasks: list[dict]):
    return validate_data(case_data({"eval.tasks": tasks}))


def test_spec_refuses_a_task_that_would_download_without_saying_so():
    with pytest.raises(SpecError) as info:
        _spec_with_tasks([{"name": "hs", "kind": "lm_eval", "task": "hellaswag"}])
    text = str(info.value)
    assert "eval.tasks[0]" in text and "Hugging Face Hub" in text and "download: true" in text and "path:" in text
    assert _spec_with_tasks([{"name": "hs", "kind": "lm_eval", "task": "hellaswag", "download": True}])
    for bad, said in (
        ({"name": "t", "kind": "lm_eval", "task": "runlib_heldout_mc"}, "from_heldout"),
        ({"name": "t", "kind": "lm_eval", "task": "runlib_arith_mc", "from_heldout": "web"}, "runlib_heldout_mc"),
        ({"name": "t", "kind": "multiple_choice", "from_heldout": "web", "download": True}, "kind: lm_eval"),
        ({"name": "t", "kind": "lm_eval"}, "needs `task`"),
    ):
        with pytest.raises(SpecError, match=re.escape(said)):
            _spec_with_tasks([bad])


def test_harness_refusals(tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text("task: my_task\ndataset_path: json\n")
    tasks = [
        EvalTaskSpec(name="a", kind="lm_eval", task="my_task", path=str(tmp_path)),
        EvalTaskSpec(name="b", kind="lm_eval", task="runlib_arith_mc"),
        EvalTaskSpec(name="c", kind="multiple_choice", path="nowhere.jsonl"),  # runlib's: not the harness's
    ]
    assert harness_refusals(tasks, MODEL) == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refused = harness_refusals(
        [
            EvalTaskSpec(name="a", kind="lm_eval", task="other_task", path=str(tmp_path)),
            EvalTaskSpec(name="b", kind="lm_eval", task="x", path=str(tmp_path / "missing")),
            EvalTaskSpec(name="c", kind="lm_eval", task="hellaswag", download=True),
        ],
        ModelSpec(**{**MODEL.model_dump(), "qk_norm": True}),
    )
    fields = [r.field for r in refused]
    assert fields == ["eval.tasks[0]", "eval.tasks[0].task", "eval.tasks[1].path", "eval.tasks[2].download"]
    assert "model.qk_norm" in refused[0].problem and "HF_HUB_OFFLINE=1" in refused[3].problem
    assert all(r.fix for r in refused)


def test_workflow_gate_refuses_with_the_spec_line(tmp_path, work, monkeypatch, capsys):
    for name in ("RUNLIB_SPEC", "RUNLIB_PYTHON"):
        monkeypatch.setenv(name, "")
    text = DEMO.read_text()
    line = "    - {name: code-answer, kind: answer_loglik, from_heldout: code, examples: 40}\n"
    assert line in text
    extra = "    - {name: mine, kind: lm_eval, task: my_task, path: no/such/tasks}\n"
    spec = tmp_path / "variant.yaml"
    spec.write_text(text.replace(line, line + extra))
    with pytest.raises(GateRefused, match="lm-eval task setting"):
        Workflow(str(spec))
    err = capsys.readouterr().err
    number = text.splitlines().index(line.rstrip("\n")) + 2
    assert f"variant.yaml:{number}: eval.tasks[3].path: 'no/such/tasks' does not exist" in err and "fix: " in err


def test_gate_and_task_files_import_neither_lm_eval_nor_torch():
    code = (
        "import sys; import runlib.eval.harness.gate, runlib.eval.harness.taskfiles;"
        "bad = [m for m in ('lm_eval', 'torch', 'transformers', 'datasets') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
