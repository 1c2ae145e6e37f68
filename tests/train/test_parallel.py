"""The parallel engine against one process: FSDP2, DDP, HSDP, tensor and context parallel, 2x2, DCP resume, recompute, optimizers, bf16.

Three launches (torchrun, gloo on CPU) of tests/train/parallel_worker.py, 2, 4 and 8 processes, train a
tiny transformer (2 layers, d_model 64, 4 heads, 2 kv heads, vocab 256, seq 32) for 4 AdamW updates
under each layout; this process trains the same model on one process (no process group) and
compares. Tolerances: fp32 reductions in another order change gradients by ~1e-7 relative, and
Adam turns a gradient entry within rounding of zero into an update of up to ~lr (m / (sqrt(v) + eps)
is then sign-like), so parameters are compared at lr 1e-4 within 5e-6 (measured: <= 8e-7 on one
x86-64 CPU, up to 1.44e-6 under tensor parallelism on another, whose matmul kernels sum in another
order; at lr 1e-3, <= 1e-5). A missing or doubled reduction moves parameters by ~lr = 1e-4 per update,
and the gradient norms are compared to 1e-5 relative besides. Muon's Newton-Schulz iteration runs in bf16 (torch.optim.Muon), so Muon runs agree to
1e-4 (measured ~1e-5).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from runlib.model.parallelize import build_mesh, data_parallel_rank_and_size, parallelize
from runlib.train.dist_checkpoint import (
    full_model_state_dict,
    is_complete,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from runlib.train.optim import build_optimizer, muon_parameters
from tests.limits import HANG_GUARD_S
from tests.train import parallel_worker as w

# one xdist worker runs this module (pyproject: --dist loadgroup): its launches are shared fixtures
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("parallel")]
PARAM_TOL = 5e-6
# tensor x pipeline x FSDP on 8 processes sums each row-wise matmul's partial products, the stages' gradient
# norms and the reduce-scatters in an order of its own: fp32 round-off over 4 AdamW steps, which depends on the
# CPU's kernels (6.3e-6 on one x86 machine, under 5e-6 on another, same commit)
THREE_D_TOL = 1e-5
MUON_TOL = 1e-4
WORKER = Path(w.__file__)


def launch(processes: int, name: str, out_dir: Path, ckpt: Path) -> dict:
    out = out_dir / f"{name}.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    cmd += [str(WORKER), "--set", name, "--out", str(out), "--ckpt", str(ckpt)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    results = torch.load(out, weights_only=False)
    results["wall_seconds"] = time.time() - t0
    return results


@pytest.fixture(scope="session")  # not module: xdist may interleave other modules (a rebuild each time)
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("parallel")
    ckpt = tmp / "step-2"
    two = launch(2, "2proc", tmp, ckpt)  # writes the checkpoint the 4-process launch resumes
    four = launch(4, "4proc", tmp, ckpt)
    eight = launch(8, "8proc", tmp, ckpt)
    print(f"8 processes: {eight.pop('wall_seconds'):.0f} s")
    eight.pop("seconds")
    four.update(eight)
    print(f"\n2 processes: {two.pop('wall_seconds'):.0f} s, 4 processes: {four.pop('wall_seconds'):.0f} s")
    two.pop("seconds"), four.pop("seconds")
    return {**two, **four, "ckpt": ckpt}


_refs: dict = {}


def reference(model_name="llama", kind="adamw", precision=w.FP32, docs=False) -> dict:
    """The same training on one process, no process group."""
    key = (model_name, kind, id(precision), docs)
    if key not in _refs:
        _refs[key] = w.run(w.layout(), model_name=model_name, kind=kind, precision=precision, docs=docs)
    return _refs[key]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def assert_matches(result: dict, ref: dict, tol: float = PARAM_TOL) -> None:
    n = len(result["losses"])
    assert max_diff(result["params"], ref["params"]) < tol
    assert result["losses"] == pytest.approx(ref["losses"][-n:], abs=1e-5)
    # Adam hides a wrongly scaled gradient; the gradient norm (before clipping) does not
    assert result["grad_norms"] == pytest.approx(ref["grad_norms"][-n:], rel=1e-5)


# ----------------------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("name", ["fsdp", "zero2", "ddp", "hsdp", "hsdp_replicate_only"])
def test_data_parallel_layouts_equal_one_process(runs, name) -> None:
    assert_matches(runs[name], reference())


@pytest.mark.parametrize("name,model", [("tp", "llama"), ("tp_gpt2", "gpt2")])
def test_tensor_parallel_equals_one_process(runs, name, model) -> None:
    """llama: q/k/v/w1/w3 column-wise, wo/w2 row-wise, vocab-split embedding and head; gpt2: tied, learned positions, LayerNorm, biases."""
    assert_matches(runs[name], reference(model))


@pytest.mark.parametrize("name", ["fsdp_tp", "ddp_tp"])
def test_two_by_two_equals_one_process(runs, name) -> None:
    """4 processes: dp_shard 2 x tp 2 (FSDP2 over tensor-parallel DTensors), dp_replicate 2 x tp 2."""
    assert_matches(runs[name], reference())


@pytest.mark.parametrize(
    "name,model,docs",
    [
        ("cp", "llama", False),
        ("cp_docs", "llama", True),
        ("cp_gpt2", "gpt2", False),
        ("cp_fsdp_docs", "llama", True),
        ("cp_fsdp_full", "llama", True),
        ("cp_fsdp2_docs", "llama", True),
        ("cp_tp_docs", "llama", True),
        ("cp_ddp", "llama", False),
    ],
)
def test_context_parallel_equals_one_process(runs, name, model, docs) -> None:
    """Context parallelism 2 (Llama 3's all-gather form, load-balanced chunks): alone (DDP over the cp ranks),
    with documents packed into the rows (their mask over the gathered keys), learned positions and tied
    embeddings, FSDP2 over the cp ranks (with full recomputation: the gather runs again in the backward),
    and on 4 processes FSDP2 over dp_shard 2 x cp 2, cp 2 x tp 2 and DDP 2 x cp 2."""
    assert_matches(runs[name], reference(model, docs=docs))


@pytest.mark.parametrize(
    "name,docs",
    [
        ("pp_1f1b", False),
        ("pp_1f1b_one_micro_batch", False),
        ("pp_gpipe_docs", True),
        ("pp_interleaved_docs", True),
        ("pp_ddp", False),
        ("pp_fsdp_docs", True),
        ("pp_tp_docs", True),
        ("pp_tp_fsdp_docs", True),
    ],
)
def test_pipeline_parallel_equals_one_process(runs, name, docs) -> None:
    """Pipeline parallelism 2 over a 4-block model (torch.distributed.pipelining): 1F1B (also with one
    micro-batch, fewer than its stages), GPipe and interleaved 1F1B with 2 virtual stages per rank; on 4 processes 1F1B with replicated stages (dp 2), FSDP2-sharded
    stages (dp_shard 2) and tensor-parallel stages (tp 2); on 8, tensor 2 x pipeline 2 x FSDP 2. The loss carries the step's normalization, the
    gradient norm is summed over the stages."""
    assert_matches(runs[name], reference("llama4", docs=docs), THREE_D_TOL if name == "pp_tp_fsdp_docs" else PARAM_TOL)


# ----------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("name", ["fsdp", "cp_fsdp_docs", "pp_fsdp_docs"])
def test_checkpoint_resumes_bitwise_on_the_same_layout(runs, name) -> None:
    """FSDP 2, context 2 over FSDP, and pipeline 2 x FSDP 2 (each stage saves its own blocks into one DCP
    checkpoint): a fresh model resumed from the step-2 checkpoint trains to the same bits."""
    uninterrupted, resumed = runs[name], runs[f"{name}_resumed"]
    assert resumed["losses"] == uninterrupted["losses"][w.CKPT_STEP :]
    for key, value in uninterrupted["params"].items():
        assert torch.equal(resumed["params"][key], value), key


def test_full_state_dicts_resume_bitwise_on_the_same_layout(runs) -> None:
    """The one-file form (whole tensors gathered on rank 0, loaded on every rank) loses nothing either."""
    for key, value in runs["fsdp"]["params"].items():
        assert torch.equal(runs["fsdp_resumed_full"]["params"][key], value), key


def test_full_state_dicts_resume_on_one_process(runs) -> None:
    result = w.resume_full(w.layout(), runs["ckpt"].with_name("full.pt"))
    assert max_diff(result["params"], runs["fsdp"]["params"]) < PARAM_TOL


def test_full_model_state_dict_has_the_plain_model_keys() -> None:
    for name in w.MODELS:
        model = w.tiny_model(name)
        assert full_model_state_dict(model).keys() == model.state_dict().keys()


def test_checkpoint_resumes_on_four_processes_as_two_by_two(runs) -> None:
    assert max_diff(runs["resumed_fsdp_tp"]["params"], runs["fsdp"]["params"]) < PARAM_TOL


def test_checkpoint_resumes_on_one_process_without_a_process_group(runs) -> None:
    result = w.resume(w.layout(), runs["ckpt"])
    assert max_diff(result["params"], runs["fsdp"]["params"]) < PARAM_TOL
    assert result["losses"] == pytest.approx(runs["fsdp"]["losses"][w.CKPT_STEP :], abs=1e-6)


@pytest.mark.parametrize("kind", ["adam", "adafactor", "muon"])
def test_checkpoint_resumes_every_optimizer_bitwise(tmp_path, kind) -> None:
    """MuonWithAdamW re-links its inner optimizers after loading; Adafactor's factored states round-trip."""
    mesh, model, optimizer = w.build(w.layout(), kind=kind)
    w.train(mesh, model, optimizer, range(w.CKPT_STEP))
    save_checkpoint(tmp_path / "ckpt", model, optimizer, {"step": w.CKPT_STEP, "rng": torch.get_rng_state()})
    uninterrupted = w.result(model, w.train(mesh, model, optimizer, range(w.CKPT_STEP, w.STEPS)))
    resumed = w.resume(w.layout(), tmp_path / "ckpt", kind=kind)
    assert resumed["losses"] == uninterrupted["losses"]
    for key, value in uninterrupted["params"].items():
        assert torch.equal(resumed["params"][key], value), key


def test_checkpoint_save_is_atomic_and_replaces(tmp_path) -> None:
    mesh, model, optimizer = w.build(w.layout())
    w.train(mesh, model, optimizer, range(1))
    target = tmp_path / "step-1"
    (tmp_path / ".step-1.tmp").mkdir()  # a killed save's leftovers
    save_checkpoint(target, model, optimizer, {"step": 1})
    save_checkpoint(target, model, optimizer, {"step": 2})  # over an existing checkpoint
    assert is_complete(target) and not (tmp_path / ".step-1.tmp").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1"]
    (tmp_path / "step-5").mkdir()  # incomplete: no metadata
    assert latest_checkpoint(tmp_path) == target
    assert load_checkpoint(target, model, optimizer) == {"step": 2}
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "step-5", model)


# ----------------------------------------------------------------------------------------- recomputation


@pytest.mark.parametrize("mode", ["full", "selective", "mlp"])
def test_recomputation_gives_the_same_gradients(mode) -> None:
    grads = {}
    for m in ("none", mode):
        model = parallelize(w.tiny_model(), None, w.layout(recompute=m), w.FP32)
        inputs, targets = w.batch(0)
        torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).backward()
        grads[m] = {n: p.grad for n, p in model.named_parameters()}
    for name, g in grads["none"].items():
        assert torch.equal(grads[mode][name], g), name


def test_recomputation_keeps_fewer_activations() -> None:
    """Bytes autograd keeps for the backward pass (what checkpointed regions drop is never packed here)."""
    kept = {}
    for mode in ("none", "selective", "mlp", "full"):
        model = parallelize(w.tiny_model(), None, w.layout(recompute=mode), w.FP32)
        total = [0]

        def pack(t, total=total):
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(w.batch(0)[0]).sum()
        loss.backward()
        kept[mode] = total[0]
    assert kept["none"] > kept["selective"] > kept["full"]
    assert kept["none"] > kept["mlp"] > kept["full"]


@pytest.mark.parametrize("name", ["fsdp_full", "fsdp_selective"])
def test_recomputation_under_fsdp_trains_identically(runs, name) -> None:
    for key, value in runs["fsdp"]["params"].items():
        assert torch.equal(runs[name]["params"][key], value), key


# ----------------------------------------------------------------------------------------- optimizers


@pytest.mark.parametrize(
    "name,kind,tol",
    [
        ("fsdp_adam", "adam", PARAM_TOL),
        ("fsdp_adafactor", "adafactor", PARAM_TOL),
        ("fsdp_tp_adafactor", "adafactor", PARAM_TOL),
        ("fsdp_muon", "muon", MUON_TOL),
        ("fsdp_tp_muon", "muon", MUON_TOL),
    ],
)
def test_optimizers_on_sharded_parameters_equal_one_process(runs, name, kind, tol) -> None:
    assert_matches(runs[name], reference(kind=kind), tol)


def test_optimizer_kinds_make_finite_and_different_updates() -> None:
    init = w.tiny_model().state_dict()
    params = {kind: reference(kind=kind)["params"] for kind in ("adamw", "adam", "adafactor", "muon")}
    for kind, p in params.items():
        assert all(torch.isfinite(t).all() for t in p.values()), kind
        assert max_diff(p, init) > 1e-4, kind
    kinds = sorted(params)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            assert max_diff(params[a], params[b]) > 1e-5, (a, b)


def test_muon_takes_the_block_matrices_and_adamw_the_rest() -> None:
    model = w.tiny_model()
    hidden = muon_parameters(model)
    names = {n for n, p in model.named_parameters() if id(p) in hidden}
    assert names == {
        f"layers.{i}.{m}.weight"
        for i in range(2)
        for m in ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "mlp.w1", "mlp.w2", "mlp.w3")
    }
    optimizer = build_optimizer(model, w.optimizer_cfg("muon"), w.FP32)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    decay = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert all(p.ndim >= 2 for p in model.parameters() if id(p) in decay)


@pytest.mark.parametrize("kind", ["adamw", "muon"])
def test_decay_embeddings_false_leaves_the_embedding_tables_undecayed(kind) -> None:
    """optimizer.decay_embeddings: false (OLMo 2): the token table joins the norms and biases without decay;
    the other matrices keep theirs, and the default decays the table."""
    model = w.tiny_model()
    for decay_embeddings, table_decayed in ((True, True), (False, False)):
        cfg = w.optimizer_cfg(kind)
        cfg.decay_embeddings = decay_embeddings
        optimizer = build_optimizer(model, cfg, w.FP32)
        decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
        assert (id(model.tok_embeddings.weight) in decayed) == table_decayed
        assert id(model.layers[0].attention.wq.weight) in decayed
        assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_lion_runs_when_its_package_is_installed_else_refuses() -> None:
    model = w.tiny_model()
    try:
        import lion_pytorch  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="lion-pytorch"):
            build_optimizer(model, w.optimizer_cfg("lion"), w.FP32)
        return
    result = w.train(None, model, build_optimizer(model, w.optimizer_cfg("lion"), w.FP32), range(2))
    assert all(math.isfinite(loss) for loss in result["losses"])


def test_optimizer_states_follow_the_parameters_dtype() -> None:
    with pytest.raises(ValueError, match="optimizer_states bf16"):
        build_optimizer(
            w.tiny_model(), w.optimizer_cfg(), SimpleNamespace(**{**vars(w.FP32), "optimizer_states": "bf16"})
        )
    model = parallelize(w.tiny_model(), None, w.layout(), w.BF16_PURE)
    optimizer = build_optimizer(model, w.optimizer_cfg(), w.BF16_PURE)
    w.train(None, model, optimizer, range(1))
    states = [s["exp_avg"] for s in optimizer.state.values()]
    assert states and all(s.dtype == torch.bfloat16 for s in states)
    assert model.rope_cos.dtype == torch.float32  # only the parameters are cast


# ----------------------------------------------------------------------------------------- precision


@pytest.mark.parametrize("name", ["fsdp_bf16", "fsdp_bf16_pure", "ddp_bf16", "tp_bf16"])
def test_bf16_trains_close_to_fp32(runs, name) -> None:
    fp32, bf16 = runs["fsdp"], runs[name]
    assert bf16["losses"] == pytest.approx(fp32["losses"], abs=2e-3)
    assert max_diff(bf16["params"], fp32["params"]) > 1e-5  # bf16 did take effect
    dtype = torch.bfloat16 if name == "fsdp_bf16_pure" else torch.float32
    assert all(t.dtype == dtype for t in bf16["params"].values())


# ----------------------------------------------------------------------------------------- mesh


def test_one_process_has_no_mesh_and_refuses_what_is_not_enacted() -> None:
    assert build_mesh(w.layout()) is None
    assert data_parallel_rank_and_size(None) == (0, 1)
    with pytest.raises(ValueError, match="world size 1"):
        build_mesh(w.layout(cp=2))  # context parallelism is enacted; one process cannot hold 2 ranks
    with pytest.raises(ValueError, match="world size 1"):
        build_mesh(w.layout(pp=2))  # pipeline stages are built (runlib.model.pipeline); one process holds one
    with pytest.raises(ValueError, match="world size 1"):
        build_mesh(w.layout(dp_shard=2, sharding="fsdp"))
