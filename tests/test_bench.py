"""The benchmark scripts run (their figures are for people; here only that they work and report)."""

import json

from runlib.bench import gpu_check


def test_gpu_check_runs_its_cpu_smoke_and_flex_matches_sdpa(tmp_path):
    assert gpu_check.main(["--steps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["parity"]["logits_max_abs_diff"] < 1e-4
    assert {(r["backend"], r["documents"]) for r in result["throughput"]} >= {("sdpa", False), ("sdpa", True)}
    assert all(r["tokens_per_s"] > 0 for r in result["throughput"])
