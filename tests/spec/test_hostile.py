"""Hostile specs: each is refused with a `file:line:col: SPEC00x` error naming the
problem, never a hang, a traceback or a pass.

The set is runlib.bench.hostile_specs.HOSTILE (the bench prints their timings for the note). Each
load runs under a hang guard (SIGALRM, far above the milliseconds a load takes: a guard, not a timing
assertion). A memory bomb (the billion laughs) is loaded only in a subprocess whose address space is
capped, so that without the limits the test fails with a MemoryError instead of exhausting the machine.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runlib.audit import audit
from runlib.audit.cases import case_data
from runlib.bench.hostile_specs import HOSTILE, Hostile, write_case
from runlib.errors import SpecError
from runlib.spec import load_spec, load_spec_text, validate_data
from runlib.spec.schema_export import schema_json
from tests.conftest import ROOT
from tests.helpers import hang_guard
from tests.limits import HANG_GUARD_S

CLI_CASES = ("billion_laughs_9_levels", "flow_nesting_10k", "micro_batch_2_40", "lr_nan", "tokens_quoted_1e100000000")
# SpikeSpec's fields belong to the issue-8 shared commit (runlib/spec/models.py SpikeSpec); zscore is
# finite (allow_inf_nan=False on every model) but window, zscore and max_retries have no maximum yet
NOT_YET_BOUNDED: set[str] = set()


def _refusal(case: Hostile, path: Path) -> list:
    with hang_guard(), pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value.diagnostics


@pytest.mark.parametrize("case", [c for c in HOSTILE if not c.memory_bomb], ids=lambda c: c.name)
def test_hostile_spec_is_refused_with_its_code_and_position(case, tmp_path):
    path = write_case(case, tmp_path)
    diags = _refusal(case, path)
    named = [d for d in diags if d.path == case.path] if case.path else diags[:1]
    assert named, f"no diagnostic names {case.path}: {[str(d) for d in diags]}"
    d = named[0]
    assert d.code == case.code, str(d)
    assert d.line is not None and d.col is not None, str(d)
    assert str(d).startswith(f"{path}:{d.line}:{d.col}: {case.code}"), str(d)
    # the message after the file's path (whose length is the machine's): a hostile value is never quoted whole
    assert len(str(d)) - len(str(path)) < 400, "a message quotes a hostile value whole"


def _capped_address_space() -> None:
    cap = 4 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_hostile_specs_cli_exit_2_without_traceback(tmp_path):
    cases = [c for c in HOSTILE if c.name in CLI_CASES]
    assert len(cases) == len(CLI_CASES)
    procs = []
    for case in cases:  # concurrently: each is an interpreter start and the audit's imports
        path = write_case(case, tmp_path)
        cmd = [sys.executable, "-m", "runlib", "audit", str(path)]
        popen = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_capped_address_space
        )
        procs.append((case, path, popen))
    try:
        for case, path, popen in procs:
            try:
                _, stderr = popen.communicate(timeout=HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{case.name}: runlib audit still running after {HANG_GUARD_S:.0f} s")
            assert popen.returncode == 2, (case.name, stderr[-2000:])
            assert "Traceback" not in stderr, (case.name, stderr[-2000:])
            assert f"{path}:" in stderr and f": {case.code}" in stderr, (case.name, stderr)
    finally:
        for _, _, popen in procs:
            if popen.poll() is None:
                popen.kill()
                popen.communicate()


def test_aliases_within_the_limits_still_load(base_text):
    text = base_text.replace("mixture: {web: 0.8, code: 0.2}}", "mixture: &main {web: 0.8, code: 0.2}}", 1)
    text = text.replace("mixture: {web: 0.8, code: 0.2}}", "mixture: *main}")
    spec = load_spec_text(text, "aliases.yaml").spec
    assert spec.phases[2].mixture == {"web": 0.8, "code": 0.2}


def _unbounded_numbers(schema: dict, where: str) -> Iterator[str]:
    if schema.get("type") in ("integer", "number") and not {"maximum", "exclusiveMaximum"} & set(schema):
        yield where
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in schema.get(key, []):
            yield from _unbounded_numbers(sub, where)
    for key in ("additionalProperties", "items"):
        if isinstance(schema.get(key), dict):
            yield from _unbounded_numbers(schema[key], f"{where}.{key}")


def test_every_numeric_field_has_a_maximum():
    schema = json.loads(schema_json())
    models = [*schema["$defs"].items(), ("RunSpec", schema)]
    found = {
        w
        for name, m in models
        for f, s in m.get("properties", {}).items()
        for w in _unbounded_numbers(s, f"{name}.{f}")
    }
    assert found == NOT_YET_BOUNDED, "give these fields a maximum (Field(le=...)): " + ", ".join(sorted(found))


AT_THE_BOUNDS = {
    # mfu x peak_tflops at their floors once underflowed to 0 and divided (ZeroDivisionError)
    "floors": {"hardware.mfu": 0.001, "hardware.peak_tflops": {"bf16": 0.001}, "hardware.memory_gib": 0.001},
    # the tensor-degree suggestion once tried every t up to min(heads, kv_heads): a million per phase and check
    "heads": {"model.heads": 2**20, "model.kv_heads": 2**20, "parallelism.tensor": 65536},
    # MEM001's smaller micro_batch once tried every d below micro_batch
    "micro_batch": {"batch.micro_batch": 2**20, "batch.grad_accum": 2**20, "phases[2].batch": {"micro_batch": 720720}},
    "counts": {"tokens": 10**18, "budget.gpu_hours": 10**18, "phases[0].tokens": f"{10**18} steps", "seed": 2**63 - 1},
    "widths": {"model.layers": 100_000, "model.d_model": 2**20, "model.d_ff": 2**24, "model.seq_len": 2**24},
}


@pytest.mark.parametrize("name", AT_THE_BOUNDS)
def test_values_at_the_bounds_audit_without_exceptions(name):
    spec = validate_data(case_data(AT_THE_BOUNDS[name])).spec
    with hang_guard():
        result = audit(spec)
    assert result.plan is not None


def test_divisor_enumerations_match_trial_division():
    from runlib.audit.checks.mem001_out_of_device_memory import smaller_divisors
    from runlib.plan.enact import _divisors_above_one

    for n in range(1, 1000):
        assert smaller_divisors(n) == [d for d in range(n - 1, 0, -1) if n % d == 0]
        assert _divisors_above_one(n) == [d for d in range(2, n + 1) if n % d == 0]
    assert len(smaller_divisors(2**40)) == 40  # 2^39 ... 1, by sqrt(n) trials
