"""The CLI as users run it: exit statuses, the JSON contract, explain, and mutated spec files."""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlib.cli import main
from tests.conftest import BASE_SPEC, REFERENCE_SPEC, ROOT
from tests.heavy import heavy_imports

PHASE_KEYS = {
    "name",
    "kind",
    "tokens",
    "steps",
    "start_tokens",
    "end_tokens",
    "start_step",
    "end_step",
    "tokens_per_step",
    "seq_len",
    "rope_theta",
    "lr_start",
    "lr_end",
    "memory_bytes_per_device",
    "source_tokens",
}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "runlib", *args], capture_output=True, text=True, cwd=ROOT)


def test_reference_spec_exits_0_with_full_json():
    proc = run_cli("audit", str(REFERENCE_SPEC), "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    d = doc["derived"]
    assert set(d["params"]) >= {"total", "embedding", "non_embedding"}
    assert d["params"]["total"] == d["params"]["embedding"] + d["params"]["non_embedding"]
    for key in ("tokens_total", "steps_total", "gpu_hours", "wall_days", "data_parallel"):
        assert isinstance(d[key], (int, float)), key
    assert set(d["flops"]) >= {"total", "per_token", "convention"}
    assert [p["name"] for p in d["phases"]] == ["foundation", "enrich", "long", "anneal"]
    for p in d["phases"]:
        assert PHASE_KEYS <= set(p), PHASE_KEYS - set(p)
    assert d["phases"][2]["seq_len"] == 32768 and d["phases"][2]["rope_theta"] == 4_000_000
    assert d["tokens_total"] == d["phases"][-1]["end_tokens"]
    assert {s["name"] for s in d["sources"]} == {"web", "code", "math", "hq"}
    for s in d["sources"]:
        assert set(s) >= {"name", "tokens_available", "tokens_used", "epochs"}
    for f in doc["findings"]:
        assert set(f) >= {"code", "severity", "path", "line", "message", "fix"}
        assert f["severity"] != "error"


def test_error_exits_1_and_strict_turns_warnings_into_1(tmp_path):
    text = BASE_SPEC.read_text()
    bad = tmp_path / "fp16.yaml"
    bad.write_text(text.replace("compute: bf16", "compute: fp16"))
    proc = run_cli("audit", str(bad))
    assert proc.returncode == 1 and "PREC001" in proc.stdout
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("precision:"))
    assert f"{bad}:{line}:" in proc.stdout  # findings point at the spec line
    warn = tmp_path / "noclip.yaml"
    warn.write_text(text.replace("grad_clip: 1.0", "grad_clip: 0"))
    assert main(["audit", str(warn)]) == 0
    assert main(["audit", str(warn), "--strict"]) == 1


def test_ignore_silences_with_reason_and_reports_it(tmp_path, capsys, data_here):
    text = BASE_SPEC.read_text().replace("grad_clip: 1.0", "grad_clip: 0")
    spec = tmp_path / "ignored.yaml"
    spec.write_text(text.replace("audit: {ignore: {}}", 'audit: {ignore: {OPT001: "clipping hurts this ablation"}}'))
    assert main(["audit", str(spec), "--strict", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ignored"][0]["code"] == "OPT001" and doc["ignored"][0]["reason"] == "clipping hurts this ablation"
    assert all(f["code"] != "OPT001" for f in doc["findings"])


def test_explain(capsys):
    assert main(["explain", "prec001"]) == 0
    out = capsys.readouterr().out
    assert "Why it matters:" in out and "How to fix:" in out
    assert main(["explain", "PREC01"]) == 2
    assert "did you mean PREC001" in capsys.readouterr().err
    assert main(["explain"]) == 0
    assert "MIX001" in capsys.readouterr().out
    assert main(["explain", "X" * 100_000]) == 2  # a hostile argument is not echoed back whole
    assert len(capsys.readouterr().err) < 500


def test_usage_errors_exit_2():
    assert main(["audit"]) == 2
    assert main(["nonsense"]) == 2
    assert main(["audit", "no/such/file.yaml"]) == 2


def test_audit_plan_and_verify_do_not_import_heavy_modules(tmp_path):
    code = (
        "from runlib.cli import main; main(['audit', 'specs/demo.yaml', '--format', 'json']);"
        "main(['plan', 'specs/demo.yaml']); assert main(['verify', 'specs/demo.yaml']) == 0"
    )
    assert heavy_imports(code, tmp_path) == []


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6), st.sampled_from(["", " ", ":", "-", "{", "]", "\n", "x", "0", "%", "\t", "'"])
        ),
        min_size=1,
        max_size=5,
    )
)
def test_mutated_spec_files_end_with_0_1_or_2(tmp_path_factory, edits):
    text = BASE_SPEC.read_text()
    for position, insert in edits:
        i = position % (len(text) + 1)
        text = text[:i] + insert + text[i + 1 :]
    path = tmp_path_factory.mktemp("mut") / "spec.yaml"
    path.write_text(text)
    assert main(["audit", str(path), "--format", "json"]) in (0, 1, 2)


def test_plan_names_a_source_whose_files_match_nothing(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(BASE_SPEC.read_text().replace('path: "data/web/*.jsonl"', f'path: "{tmp_path}/nothing/*.jsonl"'))
    assert main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "data.sources.web.input.path" in err and "matches no file" in err and "nothing/*.jsonl" in err


def test_plan_lists_stages_with_keys(capsys):
    assert main(["plan", "specs/demo.yaml", "--format", "json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    names = [s["stage"] for s in stages]
    assert names.count("train_phase") == 4 and names.count("eval_phase") == 4 and "train_tokenizer" in names
    assert all(len(s["key"]) == 16 for s in stages)


def test_plan_of_a_mixture_the_audit_refuses_exits_2_naming_the_phase(tmp_path, capsys):
    text = (ROOT / "tests" / "fixtures" / "tiny.yaml").read_text()
    old = "mixture: {docs: 0.4, code: 0.4, arithmetic: 0.2}}\ncheckpoint"
    assert old in text
    spec = tmp_path / "zero.yaml"
    spec.write_text(text.replace(old, "mixture: {docs: 0.0, code: 0.0, arithmetic: 0.0}}\ncheckpoint"))
    assert main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "phase anneal: the mixture has no source with a positive weight" in err and "Traceback" not in err


# --- the audit names missing input files, speaks our words, keeps its JSON contract ----------


@pytest.fixture
def data_here(tmp_path, monkeypatch):
    """A working directory holding the base spec's input files (data/web/*.jsonl, data/code/*.jsonl)."""
    here = tmp_path / "here"
    for source in ("web", "code"):
        (here / "data" / source).mkdir(parents=True)
        (here / "data" / source / "part-0.jsonl").write_text('{"text": "a document"}\n')
    monkeypatch.chdir(here)
    return here


def test_audit_names_a_source_path_that_matches_nothing(tmp_path, capsys, data_here):
    """SRC001 at the path's file:line; an error when a phase needs the source and its directory is here."""
    text = BASE_SPEC.read_text()
    spec = tmp_path / "typo.yaml"
    spec.write_text(text.replace('path: "data/web/*.jsonl"', 'path: "data/web/*.json"'))
    assert main(["audit", str(spec)]) == 1
    out = capsys.readouterr().out
    line = next(i for i, s in enumerate(text.splitlines(), 1) if 'path: "data/web/*.jsonl"' in s)
    assert f"{spec}:{line}:" in out and "SRC001 data.sources.web.input.path" in out
    assert "matches no file" in out and "part-0.jsonl" in out  # says what the directory holds
    assert "SRC001" not in out.split("SRC001", 1)[1]  # one finding: data/code/*.jsonl matches
    assert main(["audit", str(BASE_SPEC), "--strict"]) == 0  # the same spec with the right path: clean


def test_json_on_a_spec_that_does_not_load(tmp_path, capsys):
    """--format json keeps its contract when the spec does not load: JSON on stdout, SPEC findings, exit 2."""
    spec = tmp_path / "typo.yaml"
    spec.write_text(BASE_SPEC.read_text().replace("  layers: 12", "  layrs: 12"))
    assert main(["audit", str(spec), "--format", "json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 2 and doc["derived"] is None and doc["summary"]["error"] == 1
    (f,) = doc["findings"]  # one mistake, one finding (not also "layers is missing")
    assert set(f) >= {"code", "severity", "path", "line", "col", "message", "fix"}
    assert (f["code"], f["severity"], f["path"]) == ("SPEC002", "error", "model.layrs")
    assert "did you mean 'layers'" in f["message"] and f["fix"] == "rename layrs to layers" and f["line"]


def test_cpu_run_counts_core_hours(capsys):
    assert main(["audit", "specs/demo.yaml", "--format", "json"]) == 0
    derived = json.loads(capsys.readouterr().out)["derived"]
    assert derived["device_hours_unit"] == "core-hours" and derived["gpu_hours"] > 0  # the key stays
    main(["audit", "specs/demo.yaml"])
    out = capsys.readouterr().out
    assert "core-hours" in out and "GPU-hours" not in out


def test_audit_reports_a_glob_the_stage_would_refuse(tmp_path, capsys, data_here):
    """A symbolic link loop under `**` (runlib.curate.inputs refuses it) is an SRC001 error too; a glob too
    large to walk within the audit's bound is an info finding, not a guess."""
    from runlib.audit.facts import match_state

    loop = tmp_path / "loop"
    (loop / "sub").mkdir(parents=True)
    (loop / "sub" / "back").symlink_to(loop)
    spec = tmp_path / "loop.yaml"
    spec.write_text(BASE_SPEC.read_text().replace('path: "data/web/*.jsonl"', f'path: "{loop}/**/*.jsonl"'))
    assert main(["audit", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "SRC001 data.sources.web.input.path" in out and "symbolic link loop" in out
    assert match_state("data/**/*.jsonl", False, "f", max_entries=2) == ("unchecked", "more than 2 directory entries")
    assert match_state("data/**/*.jsonl", False, "f", max_entries=100) == ("ok", "2 file(s)")
