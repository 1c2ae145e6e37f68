"""The specs under specs/ that reproduce published pre-training runs.

Each spec's derived parameter count must equal the count published for that model. Every architecture
here is fully specified, so equality is exact; the 1% bound is asserted as well so that a failure says
whether the derivation is far off or only off by a few tensors. All specs in specs/ must audit with no
error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runlib.spec import load_spec

ROOT = Path(__file__).parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))

# spec -> (published total parameter count, where it is published)
PUBLISHED: dict[str, tuple[int, str]] = {
    # The nanoGPT run: train.py defaults to bias=False and vocab 50304, and logs "number of parameters:
    # 123.59M", which excludes the 1024 x 768 = 786,432 learned position weights:
    # 123,587,328 + 786,432 = 124,373,760. (The GPT-2 checkpoint, with biases and vocab 50257, has
    # 124,439,808: 0.05% away.)
    "specs/gpt2-124m-owt.yaml": (124_373_760, "karpathy/nanoGPT train.py + config/train_gpt2.py, logged 123.59M + wpe"),
    "specs/pythia-160m.yaml": (162_322_944, "EleutherAI/pythia-160m model card, exact parameter count"),
    "specs/pythia-1b.yaml": (1_011_781_632, "EleutherAI/pythia-1b model card, exact parameter count"),
    "specs/llama2-7b.yaml": (6_738_415_616, "meta-llama/Llama-2-7b-hf checkpoint (arXiv 2307.09288)"),
    "specs/llama3-8b.yaml": (8_030_261_248, "meta-llama/Meta-Llama-3-8B checkpoint (arXiv 2407.21783)"),
    "specs/olmo2-7b.yaml": (7_298_617_344, "allenai/OLMo-2-1124-7B checkpoint (arXiv 2501.00656)"),
    "specs/olmo2-32b.yaml": (32_234_279_936, "allenai/OLMo-2-0325-32B checkpoint, config.json (arXiv 2501.00656)"),
    "specs/tinyllama-1.1b.yaml": (
        1_100_048_384,
        "TinyLlama-1.1B-intermediate-step-1431k-3T checkpoint (arXiv 2401.02385)",
    ),
    # ALiBi + embedding LayerNorm + biases, tied ("176,247M" in arXiv 2211.05100 Table 3)
    "specs/bloom-176b.yaml": (176_247_271_424, "bigscience/bloom checkpoint (arXiv 2211.05100 Table 3: 176,247M)"),
    # parallel blocks with one biased LayerNorm, bias-free linear layers, multi-query attention
    "specs/falcon-7b.yaml": (6_921_720_704, "tiiuae/falcon-7b checkpoint (arXiv 2311.16867)"),
    # ALiBi, LayerNorm and linear layers without bias (no_bias)
    "specs/mpt-7b.yaml": (6_649_286_656, "mosaicml/mpt-7b checkpoint (model card: 6.7B)"),
    # tied 256000 x 4608 embedding + 26,047,480,320 non-embedding (arXiv 2408.00118 Table 2, whose embedding
    # count is for 256,128 rows): GeGLU, an RMSNorm before and after each sublayer (norm_position: sandwich)
    "specs/gemma2-27b.yaml": (27_227_128_320, "google/gemma-2-27b checkpoint (arXiv 2408.00118 Table 2)"),
    # tied embeddings, GQA 16/4, NoPE every 4th layer (no parameters of its own)
    "specs/smollm3-3b.yaml": (
        3_075_098_624,
        "HuggingFaceTB/SmolLM3-3B checkpoint, model.safetensors.index.json total_size 6,150,197,248 bytes in bf16",
    ),
}

# spec -> (published count as the paper rounds it, where it is published): within ROUNDED_TOLERANCE
ROUNDED_TOLERANCE = 0.005
ROUNDED: dict[str, tuple[int, str]] = {
    # 174,604,443,648 with 2048 position rows (OPT's table has 2050: +24,576)
    "specs/opt-175b.yaml": (175_000_000_000, "OPT-175B, arXiv 2205.01068 Table 1: 175B"),
    # 67,425,001,472 from the config; the paper's "67B" is 0.63% away, the checkpoint page's 67.4B 0.04%
    "specs/deepseek-llm-67b.yaml": (67_400_000_000, "deepseek-ai/deepseek-llm-67b-base: 67.4B (arXiv 2401.02954: 67B)"),
    # 280,226,709,504 with the Transformer-XL relative-position projections (21.5B of them)
    "specs/gopher-280b.yaml": (280_000_000_000, "Gopher, arXiv 2112.11446 Table 1: 280B"),
    "specs/chinchilla-70b.yaml": (70_000_000_000, "Chinchilla, arXiv 2203.15556 Table 4: 70B"),  # 70,320,136,192
    # 15,628,775,424 (-0.45%): untied 2 x 256000 x 6144 = 3,145,728,000 + 32 x (q, o 2 x 6144^2 + k, v
    # 2 x 6144 x 1024 + squared-ReLU MLP 2 x 6144 x 24576 + two LayerNorm-1p with bias 4 x 6144) + the final
    # LayerNorm 2 x 6144; the paper's 3.2B embedding is 3.146B by its own shape (no checkpoint is public)
    "specs/nemotron4-15b.yaml": (15_700_000_000, "Nemotron-4 15B, arXiv 2402.16819 §2: 3.2B + 12.5B"),
    # 671,026,404,352: MLA, 3 dense layers and 58 MoE layers of 256 routed + 1 shared expert; the MTP module apart
    "specs/deepseek-v3.yaml": (671_000_000_000, "DeepSeek-V3, arXiv 2412.19437 §4.2: 671B"),
    # 6,919,161,856: 16 layers of 64 SwiGLU experts of 1024 with a router, full-width QK-norm, untied 50304 rows
    "specs/olmoe-1b-7b.yaml": (6_900_000_000, "allenai/OLMoE README: 6.9 billion total parameters"),
}


@pytest.mark.parametrize("spec_path", sorted(PUBLISHED))
def test_published_spec_loads(spec_path: str) -> None:
    loaded = load_spec(ROOT / spec_path)
    assert loaded.spec.name == Path(spec_path).stem


@pytest.mark.parametrize("spec_path", sorted(PUBLISHED))
def test_parameter_count_matches_published(spec_path: str) -> None:
    from runlib.plan import derive

    published, source = PUBLISHED[spec_path]
    plan = derive(load_spec(ROOT / spec_path).spec)
    total = plan.params.total
    assert abs(total - published) <= 0.01 * published, (
        f"{spec_path}: derived {total:,} parameters, published {published:,} ({source}): "
        f"off by {(total - published) / published:+.2%}"
    )
    assert total == published, f"{spec_path}: derived {total:,}, published {published:,} ({source})"
    assert plan.params.embedding + plan.params.non_embedding == total


@pytest.mark.parametrize("spec_file", SPECS, ids=[p.name for p in SPECS])
def test_spec_audits_without_errors(spec_file: Path) -> None:
    from runlib.graph.measured import audit_spec_file

    result = audit_spec_file(spec_file)
    for finding in result.findings:
        assert finding.severity in {"error", "warning", "info"}, finding
    errors = [f for f in result.findings if f.severity == "error"]
    assert not errors, f"{spec_file.name}: " + "; ".join(
        f"{getattr(f, 'code', '?')} at {getattr(f, 'path', '?')}: {getattr(f, 'message', f)}" for f in errors
    )


def test_demo_has_nothing_the_trainer_refuses() -> None:
    """The published specs may describe layouts runlib does not enact (RUN warnings); the demo must run."""
    from runlib.graph.measured import audit_spec_file

    result = audit_spec_file(ROOT / "specs" / "demo.yaml")
    assert [f.code for f in result.findings if f.code.startswith("RUN")] == []


@pytest.mark.parametrize("spec_path", sorted(ROUNDED))
def test_parameter_count_matches_the_papers_rounding(spec_path: str) -> None:
    from runlib.plan import derive

    published, source = ROUNDED[spec_path]
    total = derive(load_spec(ROOT / spec_path).spec).params.total
    off = (total - published) / published
    assert abs(off) <= ROUNDED_TOLERANCE, (
        f"{spec_path}: derived {total:,}, published {published:,} ({source}): {off:+.2%}"
    )


def _codes(spec_file: str) -> dict[str, list]:
    from runlib.graph.measured import audit_spec_file

    out: dict[str, list] = {}
    for f in audit_spec_file(ROOT / spec_file).findings:
        out.setdefault(f.code, []).append(f)
    return out


def test_the_problems_those_runs_had_are_flagged() -> None:
    """Issue 12: MPT's repeated Wikipedia, OPT's fp16 on bf16 hardware, BLOOM's ramp summarised; what the
    trainer cannot enact (relative positions, ALiBi under TP) refused, not silently ignored."""
    mpt = _codes("specs/mpt-7b.yaml")
    assert [f.path for f in mpt["MIX003"]][0] == "data.sources.rp_wikipedia.tokens"
    assert "8.2 epochs" in mpt["MIX003"][0].message
    opt = _codes("specs/opt-175b.yaml")
    assert opt["PREC007"][0].severity == "warning" and "RUN008" in opt  # fp16 on A100; dropout under TP 8
    bloom = _codes("specs/bloom-176b.yaml")
    assert "PREC007" not in bloom  # BLOOM-176B trained in bf16 (its fp16 lesson)
    assert "more" in bloom["BATCH005"][0].message  # 117 ramp sizes summarised
    assert "RUN008" in bloom and "RUN002" not in bloom  # ALiBi under TP refused; its 12 pipeline stages enacted
    assert "RUN008" in _codes("specs/gopher-280b.yaml")
    mpt_runs = [c for c in _codes("specs/mpt-7b.yaml") if c.startswith("RUN")]
    # Lion, ALiBi, FSDP: enacted; its tokenizer.json is not shipped here (RUN012: the gate would refuse it)
    assert mpt_runs == ["RUN012"]


def test_deepseek_multistep_schedule_and_gopher_relative_flops() -> None:
    from runlib.plan import derive

    plan = derive(load_spec(ROOT / "specs/deepseek-llm-67b.yaml").spec)
    s, run = plan.schedule, plan.tokens_total
    assert s.lr_at(0.5 * run) == 3.2e-4
    assert s.lr_at(0.85 * run) == pytest.approx(3.2e-4 * 0.316) and s.lr_at(0.95 * run) == pytest.approx(3.2e-5)
    gopher = derive(load_spec(ROOT / "specs/gopher-280b.yaml").spec)
    m = gopher.spec.model
    # PaLM convention with the relative-position score matmul: 6 N + 18 L d_attn s
    assert gopher.phases[0].flops_per_token == 6 * gopher.params.matmul + 18 * m.layers * m.heads * 128 * 2048


def test_deepseek_v3_active_mtp_and_gpu_hours() -> None:
    """DeepSeek-V3 as published (arXiv 2412.19437): 37B activated (DeepSeek's count leaves out the input
    embedding table, 129280 x 7168), 685B with the MTP module (the checkpoint also stores copies of the
    embedding and head there), and Table 1's H800 GPU-hours: 2,664K pre-training (the spec's MFU is fitted
    to it) and 119K context extension, which the plan derives from the FLOP count at 32K and 128K."""
    from runlib.plan import derive

    plan = derive(load_spec(ROOT / "specs/deepseek-v3.yaml").spec)
    p = plan.params
    input_table = 129_280 * 7168
    assert abs((p.active - input_table) / 37e9 - 1) < 0.015  # 36.63B; "37B" is rounded
    assert abs((p.total + p.mtp) / 685e9 - 1) < 0.005
    assert abs((p.total + p.mtp + 2 * input_table) / 685e9 - 1) < 0.001  # with the checkpoint's copies
    pre = sum(ph.hours * ph.settings.devices for ph in plan.phases if ph.kind == "foundation")
    extension = sum(ph.hours * ph.settings.devices for ph in plan.phases if ph.kind == "long_context")
    assert abs(pre / 2_664_000 - 1) < 0.005
    assert abs(extension / 119_000 - 1) < 0.05
    assert abs(plan.gpu_hours / 2_783_000 - 1) < 0.005
    # expert parallelism over 8 nodes: each MoE layer of a stage sends its tokens' top-8 copies and back
    moe = plan.phases[0].moe
    assert moe is not None and moe.ep_nodes == 8 and moe.moe_layers == 58 + 1
    assert moe.all_to_all_seconds_per_step < moe.compute_seconds_per_step


def test_olmoe_active_parameters() -> None:
    """OLMoE-1B-7B: 1.3 billion active parameters (allenai/OLMoE README), the embedding table counted."""
    from runlib.plan import derive

    params = derive(load_spec(ROOT / "specs/olmoe-1b-7b.yaml").spec).params
    assert params.active == 1_282_017_280 and abs(params.active / 1.3e9 - 1) < 0.015


def test_terminal_view_names_active_parameters_and_expert_degree(capsys: pytest.CaptureFixture[str]) -> None:
    """A mixture's total alone reads as a dense model 18 times the size: the terminal view prints the active
    count beside it and the expert-parallel degree beside dp; a dense spec prints neither."""
    from runlib.cli import main

    assert main(["audit", str(ROOT / "specs/deepseek-v3.yaml")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "671B total, 37.6B active per token" in out and "dp 128, ep 64" in out
    assert main(["audit", str(ROOT / "specs/demo.yaml")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "active per token" not in out and ", ep " not in out
