"""Issue 12 item 4: defects the auditor used to miss, on the spec's own numbers (pass/fail cases of the
new and changed checks run in tests/audit/test_check_cases.py; these test the numbers and the text)."""

import math

import pytest

from runlib.audit import audit
from runlib.audit.cases import apply_patch, case_data
from runlib.audit.registry import summarize
from runlib.cli import main
from runlib.errors import SpecError
from runlib.plan import derive
from runlib.plan.derive import DEVICE_MTBF_HOURS
from runlib.spec import load_spec, load_spec_text, validate_data
from runlib.spec.loader import parse_yaml
from tests.conftest import BASE_SPEC, ROOT


def _spec_text(old: str, new: str) -> str:
    text = BASE_SPEC.read_text()
    assert text.count(old) == 1
    return text.replace(old, new)


def test_kv_heads_not_dividing_heads_is_a_spec_error_at_its_line(tmp_path, capsys):
    text = _spec_text("  heads: 12\n  kv_heads: 4\n", "  heads: 16\n  kv_heads: 6\n")
    with pytest.raises(SpecError) as exc:
        load_spec_text(text, "gqa.yaml")
    [d] = exc.value.diagnostics
    line = text.splitlines().index("  kv_heads: 6") + 1
    assert (d.code, d.path, d.line) == ("SPEC002", "model.kv_heads", line)
    assert "does not divide heads: 16" in d.message and "1, 2, 4 or 8" in d.message
    spec = tmp_path / "gqa.yaml"
    spec.write_text(text)
    assert main(["audit", str(spec)]) == 2  # refused at load: no parameter is computed
    assert f"gqa.yaml:{line}:" in capsys.readouterr().err


def test_kv_heads_dividing_heads_loads():
    assert load_spec_text(_spec_text("  kv_heads: 4\n", "  kv_heads: 12\n"), "mha.yaml").spec.model.kv_heads == 12


def _llama3_8b(patch: dict) -> object:
    data, _ = parse_yaml((ROOT / "specs" / "llama3-8b.yaml").read_text(), "llama3-8b.yaml")
    return validate_data(apply_patch(data, patch)).spec


def test_ckpt002_flags_a_10_hour_interval_on_2048_gpus_with_the_default_failure_rate():
    # Llama 3 8B on 256 nodes x 8 GPUs, no node_mtbf_hours: 25,500 steps of 8Mi tokens are ~10 h
    result = audit(_llama3_8b({"hardware.nodes": 256, "checkpoint.every": "25500 steps"}), select={"CKPT002"})
    ck = result.plan.checkpoint
    assert 9.5 < ck.interval_hours < 10.5
    assert math.isclose(DEVICE_MTBF_HOURS, 54 * 24 * 16384 / 419)  # Dubey et al. 2024 section 3.3.4
    assert math.isclose(ck.job_mtbf_hours, DEVICE_MTBF_HOURS / 2048)  # ~24.7 h
    assert ck.write_gb_per_s == 256 * 1.0  # each node's 1 GB/s (Llama 3's 2 TB/s over 2,048 nodes)
    assert math.isclose(ck.write_seconds, ck.size_bytes / 256e9)
    [f] = result.findings
    assert f.severity == "warning"  # 0.4x the MTBF: 81% progress under exponential failures, not an error
    assert "419 unexpected interruptions in 54 days on 16,384 GPUs" in f.message
    assert "96.36 GB at 256 GB/s" in f.message
    steps = int(f.value.split()[0])
    assert math.isclose(steps, ck.young_optimum_hours / ck.interval_hours * 25500, rel_tol=0.05)


def test_ckpt002_an_interval_past_the_mtbf_is_an_error():
    # 13x the job's MTBF: an interval completes before a failure once in e^13 attempts
    result = audit(
        _llama3_8b(
            {
                "hardware.nodes": 256,
                "hardware.node_mtbf_hours": 10.0 / 13 * 256,
                "checkpoint.every": "25500 steps",
            }
        ),
        select={"CKPT002"},
    )
    [f] = result.findings
    ratio = result.plan.checkpoint.interval_hours / result.plan.checkpoint.job_mtbf_hours
    assert 12 < ratio < 14.5 and f.severity == "error" and "redoes the rest" in f.message


def test_ckpt002_storage_bandwidth_bounds_the_write():
    capped = _llama3_8b({"hardware.storage_write_gb_per_s": 16})  # a shared filesystem slower than 128 nodes
    free = _llama3_8b({})
    capped_ck, free_ck = audit(capped, select=set()).plan.checkpoint, audit(free, select=set()).plan.checkpoint
    assert capped_ck.write_gb_per_s == 16 and math.isclose(capped_ck.write_seconds, capped_ck.size_bytes / 16e9)
    assert free_ck.write_gb_per_s == 128 * 1.0  # without a cap, the nodes' own links bound it


def test_warmup_past_the_first_phase_into_another_kind_is_flagged():
    result = audit(
        validate_data(case_data({"schedule.warmup": "5%", "phases[0].tokens": "3%", "phases[1].tokens": "87%"})).spec,
        select={"SCHED009"},
    )
    [f] = result.findings
    assert (f.path, f.value) == ("schedule.warmup", "276 steps")
    assert "'foundation'" in f.message and "'enrich' (enrichment)" in f.message and "60% of the peak LR" in f.message


def test_ignore_with_a_path_silences_only_that_path():
    two = {"data.sources.web.tokens": "200M", "data.sources.code.tokens": "50M"}  # MIX003 on both sources
    narrow = audit(validate_data(case_data({**two, "audit.ignore": {"MIX003@data.sources.web": "small"}})).spec)
    assert [(i.finding.path, i.entry) for i in narrow.ignored] == [
        ("data.sources.web.tokens", "MIX003@data.sources.web")
    ]
    assert [f.path for f in narrow.findings if f.code == "MIX003"] == ["data.sources.code.tokens"]
    assert not [f for f in narrow.findings if f.code == "AUDIT001"]
    bare = audit(validate_data(case_data({**two, "audit.ignore": {"MIX003": "small"}})).spec)
    assert {i.finding.path for i in bare.ignored} == {"data.sources.web.tokens", "data.sources.code.tokens"}
    [info] = [f for f in bare.findings if f.code == "AUDIT001"]
    assert info.severity == "info" and "data.sources.code.tokens, data.sources.web.tokens" in info.message


def test_pack002_quotes_the_weight_error_on_the_spec_numbers():
    patch = {"data.loss_normalization": "micro_batch_mean", "data.packing": "none", "data.mean_doc_tokens": 700}
    [f] = audit(validate_data(case_data(patch)).spec, select={"PACK002"}).findings
    assert "16 micro-batches of 8 x 2048 tokens" in f.message and "documents of 700 tokens" in f.message
    assert "2,026 to 8,573 targets" in f.message and "4.23 times as much as" in f.message


def test_long_lists_are_summarised():
    assert summarize([str(i) for i in range(117)]) == "0, 1, 2, ... 113 more, 116"
    assert summarize(["a", "b", "c", "d", "e"]) == "a, b, c, d, e"
    ramp = [{"after": f"{i * 10}M tokens", "global_batch": f"{i + 2} sequences"} for i in range(1, 118)]
    result = audit(validate_data(case_data({"batch.ramp": ramp, "batch.global_batch": "__delete__"})).spec)
    [f] = [f for f in result.findings if f.code == "BATCH005" and f.path == "phases[0].tokens"]
    assert "more," in f.message and len(f.message) < 400


def test_docs_of_changed_checks(capsys):
    for code in ("CKPT002", "SCHED009", "AUDIT001", "PACK002"):
        assert main(["explain", code]) == 0
    out = capsys.readouterr().out
    assert "Dubey et al. 2024" in out and "CODE@PATH" in out and "Liu et al." in out and "mean_doc_tokens" in out


def test_a_ramp_stage_after_n_steps_starts_after_n_optimizer_steps_of_the_run():
    """PaLM 540B (arXiv 2204.02311 section 5): 512 sequences until step 50k, 1024 until 115k, 2048 after, 780B
    tokens in about 255k steps. A step threshold used to count steps of the stage's own batch: 'after 50000
    steps' at 1024 sequences began at step 100,000, and the run took 351k steps, without a word."""
    plan = derive(load_spec(str(ROOT / "specs" / "palm-540b.yaml")).spec)
    starts = [seg.start_step for p in plan.phases for seg in p.span.segments]
    assert starts == [0, 50_000, 115_000]
    assert 255_000 <= plan.steps_total <= 257_000
    assert abs(plan.params.total - 540.35e9) / 540.35e9 < 0.005  # [P] Table 1


def test_palm_without_its_z_loss_is_warned():
    """The planted defect: z-loss removed from PaLM's 540B run at LR 1e-2 (the spec keeps PaLM's 1e-4)."""
    data, _ = parse_yaml((ROOT / "specs" / "palm-540b.yaml").read_text(), "palm-540b.yaml")
    clean = audit(validate_data(data).spec, select={"OPT003"})
    planted = audit(validate_data(apply_patch(data, {"optimizer.z_loss": 0.0})).spec, select={"OPT003"})
    assert not clean.findings
    [f] = planted.findings
    assert f.severity == "warning" and "peak LR of 0.01" in f.message


def test_a_phase_ending_just_past_a_ramp_threshold_ends_at_its_nearest_whole_step():
    """A phase whose nominal end falls 1,408 tokens past a batch-ramp threshold, inside the step that crosses
    it, ran that whole step (173 steps, +23,168 tokens) instead of the nearer end (172 steps, -11,648):
    found by tests/plan/test_properties.py's hypothesis search."""
    data = case_data(
        {
            "batch.micro_batch": 1,
            "batch.grad_accum": 1,
            "batch.global_batch": "__delete__",
            "hardware.devices_per_node": 1,
            "hardware.nodes": 1,
            "model.seq_len": 256,
            "tokens": 10_000_000,
            "phases[0].tokens": "346M tokens",
            "phases[1].tokens": "6M tokens",
            "phases[2].seq_len": 2048,
            "batch.ramp": [
                {"after": "0 tokens", "global_batch": "34816 tokens"},
                {"after": "352M tokens", "global_batch": "69632 tokens"},
            ],
        }
    )
    span = derive(validate_data(data).spec).phases[1].span
    assert [s.steps for s in span.segments] == [172] and span.drift_tokens == -11_648
