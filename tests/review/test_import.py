"""`runlib import`: specs from nanoGPT, Hugging Face, torchtitan and Megatron-LM configs.

The fixtures under tests/fixtures/imports/ are written in each tool's documented format. Parameter
counts must equal the published ones; what the source does not say is marked `# assumed:`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runlib.cli import main
from runlib.errors import UserError
from runlib.plan import derive
from runlib.review.importers import HardwareChoice, import_file
from tests.heavy import heavy_imports

ROOT = Path(__file__).parent.parent.parent
FIX = ROOT / "tests" / "fixtures" / "imports"

# fixture -> (published total parameters, where published)
PUBLISHED = {
    # nanoGPT logs 123.59M without the 786,432 wpe weights (bias=False, vocab 50304): 123,587,328 + 786,432
    "train_gpt2.py": (124_373_760, "karpathy/nanoGPT train.py + config/train_gpt2.py"),
    "llama3_8b.toml": (8_030_261_248, "meta-llama/Meta-Llama-3-8B checkpoint"),
    "llama3_70b.toml": (70_553_706_496, "meta-llama/Meta-Llama-3-70B checkpoint"),
    "hf/llama3-8b.config.json": (8_030_261_248, "meta-llama/Meta-Llama-3-8B checkpoint"),
    "hf/mistral-7b.config.json": (7_241_732_096, "mistralai/Mistral-7B-v0.1 checkpoint"),
    "hf/gpt2.config.json": (124_439_808, "openai-community/gpt2 checkpoint"),
    "hf/pythia-160m.config.json": (162_322_944, "EleutherAI/pythia-160m model card, exact count"),
    "hf/olmo2-7b.config.json": (7_298_617_344, "allenai/OLMo-2-1124-7B checkpoint"),
    "hf/phi3-mini-4k.config.json": (
        3_821_079_552,
        "microsoft/Phi-3-mini-4k-instruct checkpoint (3.8B, arXiv 2404.14219)",
    ),
    # bigcode/starcoder2-15b: the model card rounds to 16B (arXiv 2402.19173: "15B"); the tensors of
    # transformers' modeling_starcoder2.py over this config, every Linear with a bias (use_bias) and
    # nn.LayerNorm with one: 2 x 49152 x 6144 (untied) + 40 x (2 x 6144^2 + 2 x 6144 x 512 + 2 x 6144 x 24576
    # + biases 2 x 6144 + 2 x 512 + 24576 + 6144 + norms 4 x 6144) + the final norm 2 x 6144
    "hf/starcoder2-15b.config.json": (
        2 * 49152 * 6144
        + 40 * (2 * 6144**2 + 2 * 6144 * 512 + 2 * 6144 * 24576 + 2 * 6144 + 2 * 512 + 24576 + 6144 + 4 * 6144)
        + 2 * 6144,
        "bigcode/starcoder2-15b tensors from config.json and modeling_starcoder2.py (card: 16B)",
    ),
    # Qwen/Qwen2-0.5B checkpoint: with the biases of q, k and v (model.qkv_bias), none on o or the MLP
    "hf/qwen2-0.5b.config.json": (494_032_768, "Qwen/Qwen2-0.5B checkpoint"),
    # Qwen/Qwen3-8B checkpoint (card: 8.2B, 6.95B non-embedding); QK-norm per head (qk_norm: per_head)
    "hf/qwen3-8b.config.json": (8_190_735_360, "Qwen/Qwen3-8B checkpoint"),
    # google/gemma-2-9b: 917,504,000 embedding (the checkpoint's 256,000 x 3584) + 8,324,201,984 non-embedding (arXiv 2408.00118, Table 2),
    # with an RMSNorm before and after each sublayer (norm_position: sandwich)
    "hf/gemma2-9b.config.json": (9_241_705_984, "google/gemma-2-9b, arXiv 2408.00118 Table 2"),
    # google/gemma-2-27b: 1,179,648,000 embedding (the checkpoint's 256,000 x 4608) + 26,047,480,320 non-embedding
    # (arXiv 2408.00118, Table 2)
    "hf/gemma2-27b.config.json": (27_227_128_320, "google/gemma-2-27b, arXiv 2408.00118 Table 2"),
    # google/gemma-3-1b-pt: 302M embedding + 698M non-embedding (arXiv 2503.19786, Table 1); sandwich norms and
    # per-head QK-norm
    "hf/gemma3-1b.config.json": (999_885_952, "google/gemma-3-1b-pt checkpoint"),
    # HuggingFaceTB/SmolLM3-3B (card: 3.08B): NoPE every 4th layer, tied embeddings
    "hf/smollm3-3b.config.json": (3_075_098_624, "HuggingFaceTB/SmolLM3-3B checkpoint"),
    # stabilityai/stablelm-2-1_6b (card: 1.6B; 1,644,515,328 in the checkpoint): LayerNorm with biases, q/k/v biases
    "hf/stablelm-2-1.6b.config.json": (1_644_515_328, "stabilityai/stablelm-2-1_6b checkpoint"),
}


@pytest.mark.parametrize("fixture", sorted(PUBLISHED))
def test_parameters_equal_published_counts(fixture):
    imported = import_file(FIX / fixture)
    published, where = PUBLISHED[fixture]
    total = derive(imported.loaded.spec).params.total
    assert total == published, f"{fixture}: {total:,} parameters, published {published:,} ({where})"
    assert "# assumed:" in imported.text  # what the source does not say is marked


def test_megatron_gpt3_175b_is_the_published_174_6b():
    imported = import_file(FIX / "gpt3_175b_megatron.sh")
    assert imported.format == "megatron"
    plan = derive(imported.loaded.spec)
    # Narayanan et al. 2021 (arXiv 2104.04473), Table 1: 174.6B for the 96-layer, 12288-wide GPT-3
    assert round(plan.params.total / 1e8) == 1746
    assert plan.params.total == 174_615_846_912  # vocab 50257 padded to 51200 (128 x tensor 8)
    assert plan.tokens_total == pytest.approx(300e9, rel=1e-4)  # 146,484,375 samples x 2048
    ramp = imported.loaded.spec.batch.ramp
    assert len(ramp) == 96 and ramp[0].global_batch.amount == 16 and ramp[-1].global_batch.amount == 1536


def test_the_families_of_2024_25_import_their_features_not_approximations():
    """Qwen2's q/k/v biases, Qwen3's per-head QK-norm, OLMo 2's reordered norms and Gemma's sandwich norms are
    the spec's own fields now, and the header no longer apologizes for them."""
    expected = {
        "hf/qwen2-0.5b.config.json": {"qkv_bias": True, "bias": False},
        "hf/qwen3-8b.config.json": {"qk_norm": "per_head"},
        "hf/olmo2-7b.config.json": {"qk_norm": True, "norm_position": "output"},
        "hf/gemma2-9b.config.json": {
            "norm_position": "sandwich",
            "qk_norm": False,
            "activation": "geglu",
            "attention_softcap": 50.0,
            "final_softcap": 30.0,
            "sliding_window": 4096,
            "global_every": 2,
        },
        "hf/mistral-7b.config.json": {"sliding_window": 4096, "global_every": None},
        "hf/gemma2-27b.config.json": {"attention_scale_dim": 144, "embedding_multiplier": 4608**0.5},
        "hf/smollm3-3b.config.json": {"nope_every": 4, "tie_embeddings": True},
        "hf/stablelm-2-1.6b.config.json": {"rope_fraction": 0.25, "qkv_bias": True, "norm": "layernorm"},
        "hf/olmo3-7b.config.json": {"sliding_window": 4096, "global_every": 4, "norm_position": "output"},
        "hf/gemma3-1b.config.json": {"norm_position": "sandwich", "qk_norm": "per_head"},
    }
    for fixture, fields in expected.items():
        imported = import_file(FIX / fixture)
        model = imported.loaded.spec.model
        assert {k: getattr(model, k) for k in fields} == fields, fixture
        assert "parameters more" not in imported.text and "not expressible" not in imported.text


def test_nanogpt_openwebtext_run_is_flagged_for_repeating_its_data():
    from runlib.audit import audit_loaded

    imported = import_file(FIX / "train_gpt2.py")
    spec = imported.loaded.spec
    assert (spec.batch.micro_batch, spec.batch.grad_accum, spec.hardware.devices_per_node) == (12, 5, 8)
    assert spec.tokens == 600_000 * 491_520
    findings = {f.code: f for f in audit_loaded(imported.loaded).findings}
    assert "MIX003" in findings and "32.6 epochs" in findings["MIX003"].message
    assert findings["MIX003"].severity == "error"  # over 16 epochs (Muennighoff et al. 2023)


def test_hf_training_arguments_are_read():
    imported = import_file(FIX / "hf" / "qwen2-0.5b.config.json", training_args=FIX / "qwen2-training_args.json")
    spec = imported.loaded.spec
    assert (spec.batch.micro_batch, spec.batch.grad_accum, spec.seed) == (4, 8, 42)
    assert spec.optimizer.lr == 3e-4 and spec.schedule.kind == "cosine"
    assert spec.schedule.warmup.amount == 500 and spec.schedule.warmup.unit == "steps"
    assert spec.tokens == 20_000 * 4 * 8 * 8 * spec.model.seq_len  # 8 assumed devices
    assert "[ARGS]" in imported.text


def test_nanogpt_config_is_never_executed(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.py"
    config.write_text(
        f"open({str(marker)!r}, 'w').write('x')\nn_layer = __import__('os').getpid()\nn_embd = 64 * 4\nn_head = 4\n"
    )
    imported = import_file(config)
    assert not marker.exists()
    assert imported.loaded.spec.model.d_model == 256 and imported.loaded.spec.model.layers == 12  # default kept
    assert "Skipped: n_layer" in imported.text


def test_cli_writes_the_spec_and_audits_it(tmp_path, capsys):
    out = tmp_path / "gpt2.yaml"
    code = main(["import", str(FIX / "train_gpt2.py"), "-o", str(out)])
    stdout = capsys.readouterr().out
    assert code == 1  # the audit finds errors (MIX003); the spec is written all the same
    assert "MIX003" in stdout and f"imported (nanogpt): {out}" in stdout
    from runlib.spec import load_spec

    assert load_spec(out).spec.name == "gpt2-124m"


def test_a_config_in_the_hub_cache_is_named_after_its_repository(tmp_path):
    """Llama 3.2 1B's published config.json has no _name_or_path; from the Hugging Face cache
    (models--meta-llama--Llama-3.2-1B/snapshots/<commit>/config.json) the run was named after the commit."""
    snapshot = tmp_path / "models--meta-llama--Llama-3.2-1B" / "snapshots" / ("4e20de36" * 5)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((FIX / "hf" / "llama3-8b.config.json").read_text())
    assert import_file(snapshot / "config.json").loaded.spec.name == "llama-3.2-1b"
    plain = tmp_path / "my-model"
    plain.mkdir()
    (plain / "config.json").write_text((FIX / "hf" / "llama3-8b.config.json").read_text())
    assert import_file(plain / "config.json").loaded.spec.name == "my-model"


def test_readme_import_example_quotes_the_real_output(tmp_path, capsys, monkeypatch):
    """The README's import example, run as written (from a directory of its own, the fixture by the
    repository's path): its first and last two lines are what the command prints (it said 2 warnings
    after RUN012 made them 3)."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```\n\$ runlib import (?P<args>[^\n]*)\n(?P<quoted>.*?)```", readme, re.S)
    assert block, "the README's import example"
    fixture, *rest = block["args"].split()
    monkeypatch.chdir(tmp_path)
    assert main(["import", str(ROOT / fixture), *rest]) == 1
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    quoted = block["quoted"].strip().splitlines()
    first = quoted[0].split("   (")[0]  # the README abbreviates the message in parentheses
    assert any(line.startswith(first) for line in printed), first
    assert quoted[-2:] == printed[-2:]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no/such/config.json"], "file not found"),
        (["{fix}/finetune_shakespeare.py"], "init_from = 'gpt2-xl'"),
        (["{tmp}/bert.json"], "model_type 'bert'"),
        (["{tmp}/notes.cfg"], "give --format"),
        (["{tmp}/moe.sh", "--format", "megatron"], "--num-experts"),
        (["{tmp}/tt.toml"], "flavor = '3B'"),
        (["{fix}/train_gpt2.py", "--training-args", "{fix}/qwen2-training_args.json"], "--format hf"),
        (["{tmp}/broken.json"], "not valid JSON"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys, args, needle):
    (tmp_path / "bert.json").write_text('{"model_type": "bert", "hidden_size": 768}')
    (tmp_path / "notes.cfg").write_text("some notes\n")
    (tmp_path / "moe.sh").write_text("--num-layers 4 --hidden-size 256 --num-experts 8\n")
    (tmp_path / "tt.toml").write_text('[model]\nname = "llama3"\nflavor = "3B"\n')
    (tmp_path / "broken.json").write_text('{"model_type": "llama",')
    argv = ["import"] + [a.format(fix=FIX, tmp=tmp_path) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_import_and_propose_import_no_heavy_modules(tmp_path):
    code = (
        "from runlib.cli import main;"
        f"main(['import', {str(FIX / 'llama3_8b.toml')!r}, '-o', {str(tmp_path / 'a.yaml')!r}]);"
        f"main(['propose', '--accelerator', 'a100-80gb', '--devices', '8', '--days', '2', '-o', {str(tmp_path / 'b.yaml')!r}])"
    )
    assert heavy_imports(code, tmp_path) == []
    assert (tmp_path / "a.yaml").exists() and (tmp_path / "b.yaml").exists()


def test_megatron_llama3_8b_example_script_resolves_as_bash_would():
    """NVIDIA's examples/llama/train_llama3_8b_h100_fp8.sh: its variables, ${N:-default}, arrays (quoted
    elements expanded unquoted) and if-branches resolved without running it; the vocabulary and fp8 flags of
    the arrays reach the spec; every flag not mapped is named in the header."""
    imported = import_file(FIX / "megatron_llama3_8b_h100_fp8.sh")
    spec = imported.loaded.spec
    # The script trains LayerNorm-1p (--apply-layernorm-1p, no --normalization RMSNorm), whose Transformer
    # Engine norms keep a bias: the meta-llama/Meta-Llama-3-8B checkpoint's 8,030,261,248 plus 65 x 4096.
    assert spec.model.norm == "layernorm1p"
    assert derive(spec).params.total == 8_030_261_248 + 65 * 4096
    assert spec.model.vocab_size == 128256 and spec.precision.compute == "fp8"
    assert (spec.hardware.nodes, spec.hardware.devices_per_node, spec.hardware.accelerator) == (1, 8, "h100-sxm")
    assert spec.model.seq_len == 8192 and spec.model.rope_theta == 1_000_000
    header = imported.text.split("\nname:")[0]
    assert "Not imported" in header and "--decoupled-lr 5.0e-4" in header and "--fp8-param-gather" in header
    assert "--master-addr" not in header  # torchrun's rendezvous is not the run's


def test_megatron_gpt3_example_names_the_world_it_needs_and_imports_on_16_nodes(capsys):
    """examples/gpt3/train_gpt3_175b_distributed.sh names one node for tensor 8 x pipeline 16; with --nodes 16
    it imports as GPT-3 175B. It sets a batch ramp with --train-iters, which Megatron-LM itself refuses
    (validate_args asserts against it): the iterations are read as samples at the full batch, and the spec says
    so at its line."""
    script = str(FIX / "megatron_gpt3_175b_distributed.sh")
    assert main(["import", script]) == 2
    err = capsys.readouterr().err
    assert "does not divide the 8 GPUs" in err and "runlib import --devices N" in err
    imported = import_file(FIX / "megatron_gpt3_175b_distributed.sh", hardware=HardwareChoice(nodes=16))
    plan = derive(imported.loaded.spec)
    assert plan.params.total == 174_615_846_912  # Narayanan et al. 2021 (arXiv 2104.04473) Table 1: 174.6B
    assert abs(plan.params.total / 175e9 - 1) < 0.005  # arXiv 2005.14165 Table 2.1: 175.0B
    assert plan.tokens_total == pytest.approx(500_000 * 1536 * 2048, rel=1e-5)  # --train-iters x batch x seq
    [line] = [x for x in imported.text.splitlines() if x.startswith("tokens:")]
    assert "expected no batch-size rampup for iteration-based training" in line and "assumed:" in line
    spec = imported.loaded.spec
    assert (spec.parallelism.tensor, spec.parallelism.pipeline, spec.hardware.nodes) == (8, 16, 16)
    assert len(spec.batch.ramp) == 96 and spec.precision.compute == "fp16"


def test_the_hardware_options_size_a_file_that_does_not_state_it(tmp_path):

    imported = import_file(FIX / "llama3_8b.toml", hardware=HardwareChoice(devices=64, accelerator="h800"))
    hw = imported.loaded.spec.hardware
    assert (hw.nodes, hw.devices_per_node, hw.accelerator) == (8, 8, "h800")
    assert "runlib import --nodes/--devices" in imported.text
    with pytest.raises(UserError, match="not in the catalog"):
        import_file(FIX / "llama3_8b.toml", hardware=HardwareChoice(accelerator="tpu-v9"))
    with pytest.raises(UserError, match="does not divide over --nodes 3"):
        import_file(FIX / "hf" / "llama3-8b.config.json", hardware=HardwareChoice(devices=16, nodes=3))
    with pytest.raises(UserError, match="a nanoGPT config names its launch"):
        import_file(FIX / "train_gpt2.py", hardware=HardwareChoice(devices=16))


LLAMA3_70B = 70_553_706_496  # meta-llama/Meta-Llama-3-70B checkpoint


def test_torchtitan_70b_preset_on_its_64_gpus_counts_llama3_70b_and_audits_clean():
    """torchtitan's llama3_70b.toml ("a preset for 64 A100 GPUs", 8-way TP): imported onto 8 nodes of 8
    H100s, the published 70B within 0.5% (exactly, in fact), tensor 8 x FSDP 8, and no audit error."""
    from runlib.audit import audit_loaded

    for choice in (HardwareChoice(nodes=8), HardwareChoice(devices=64, accelerator="h100-sxm")):
        imported = import_file(FIX / "llama3_70b.toml", hardware=choice)
        spec = imported.loaded.spec
        total = derive(spec).params.total
        assert abs(total - LLAMA3_70B) / LLAMA3_70B < 0.005, f"{total:,} against {LLAMA3_70B:,}"
        hw = spec.hardware
        assert (hw.nodes, hw.devices_per_node, hw.accelerator) == (8, 8, "h100-sxm")
        assert (spec.parallelism.tensor, spec.parallelism.sharding) == (8, "fsdp")
        assert (spec.batch.micro_batch, spec.batch.grad_accum) == (8, 1)
        assert spec.tokens == 1000 * 8 * 8 * 8192  # steps x local_batch_size x dp 8 x seq_len
        assert "Hardware assumed" not in imported.text
        errors = [f for f in audit_loaded(imported.loaded).findings if f.severity == "error"]
        assert errors == [], [f"{f.code}: {f.message}" for f in errors]


def test_torchtitan_70b_without_hardware_options_says_its_world_was_assumed(tmp_path, capsys):
    """Without --nodes/--devices the 70B preset lands on run_train.sh's default 8 GPUs, where it does not fit
    (MEM001): the header says the world size was assumed, quotes the file's own "64 A100 GPUs" and names
    the options that set it."""
    from runlib.audit import audit_loaded

    imported = import_file(FIX / "llama3_70b.toml")
    hw = imported.loaded.spec.hardware
    assert (hw.nodes, hw.devices_per_node) == (1, 8)
    codes = {f.code for f in audit_loaded(imported.loaded).findings if f.severity == "error"}
    assert "MEM001" in codes
    header = imported.text.split("\nname:")[0]
    assert "Hardware assumed: the TOML does not state its world size" in header
    assert '"NOTE: this toml config is a preset for 64 A100 GPUs."' in header
    assert "runlib import --nodes N or --devices N" in header
    out = tmp_path / "t70.yaml"
    assert main(["import", str(FIX / "llama3_70b.toml"), "-o", str(out)]) == 1
    assert "MEM001" in capsys.readouterr().out and "runlib import --nodes N" in out.read_text()
    assert main(["import", str(FIX / "llama3_70b.toml"), "-o", str(out), "--nodes", "8"]) == 0
    assert "0 error(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "script, words",
    [
        ('A=${1:-"x y"}\npython pretrain_gpt.py --p "$A" --q $A\n', ["--p", "x y", "--q", "x", "y"]),
        ("N=4\nM=$((N * 2 + 1))\npython pretrain_gpt.py --n $M\n", ["--n", "9"]),
        ('A=( "--a 1" --b )\npython pretrain_gpt.py ${A[@]}\n', ["--a", "1", "--b"]),
        ('A=( "--a 1" --b )\npython pretrain_gpt.py "${A[@]}"\n', ["--a 1", "--b"]),
        (
            'X=1\nif [[ "$X" == 2 ]]; then\n  F=--two\nelif [ -n "$X" ]; then\n  F=--one\nelse\n  F=--none\nfi\n'
            "python pretrain_gpt.py $F\n",
            ["--one"],
        ),
        (
            "mkdir -p \"$(dirname x)\"\nS=train.py\ntorchrun --nproc_per_node 8 $S --k 'v w'\n",
            ["torchrun", "--nproc_per_node", "8", "train.py", "--k", "v w"],
        ),
    ],
)
def test_launch_scripts_resolve_as_bash_would(script, words):
    from runlib.review.importers.shell import training_command

    command = training_command(script, "s.sh")
    assert command is not None
    assert command[-len(words) :] == words


def test_a_command_substitution_that_reaches_the_run_is_refused_with_its_line():
    from runlib.review.importers.shell import training_command

    with pytest.raises(UserError, match=r"s\.sh:2: \$\(nproc\)"):
        training_command("# launch\nGPUS=$(nproc)\ntorchrun --nproc_per_node $GPUS pretrain_gpt.py\n", "s.sh")
