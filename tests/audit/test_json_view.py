"""The JSON view's contract: typed views (runlib.audit.render.json_view) that cover every plan field, keys
pinned, serialized by one call."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import pytest

from runlib.audit.registry import Context, is_json_value
from runlib.audit.render import json_view
from runlib.graph.measured import audit_spec_file
from tests.conftest import ROOT

DEMO = ROOT / "specs" / "demo.yaml"

DERIVED_KEYS = [
    "params",
    "vocab_rows",
    "tokenizer_ids",
    "tokens_total",
    "steps_total",
    "flops",
    "gpu_hours",
    "device_hours_unit",
    "wall_days",
    "devices",
    "data_parallel",
    "accelerator",
    "schedule",
    "phases",
    "sources",
    "checkpoint",
    "references",
    "ladder_prediction",
]
PHASE_KEYS = [
    "name",
    "kind",
    "tokens",
    "nominal_tokens",
    "drift_tokens",
    "steps",
    "start_tokens",
    "end_tokens",
    "start_step",
    "end_step",
    "tokens_per_step",
    "segments",
    "seq_len",
    "rope_theta",
    "micro_batch",
    "grad_accum",
    "data_parallel",
    "nodes",
    "devices_per_node",
    "parallelism",
    "lr_start",
    "lr_end",
    "lr_scale",
    "mixture",
    "source_tokens",
    "flops",
    "flops_per_token",
    "hours",
    "memory_bytes_per_device",
    "memory_device_reported_bytes",
    "memory_breakdown_bytes",
    "memory_assumptions",
    "moe",
]
TOP_KEYS = [
    "schema_version",
    "runlib_version",
    "file",
    "name",
    "exit_code",
    "summary",
    "derived",
    "findings",
    "ignored",
]
FINDING_KEYS = ["code", "severity", "path", "line", "col", "message", "fix", "value"]


def test_every_plan_field_is_shown_or_left_out_with_a_reason() -> None:
    assert json_view.uncovered_plan_fields() == []


def test_a_new_plan_field_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass
    class Grown:
        total: int
        embedding: int
        non_embedding: int
        per_layer: int
        matmul: int
        shiny: float

    monkeypatch.setitem(json_view.VIEW_OF, Grown, json_view.ParamsView)
    assert json_view.uncovered_plan_fields() == [
        "Grown.matmul: not in ParamsView, SHOWN_AS or NOT_SHOWN",
        "Grown.shiny: not in ParamsView, SHOWN_AS or NOT_SHOWN",
    ]


def test_the_keys_are_the_views_fields_in_order() -> None:
    result = audit_spec_file(DEMO)
    d = json.loads(json_view.render(result))
    assert list(d) == TOP_KEYS == [f.name for f in fields(json_view.AuditView)]
    assert list(d["derived"]) == DERIVED_KEYS
    assert list(d["derived"]["phases"][0]) == PHASE_KEYS
    assert all(list(f) == FINDING_KEYS for f in d["findings"])
    assert list(d["derived"]["phases"][0]["memory_breakdown_bytes"]) == list(result.plan.phases[0].memory.as_dict())
    assert d == json_view.to_dict(result)
    plan_part = json_view.derived(result.plan)
    assert list(plan_part) == DERIVED_KEYS[:-1]
    assert plan_part == {k: v for k, v in d["derived"].items() if k != "ladder_prediction"}


def test_load_failure_has_the_same_keys() -> None:
    d = json.loads(json_view.render_load_failure("x.yaml", []))
    assert list(d) == TOP_KEYS and d["derived"] is None and d["exit_code"] == 2


def test_a_finding_value_must_be_json_data() -> None:
    result = audit_spec_file(DEMO)
    ctx = Context(result.spec, result.plan, None, code="TEST001")  # type: ignore[arg-type]
    assert ctx.finding("x", "m", "f", value={"a": [1, 2.5, None, "s", True]}).value == {"a": [1, 2.5, None, "s", True]}
    with pytest.raises(TypeError, match="TEST001"):
        ctx.finding("x", "m", "f", value={1: "int key"})
    with pytest.raises(TypeError):
        ctx.finding("x", "m", "f", value=object())
    assert is_json_value((1, "a")) and not is_json_value({"a": {1, 2}})


def test_a_ladder_prediction_of_other_keys_is_refused() -> None:
    from dataclasses import replace

    result = replace(audit_spec_file(DEMO), ladder_prediction={"loss": 1.0})
    with pytest.raises(KeyError):
        json_view.render(result)


def test_hours_are_named_in_the_device_they_count():
    from runlib.audit.render.json_view import device_hours_unit

    assert [device_hours_unit(a) for a in ("cpu", "h100-sxm", "tpu-v4", "my-npu")] == [
        "core-hours",
        "GPU-hours",
        "TPU chip-hours",
        "device-hours",
    ]
