"""transformers 4.x loads the export as the same model as 5.x and runlib do.

transformers 4.46.3 reads the classic config keys (`rope_theta`, `rope_scaling`, `torch_dtype`) and never
`rope_parameters`, so an export with the RoPE base only there ran at base 10000 in 4.x. Here 4.46.3 is
really loaded: pip installs it (with the tokenizers and huggingface-hub it needs; nothing else) once into a
cache folder, ~/.cache/runlib-test, and tests/export/hf_reader.py runs in a subprocess with that folder
first on sys.path, over the venv's torch, numpy and safetensors. It loads each export, computes logits on
300 tokens (positions past 128, where a wrong base shows most) and reports how it read config.json; the
same reader under the venv's transformers 5.x must read it alike. Without a package index (and no cached
install) the tests skip and say why; RUNLIB_TEST_REQUIRE_TRANSFORMERS4=1 makes that a failure.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from runlib.spec.models import ModelSpec
from tests.export import hf_reader
from tests.export.tiny_export import (
    MOE_NEEDS_TRANSFORMERS_5,
    MOE_SHAPES,
    NEEDS_TRANSFORMERS_5,
    SHAPES,
    VOCAB_ROWS,
    export,
    sharpen,
)

PINS = ("transformers==4.46.3", "tokenizers==0.20.3", "huggingface-hub==0.26.5")
READER = Path(hf_reader.__file__)
POSITIONS = 300  # tokens per row: past 128, where a wrong RoPE base moved logits by up to 1.06
LONG_THETA = 2_000_000.0  # a long-context phase's own base (the model's is 500000)
EXPORTS = {
    name: ({**fields, "seq_len": 320}, None) for name, fields in SHAPES.items() if name not in NEEDS_TRANSFORMERS_5
}
EXPORTS["llama-phase-theta"] = ({**SHAPES["llama-tied-gqa"], "seq_len": 320}, LONG_THETA)
# Mixtral, OLMoE and Qwen2-MoE, one tensor per expert as 4.x reads them (runlib.export.hf_moe)
EXPORTS |= {
    name: ({**fields, "seq_len": 320}, None)
    for name, fields in MOE_SHAPES.items()
    if name not in MOE_NEEDS_TRANSFORMERS_5
}
DONE = "runlib-installed.txt"


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "runlib-test"


def unavailable(reason: str):
    if os.environ.get("RUNLIB_TEST_REQUIRE_TRANSFORMERS4") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def transformers4() -> Path:
    """A folder holding transformers 4.46.3 and the versions of tokenizers and huggingface-hub it needs
    (its other requirements, numpy, safetensors, regex, requests, ..., are the venv's). Installed once."""
    target = cache_root() / f"{'-'.join(p.replace('==', '-') for p in PINS)}-{sys.implementation.cache_tag}"
    if (target / DONE).is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)  # an incomplete folder (no DONE): not ours to trust
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    command += ["--only-binary=:all:", "--no-compile", "--target", str(tmp), *PINS]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        unavailable(f"`pip install {' '.join(PINS)}` took over 600 s; the transformers 4.x load is not checked")
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        unavailable(f"`pip install {' '.join(PINS)}` failed (no package index?): {tail}")
    (tmp / DONE).write_text("\n".join(PINS) + "\n")
    try:
        os.replace(tmp, target)
    except OSError:  # another pytest process installed it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: (runlib's logits, export folder)} and the tokens they were computed on."""
    root = tmp_path_factory.mktemp("exports")
    tokens = torch.randint(0, VOCAB_ROWS, (2, POSITIONS), generator=torch.Generator().manual_seed(3))
    out = {}
    for name, (fields, theta) in EXPORTS.items():
        model, folder = export(root / name, fields, theta, perturb=sharpen if "moe" in fields else None)
        with torch.no_grad():
            out[name] = (model(tokens), folder)
    return out, tokens


@pytest.fixture(scope="module")
def transformers4_run(transformers4, exported, tmp_path_factory):
    """hf_reader.py under transformers 4.46.3: (its report, its logits by export name)."""
    ours, tokens = exported
    job_dir = tmp_path_factory.mktemp("transformers4")
    save_file({"tokens": tokens.contiguous()}, str(job_dir / "tokens.safetensors"))
    job = {
        "tokens": str(job_dir / "tokens.safetensors"),
        "exports": {name: str(folder) for name, (_, folder) in ours.items()},
        "logits": str(job_dir / "logits.safetensors"),
    }
    (job_dir / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(transformers4), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(READER), str(job_dir / "job.json")], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), load_file(job["logits"])


def test_the_subprocess_ran_transformers_4(transformers4, transformers4_run):
    report, _ = transformers4_run
    assert report["version"] == "4.46.3"
    assert Path(report["file"]).resolve().is_relative_to(transformers4.resolve())


@pytest.mark.parametrize("name", EXPORTS)
def test_transformers_4_logits_equal_runlib(exported, transformers4_run, name):
    ours = exported[0][name][0]
    theirs = transformers4_run[1][name]
    assert theirs.shape == ours.shape
    diff = (ours - theirs).abs()
    worst, worst_past_128 = diff.max().item(), diff[:, 128:].max().item()
    assert worst < 1e-5, f"max |logit difference| {worst:.3g}, past position 128 {worst_past_128:.3g}"


@pytest.mark.parametrize("name", EXPORTS)
def test_transformers_4_reads_the_config_as_5_does(exported, transformers4_run, name):
    """Every key both versions read (the RoPE base and type, head_dim, biases, tying, norm epsilon, dtype,
    special token ids, ...) and the tokenizer come out the same; the RoPE base is the phase's."""
    folder = exported[0][name][1]
    reading_5 = {**hf_reader.reading(hf_reader.load(folder)), "tokenizer": hf_reader.tokenizer_reading(folder)}
    reading_4 = transformers4_run[0]["exports"][name]
    assert json.loads(json.dumps(reading_5)) == reading_4
    fields, theta = EXPORTS[name]
    if reading_4["rope"] is not None:
        rope = {key: reading_4["rope"][key] for key in ("rope_type", "rope_theta")}
        assert rope == {"rope_type": "default", "rope_theta": theta or ModelSpec(**fields).rope_theta}
        if "partial_rotary_factor" in reading_4["rope"]:
            assert reading_4["rope"]["partial_rotary_factor"] == ModelSpec(**fields).rope_fraction
