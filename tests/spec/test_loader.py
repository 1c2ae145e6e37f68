"""Spec loading: the reference spec as written, and every kind of bad input reported at once with line:col."""

import hashlib
import json
import subprocess
import sys

import pytest

from runlib.errors import SpecError
from runlib.spec import load_spec, load_spec_text
from runlib.spec.schema_export import schema_json
from tests.conftest import REFERENCE_SPEC, ROOT


def test_reference_spec_loads_exactly_as_written():
    spec = load_spec(REFERENCE_SPEC).spec
    assert spec.name == "acme-7b-v1"
    assert spec.optimizer.eps == 1e-8 and isinstance(spec.optimizer.eps, float)  # YAML 1.2 float
    assert spec.optimizer.z_loss == 1e-4
    assert spec.tokens == 4 * 10**12
    assert spec.tokenizer.train_bytes == 10 * 10**9
    assert spec.batch.global_batch.tokens(4096) == 4 * 2**20
    assert spec.batch.ramp[1].after.amount == 100e9
    assert spec.schedule.warmup.unit == "tokens" and spec.schedule.decay.unit == "percent"
    assert spec.phases[2].seq_len == 32768 and spec.phases[2].parallelism.context == 4
    assert spec.budget.gpu_hours == 200_000


# sha256 of tests/fixtures/spec-reference.yaml as committed: the contract, so never edited in passing
REFERENCE_SPEC_SHA256 = "c196f23640418d9ceb7e16bb0811f7f4e390ed4fb51c4dd4c94e26cb8382db04"


def test_reference_spec_is_kept_verbatim():
    """The reference spec is the format contract (its header: no field shown may be renamed), so an edit
    made to get a test through, or by a formatter, fails here; a deliberate change of the contract pins
    the new digest."""
    digest = hashlib.sha256(REFERENCE_SPEC.read_bytes()).hexdigest()
    assert digest == REFERENCE_SPEC_SHA256, f"{REFERENCE_SPEC} changed: a change of the spec format contract?"


def errors_of(text: str) -> list:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "spec.yaml")
    return info.value.diagnostics


def test_unknown_key_did_you_mean(base_text):
    """A typo'd required key is one mistake: one diagnostic (not also "d_ff is missing"), at the typo."""
    (d,) = errors_of(base_text.replace("  d_ff: 2048", "  d_fff: 2048"))
    assert d.code == "SPEC002" and d.path == "model.d_fff"
    assert "did you mean 'd_ff'" in d.message and "d_ff is required and missing" in d.message
    assert d.fix == "rename d_fff to d_ff"
    assert d.line == base_text.splitlines().index("  d_ff: 2048") + 1 and d.col == 3


# (old text, new text, path, in the message, in the fix): one mistake of each error type the schema raises
MISTAKES = [
    ("layers: 12", "layers: abc", "model.layers", "expected a whole number, got the text 'abc'", "`layers: 12`"),
    ("heads: 12", "heads: 4.5", "model.heads", "got the number 4.5", "whole number from 1 to 1,048,576"),
    ("seq_len: 2048", "seq_len: [2048]", "model.seq_len", "got a list of 1 item", "`seq_len: 2048`"),
    ("mfu: 0.4", "mfu: 1.5", "hardware.mfu", "1.5 is too large", "from 0.001 to 1, e.g. `mfu: 0.4`"),
    ("micro_batch: 8", "micro_batch: 0", "batch.micro_batch", "0 is too small", "e.g. `micro_batch: 8`"),
    ("norm: rmsnorm", "norm: rmsnrm", "model.norm", "did you mean 'rmsnorm'", "`norm: rmsnorm`"),
    ("{name: foundation,", "{name: Foundation,", "phases[0].name", "not a valid name", "`name: foundation`"),
    ("mixture: {web: 0.8,", "mixture: {web: 80%,", "phases[0].mixture.web", "80% is 0.8", "`web: 0.8`"),
    ("qk_norm: false", "qk_norm: maybe", "model.qk_norm", "expected true, false or per_head", "`qk_norm: false`"),
    ("name: case-base", "name: 12", "name", "expected text, got the number 12", "quote it"),
    ("mfu: 0.4", "mfu: .nan", "hardware.mfu", "expected a finite number", "`mfu: 0.4`"),
    (
        "parallelism: {tensor: 1, pipeline: 1, context: 1, sharding: none, activation_checkpointing: none}",
        "parallelism: 1",
        "parallelism",
        "expected a mapping of keys (tensor, pipeline,",
        "under parallelism:",
    ),
    (
        "state: [model, optimizer, scheduler, rng, data]",
        "state: model",
        "checkpoint.state",
        "expected a list",
        "`state: [model, optimizer, scheduler, rng, data]`",
    ),
    ("betas: [0.9, 0.95]", "betas: [0.9]", "optimizer.betas[1]", "item 1 is missing", "`betas: [0.9, 0.95]`"),
    ("warmup: 1%", "warmup: 1 days", "schedule.warmup", "is not a duration", "`warmup: 1%`"),
    ("  d_ff: 2048\n", "", "model.d_ff", "required key 'd_ff' is missing", "add it under model, e.g. `d_ff: 2048`"),
    ("seed: 0", "seed: 0\nbogus: 1", "bogus", "unknown key 'bogus'", "remove it; the keys of a run spec are"),
]


@pytest.mark.parametrize(("old", "new", "path", "message", "fix"), MISTAKES, ids=[m[2] for m in MISTAKES])
def test_one_clear_error_with_a_fix_per_mistake(base_text, old, new, path, message, fix):
    assert old in base_text
    diags = errors_of(base_text.replace(old, new, 1))
    (d,) = [x for x in diags if x.path == path]
    assert len(diags) == 1, [str(x) for x in diags]
    assert message in d.message, d.message
    assert fix in d.fix, d.fix
    assert "Input should" not in d.message  # pydantic's own wording never reaches the user
    assert d.line is not None


def test_all_problems_at_once(base_text):
    text = base_text.replace("layers: 12", "layers: twelve").replace("activation: swiglu", "activation: swigl")
    text = text.replace("seed: 0", "seed: 0\nbogus: 1")
    diags = errors_of(text)
    paths = {d.path for d in diags}
    assert {"model.layers", "model.activation", "bogus"} <= paths
    activation = next(d for d in diags if d.path == "model.activation")
    assert "did you mean 'swiglu'" in activation.message
    assert all(d.line for d in diags)
    assert [d.line for d in diags] == sorted(d.line for d in diags)


def test_duplicate_keys_anywhere(base_text):
    text = base_text.replace("  d_ff: 2048\n", "  d_ff: 2048\n  d_ff: 4096\n")
    (d,) = errors_of(text)
    assert d.code == "SPEC001" and "duplicate key 'd_ff'" in d.message
    assert d.line == base_text.splitlines().index("  d_ff: 2048") + 2


def test_duplicate_keys_in_flow_mapping():
    diags = errors_of("a: {x: 1, x: 2}\n")
    assert diags[0].code == "SPEC001" and diags[0].line == 1


def test_syntax_error_has_position():
    (d,) = errors_of("name: x\nmodel: [1, 2\n")
    assert d.code == "SPEC001" and d.line is not None and "syntax" in d.message


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("tokens: 2411724800", "tokens: 2.4X", "tokens"),
        ("warmup: 1%", "warmup: 1 days", "schedule.warmup"),
        ("micro_batch: 8", "micro_batch: 0", "batch.micro_batch"),
        ("accelerator: a100-80gb", "accelerator: a100", "hardware.accelerator"),
        ("name: case-base", "name: Case Base", "name"),
    ],
)
def test_bad_values(base_text, old, new, path):
    assert old in base_text
    diags = errors_of(base_text.replace(old, new, 1))
    assert path in {d.path for d in diags}, diags


def test_unknown_accelerator_suggests(base_text):
    (d,) = errors_of(base_text.replace("accelerator: a100-80gb", "accelerator: h100"))
    assert "did you mean 'h100" in d.message


def test_not_a_mapping():
    (d,) = errors_of("- 1\n- 2\n")
    assert d.code == "SPEC002"


def test_missing_required_key(base_text):
    diags = errors_of(base_text.replace("  seq_len: 2048\n", "", 1))
    assert any(d.path == "model.seq_len" and "missing" in d.message for d in diags)


def test_missing_file():
    with pytest.raises(SpecError) as info:
        load_spec("does/not/exist.yaml")
    assert "not found" in str(info.value)


def test_cli_invalid_spec_exit_2_no_traceback(tmp_path, base_text):
    bad = tmp_path / "bad.yaml"
    bad.write_text(base_text.replace("  d_ff: 2048", "  d_fff: 2048"))
    proc = subprocess.run([sys.executable, "-m", "runlib", "audit", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{bad}:" in proc.stderr and "SPEC002" in proc.stderr and "Traceback" not in proc.stderr


def test_schema_in_sync_with_committed_copy():
    committed = (ROOT / "specs" / "runspec.schema.json").read_text()
    assert committed == schema_json(), "run `runlib schema --out specs/runspec.schema.json`"


def test_schema_has_field_descriptions():
    schema = json.loads(schema_json())
    model = schema["$defs"]["ModelSpec"]["properties"]
    assert "MLP" in model["d_ff"]["description"]
    assert schema["additionalProperties"] is False
