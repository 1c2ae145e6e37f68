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
    # torch.compile per block: the same steps as its eager twin, to rounding, and their speed ratio recorded
    [compiled] = [r for r in ran if r["compiled"]]
    [eager] = [r for r in ran if not r["compiled"] and (r["documents"], r["recompute"]) == (False, "none")]
    assert compiled["loss_first"] == pytest.approx(eager["loss_first"], rel=1e-5)
    assert compiled["loss_last"] == pytest.approx(eager["loss_last"], rel=1e-4)
    assert list(result["compiled_vs_eager"]) == ["toy sdpa docs=False recompute=none"]
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table.splitlines()[0].split()[:5] == ["model", "backend", "documents", "recompute", "compiled"]
    assert len(table.splitlines()) == 2 + len(rows)


def test_the_gpu_rows_have_the_sizes_they_are_named_for_and_a_plan():
    """The GPU path's specs validate and derive here (no GPU needed): ~125M and ~1B parameters."""
    from runlib.plan import derive

    sizes = {}
    for row in gpu_check.GPU_ROWS:
        s = gpu_check.GPU_SETTINGS
        spec = gpu_check.bench_spec(
            gpu_check.SHAPES[row.model], s.vocab, s.seq_len, row.micro_batch, row.recompute, "h200", "fsdp"
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
    compiled = {**rows[2], "compiled": True, "tokens_per_s": 160492.8}
    assert gpu_check.compiled_vs_eager([*rows, compiled]) == {"125M sdpa docs=False recompute=none": pytest.approx(1.3)}
    assert gpu_check.compiled_vs_eager(rows) == {}  # no compiled row: nothing to compare
    lines = gpu_check.summary_table(rows).splitlines()
    assert lines[2].split()[-1] == "error" and lines[3].split()[-1] == "skipped"
    assert lines[4].split()[4:10] == ["no", "123,456", "41.0%", "12.50", "9.25", "0.74"]


def test_verify_speed_reports_both_hashes(capsys):
    from runlib.bench import verify_speed

    verify_speed.main(["--gib", "0.02", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "sha256" in out and "runlib" in out and "x" in out.splitlines()[-1]


def test_stage_overhead_reports_the_fixed_cost(capsys):
    from runlib.bench import stage_overhead

    med = stage_overhead.main(["--pairs", "1"])
    out = capsys.readouterr().out
    assert set(med) == {"python -c pass", "built", "build"} and all(v > 0 for v in med.values())
    assert "fixed cost (built - pass)" in out and "curate_shard" in out


def test_minhash_speed_reports_ratios_and_recall(capsys):
    from runlib.bench import minhash_speed

    assert minhash_speed.main(["--docs", "60", "--words", "40", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "signatures/s" in out and "S-curve" in out
    runlib_row = next(line for line in out.splitlines() if line.split()[:1] == ["runlib"] and "%" in line)
    assert float(runlib_row.split()[1].rstrip("%")) > 50  # recall of the planted near-duplicates


def test_train_step_bench_parts_without_launching_processes():
    """runlib.bench.train_step's pieces (the full run spawns processes: `python -m runlib.bench.train_step`)."""
    from pathlib import Path

    from runlib.bench import train_step
    from runlib.model.transformer import Transformer

    cfg = train_step.phase_config(str(Path(__file__).parent / "fixtures" / "tiny.yaml"), 2, 3, 5)
    assert cfg.loader.segments[0].batch_sequences == cfg.micro_batch * 2 * 3  # 3 micro-batches per step
    assert (cfg.span.start_step, cfg.span.end_step) == (0, 5) and cfg.checkpoint.every_steps is None
    assert cfg.monitor.eval_every_steps is None and cfg.optimizer.z_loss > 0
    ours = Transformer(cfg.model, cfg.vocab_rows, cfg.position_rows)
    peer = train_step.bare_model(cfg)
    assert sum(p.numel() for p in peer.parameters()) == sum(p.numel() for p in ours.parameters())
    # median step time after the first (warm-up) step, its CPU time per process, and the whole turn
    marks = [(0.0, 0.0), (5.0, 4.0), (6.0, 4.5), (7.0, 5.0), (10.0, 8.0)]
    figures = train_step.turn_figures(marks, 100, 2)
    assert figures == {"tokens_per_s": 100.0, "tokens_per_cpu_s": 100.0, "whole_turn_tokens_per_s": 40.0}
    rows = [{"bare_tokens_per_s": b, "runlib_tokens_per_s": r} for b, r in [(100, 90), (200, 220), (150, 150)]]
    summary = train_step.summarise(rows)["tokens_per_s"]
    assert summary["ratio_of_medians"] == 1.0 and summary["median_pair_ratio"] == 1.0
    # --moe: the MoE twin has the dense model's active parameters, the router aside
    from runlib.plan.params import count_params

    sparse = train_step.moe_config(cfg, 4)
    dense_counts = count_params(cfg.model, cfg.vocab_rows, cfg.seq_len)
    moe_counts = count_params(sparse.model, cfg.vocab_rows, cfg.seq_len)
    assert moe_counts.active - dense_counts.active == cfg.model.layers * cfg.model.d_model * 4
    assert moe_counts.total > dense_counts.total and sparse.model.moe is not None


def test_memory_check_bench_parts_without_launching_processes(tmp_path):
    """runlib.bench.memory_check's synthetic artifacts feed the real loader, and its short config keeps a
    checkpoint and an evaluation inside the run (the full check launches: `python -m runlib.bench.memory_check`)."""
    from pathlib import Path

    from runlib.bench import memory_check
    from runlib.data.loader import PhaseLoader
    from runlib.graph.build import build_graph
    from runlib.spec import load_spec
    from runlib.train.worker import special_token_ids

    spec = load_spec(Path(__file__).parent / "fixtures" / "tiny.yaml").spec
    dirs = memory_check.synthetic_inputs(spec, tmp_path)
    node = build_graph(spec).find("train_phase", phase=0)
    cfg = memory_check.short_config(node.config, 4)
    assert (cfg.span.end_step, cfg.checkpoint.every_steps, cfg.monitor.eval_every_steps) == (4, 2, 2)
    tokens = {role.removeprefix("tokens:"): d for role, d in dirs.items() if role.startswith("tokens:")}
    loader = PhaseLoader(cfg.loader, tokens, special_token_ids(dirs["tokenizer"]))
    batch = loader.micro_batch(0, 0, 0, 2, cfg.micro_batch)
    assert batch.input_ids.shape == (cfg.micro_batch, cfg.seq_len)
    assert bool((batch.doc_ids[:, 1:] != batch.doc_ids[:, :-1]).any())  # several documents: the mask is built


def test_deadline_restores_the_handler_and_is_a_no_op_off_the_main_thread():
    """runlib.util.deadline, which gpu_check's parts and `runlib track --resync` share."""
    import signal
    import threading

    from runlib.util.deadline import deadline

    before = signal.getsignal(signal.SIGALRM)
    with deadline(30.0, lambda: AssertionError("fired")):
        assert signal.getsignal(signal.SIGALRM) is not before
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with deadline(None, lambda: AssertionError("fired")):
        assert signal.getsignal(signal.SIGALRM) is before
    seen = []

    def off_main() -> None:
        with deadline(0.01, lambda: AssertionError("fired")):
            time.sleep(0.05)
        seen.append(signal.getsignal(signal.SIGALRM))

    thread = threading.Thread(target=off_main)
    thread.start()
    thread.join()
    assert seen == [before]


def test_curate_web_reports_both_sides_their_ratio_and_agreement(capsys):
    """runlib.bench.curate_web --quick: a runlib and a datatrove row per configuration (pages, kept, positive
    wall seconds and rates, the ratio), and per configuration the agreement with its stage-by-stage funnel."""
    from runlib.bench import curate_web

    assert curate_web.main(["--quick"]) == 0
    out = capsys.readouterr().out
    records = int(out.split(" records (")[0].rsplit(" ", 1)[1])
    assert records > 10 and "no language identification on either side" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("configuration"))
    assert lines[start].split()[1:] == [
        "side",
        "extractor",
        "pages",
        "kept",
        "wall",
        "s",
        "docs/s/core",
        "runlib/datatrove",
    ]
    end = next(i for i, line in enumerate(lines) if line.startswith("(pages:"))
    rows = [line.split() for line in lines[start + 1 : end]]
    runlib_rows = [r[r.index("runlib") :] for r in rows if "runlib" in r]
    datatrove_rows = [r for r in rows if r[0] == "datatrove"]
    assert [r[1] for r in runlib_rows] == ["resiliparse", "trafilatura"]
    if curate_web.datatrove_missing():  # datatrove and what its steps import are not installed: runlib only
        assert "datatrove: skipped, not installed" in out and not datatrove_rows
        return
    assert len(datatrove_rows) == 2 and datatrove_rows[0] == datatrove_rows[1]  # one run, shared by (a) and (b)
    for r in runlib_rows + datatrove_rows:
        pages, kept, wall, rate = int(r[2]), int(r[3]), float(r[4]), float(r[5])
        assert 0 < pages < records and 0 <= kept <= pages and wall > 0
        assert rate == pytest.approx(records / wall, rel=0.05)
    assert all(r[6].endswith("x") and float(r[6][:-1]) > 0 for r in runlib_rows)
    for label in ("(a)", "(b)"):
        block = out.split(f"\n{label} kept-URL agreement (Jaccard): ")[1].split("\n\n")[0].splitlines()
        figure = block[0].split(";")[0]
        assert figure == "-" or 0 <= float(figure) <= 1
        funnel = [line.split() for line in block[2:9]]
        assert [f[0] for f in funnel] == list(curate_web.STAGES)
        for column in (1, 2):  # a stage keeps at most what the one before it left
            assert all(int(a[column]) >= int(b[column]) for a, b in zip(funnel, funnel[1:], strict=False))
            assert int(funnel[0][column]) - int(funnel[1][column]) == 2  # the blocked host, the banned word
        assert any(line.startswith("  kept by runlib only") for line in block)
    assert "(a) runlib >= 5x datatrove docs/s/core" in out and "(b) agreement >= 0.95" in out


def test_extract_compare_prints_both_extractors_and_their_agreement(capsys):
    from runlib.bench import extract_compare

    assert extract_compare.main(["--quick"]) == 0
    out = capsys.readouterr().out
    table = [line.split() for line in out.splitlines()]
    rows = {r[0]: r for r in table if len(r) == 5 and r[0] in ("resiliparse", "trafilatura") and r[1] != "/"}
    assert set(rows) == {"resiliparse", "trafilatura"}
    for row in rows.values():
        assert float(row[1]) > 0 and int(row[3].replace(",", "")) > 0 and int(row[4]) == 0  # the chrome is gone
    median = float(out.split("word-set Jaccard per page: median ")[1].split(",")[0])
    assert 0.3 < median <= 1.0 and "pages >= 0.9:" in out


@pytest.mark.parametrize("fmt", ["jsonl", "warc"])
def test_data_scale_writes_a_source_and_a_spec_the_gate_accepts(tmp_path, fmt):
    """runlib.bench.data_scale's corpus and spec (the full run builds them with Snakemake: `python -m
    runlib.bench.data_scale`): about the MB asked, and a spec that loads, audits without error and shards
    by input.shard_bytes."""
    from runlib.audit import audit_loaded
    from runlib.bench.data_scale import write_crawl, write_source, write_spec
    from runlib.spec import load_spec

    written = write_crawl(tmp_path / "in", 2) if fmt == "warc" else write_source(tmp_path / "in", 2, seed=0)
    assert 2 * 2**20 <= written < 3 * 2**20
    write_spec(tmp_path / "spec.yaml", str(tmp_path / "in" / "*"), 1, fmt)
    loaded = load_spec(tmp_path / "spec.yaml")
    web = loaded.spec.data.sources["web"]
    assert web.input.format == fmt and web.input.shard_bytes == 2**20
    assert not [f for f in audit_loaded(loaded).findings if f.severity == "error"]


def test_async_checkpoint_bench_reports_both_stalls(capsys):
    from runlib.bench import async_checkpoint

    async_checkpoint.main(["--params-m", "5", "--rounds", "1"])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["params"] == 2048 * 2048 and result["rounds"] == 1
    assert 0 < result["async_stall_s"] <= result["async_total_s"] and result["blocking_s"] > 0
