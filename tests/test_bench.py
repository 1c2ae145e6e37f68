"""The benchmark scripts run (their figures are for people; here only that they work and report)."""

import json
import os
import time

import pytest
import torch.distributed as dist

from runlib.bench import gpu_check


def test_gpu_check_runs_its_cpu_smoke_and_flex_matches_sdpa(tmp_path):
    env_before = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    assert gpu_check.main(["--steps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["complete"] is True
    assert result["parity"]["logits_max_abs_diff"] < 1e-4
    # FSDP2 on a gloo process group of world 1 that the script started, and took down again
    assert result["process_group"]["backend"] == "gloo" and "error" not in result["process_group"]
    assert not dist.is_initialized()
    assert {k: os.environ.get(k) for k in env_before} == env_before
    rows = result["training"]
    ran = [r for r in rows if "skipped" not in r]
    assert all("error" not in r for r in ran), [r.get("error") for r in ran]
    assert {(r["backend"], r["documents"], r["recompute"]) for r in ran} >= {
        ("sdpa", False, "none"),
        ("sdpa", True, "full"),
    }
    for r in ran:
        assert r["parallel"].startswith("fsdp2")
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1
        assert r["timed_steps"] == 1 and r["loss_finite"]
        assert r["plan_gib"] > 0 and r["peak_gib"] > 0
        assert r["ratio"] is None  # CPU: RSS is no device-memory measurement
        assert r["flops_per_token"] > 6 * r["params"] * 0.5
    assert all(r["backend"] == "flex" for r in rows if "skipped" in r)  # no flex backward on CPU
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table.splitlines()[0].split()[:4] == ["model", "backend", "documents", "recompute"]
    assert len(table.splitlines()) == 2 + len(rows)


def test_the_gpu_rows_have_the_sizes_they_are_named_for_and_a_plan():
    """The GPU path's specs validate and derive here (no GPU needed): ~125M and ~1B parameters."""
    from runlib.plan import derive

    sizes = {}
    for row in gpu_check.GPU_ROWS:
        s = gpu_check.GPU_SETTINGS
        spec = gpu_check.bench_spec(
            gpu_check.SHAPES[row.model], s["vocab"], s["seq_len"], row.micro_batch, row.recompute, "h200", "fsdp"
        )
        plan = derive(spec)
        sizes[row.model] = plan.params.total
        memory = plan.phases[0].memory
        assert 1 < memory.total / 2**30 < 139  # fits the H200 by the plan's own estimate
        assert plan.peak_flops() == 989e12
    assert 115e6 < sizes["125M"] < 135e6
    assert 0.9e9 < sizes["1B"] < 1.1e9
    full = gpu_check.bench_spec(gpu_check.SHAPES["1B"], 32768, 2048, 4, "full", "h200", "fsdp")
    none = gpu_check.bench_spec(gpu_check.SHAPES["1B"], 32768, 2048, 4, "none", "h200", "fsdp")
    assert derive(full).phases[0].memory.activations < derive(none).phases[0].memory.activations


def test_gpu_check_bounds_its_parts_and_records_what_it_skips(tmp_path):
    assert gpu_check.main(["--budget-s", "0", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["complete"] and "skipped" in result["parity"]
    assert result["training"] and all("skipped" in r for r in result["training"])
    start = time.perf_counter()
    with pytest.raises(gpu_check.PartTimeout), gpu_check.time_limit(0.2):
        while True:
            pass
    assert time.perf_counter() - start < 5


def test_summary_table_shows_failed_and_skipped_rows():
    rows = [
        {"model": "1B", "backend": "flex", "documents": True, "recompute": "full", "error": "OOM"},
        {"model": "125M", "backend": "sdpa", "documents": False, "recompute": "none", "skipped": "budget"},
        {
            "model": "125M",
            "backend": "sdpa",
            "documents": False,
            "recompute": "none",
            "tokens_per_s": 123456.0,
            "mfu": 0.41,
            "peak_gib": 12.5,
            "plan_gib": 9.25,
            "ratio": 0.74,
        },
    ]
    lines = gpu_check.summary_table(rows).splitlines()
    assert lines[2].split()[-1] == "error" and lines[3].split()[-1] == "skipped"
    assert lines[4].split()[4:9] == ["123,456", "41.0%", "12.50", "9.25", "0.74"]


def test_verify_speed_reports_both_hashes(capsys):
    from runlib.bench import verify_speed

    verify_speed.main(["--gib", "0.02", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "sha256" in out and "runlib" in out and "x" in out.splitlines()[-1]
