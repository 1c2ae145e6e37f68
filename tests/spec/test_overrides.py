"""A phase's overrides (phases[].parallelism, .batch, .optimizer) are derived from the run-level sections
(runlib.spec.models.base.override_of): every field of the section but the excluded ones, with the section's
type, bounds and markers, optional; a mistake in one is reported at its path with a fix."""

import typing

import pytest
from pydantic import Field

from runlib.errors import SpecError
from runlib.spec import load_spec_text
from runlib.spec.models import (
    BatchOverride,
    BatchSpec,
    OptimizerSpec,
    ParallelismOverride,
    ParallelismSpec,
    PhaseOptimizer,
    PhaseOverride,
    SpecModel,
    override_of,
)
from runlib.spec.schema_export import schema_json
from runlib.spec.units import Count, DurationField

OVERRIDES = [(ParallelismOverride, ParallelismSpec), (BatchOverride, BatchSpec), (PhaseOptimizer, OptimizerSpec)]


@pytest.mark.parametrize(("override", "section"), OVERRIDES, ids=[o.__name__ for o, _ in OVERRIDES])
def test_override_has_every_field_of_its_section_but_the_excluded(override, section):
    assert override.OVERRIDES is section
    own = {"lr_scale", "lr_decay_to", "lr_decay_shape", "lr_rewarm"} if override is PhaseOptimizer else set()
    assert set(override.model_fields) == (set(section.model_fields) - set(override.EXCLUDED)) | own
    assert all(reason for reason in override.EXCLUDED.values())
    for name in set(override.model_fields) - own:
        mine, theirs = override.model_fields[name], section.model_fields[name]
        assert mine.default is None and not mine.is_required()
        assert mine.metadata == theirs.metadata, name  # the bounds, where the loader reads them for its messages
        assert mine.json_schema_extra == theirs.json_schema_extra, name  # PLANNING_ONLY, NAMES_FILE
        assert type(None) in typing.get_args(mine.annotation), name


def test_a_field_added_to_a_section_is_an_override_too():
    class Section(SpecModel):
        a: int = Field(1, ge=1, le=8)
        b: str = "x"
        c: bool = False

    @override_of(Section, exclude={"c": "run-wide"})
    class Override(PhaseOverride):
        """Test override."""

    assert list(Override.model_fields) == ["a", "b"]
    assert Override().overrides() == {} and Override(a=2).overrides() == {"a": 2}
    with pytest.raises(ValueError):
        Override(a=9)
    with pytest.raises(ValueError):
        Override(c=True)
    with pytest.raises(TypeError, match="not fields of Section"):
        override_of(Section, exclude={"gone": "renamed"})(type("Stale", (PhaseOverride,), {"__doc__": "x"}))


def test_a_required_field_with_validators_is_optional_in_the_override():
    class Section(SpecModel):
        after: DurationField
        count: Count = Field(5, ge=1)

    @override_of(Section, exclude={})
    class Override(PhaseOverride):
        """Test override."""

    assert Override().overrides() == {}
    given = Override(after="10%", count="1M")
    assert given.after.unit == "percent" and given.count == 1_000_000
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Override(count=0)


def test_override_descriptions_come_from_the_section():
    schema_json()  # attaches the field docstrings
    assert ParallelismOverride.model_fields["tensor"].description == ParallelismSpec.model_fields["tensor"].description
    assert "OPT: 1.0 lowered to 0.3" in PhaseOptimizer.model_fields["grad_clip"].description
    assert "planning only" in ParallelismOverride.model_fields["attention_kernel"].description


BAD_OVERRIDES = [
    ("batch: {micro_batch: 0}", "phases[2].batch.micro_batch", "0 is too small", "from 1 to 1,048,576"),
    ("batch: {micro_batch: 4, ramp: []}", "phases[2].batch.ramp", "unknown key 'ramp'", "global_batch, grad_accum"),
    ("parallelism: {tensor: 0}", "phases[2].parallelism.tensor", "0 is too small", "from 1 to 65,536"),
    ("parallelism: {sharding: fsd}", "phases[2].parallelism.sharding", "did you mean 'fsdp'", "`sharding: fsdp`"),
    ("parallelism: {tensr: 2}", "phases[2].parallelism.tensr", "did you mean 'tensor'", "rename tensr to tensor"),
    ("parallelism: {grad_accumulation: in_place}", "phases[2].parallelism.grad_accumulation", "unknown key", "remove"),
    ("optimizer: {lr_scale: 0}", "phases[2].optimizer.lr_scale", "0 is too small", "above 0 and at most 1,000"),
    ("optimizer: {grad_clip: -1}", "phases[2].optimizer.grad_clip", "-1 is too small", "from 0 to 1,000,000"),
    ("optimizer: {lr: 0.1}", "phases[2].optimizer.lr", "unknown key 'lr'", "lr_rewarm, lr_scale"),
]


@pytest.mark.parametrize(("new", "path", "message", "fix"), BAD_OVERRIDES, ids=[b[1] for b in BAD_OVERRIDES])
def test_a_bad_override_names_the_field_and_the_fix(base_text, new, path, message, fix):
    old = "batch: {micro_batch: 4}"
    assert old in base_text
    with pytest.raises(SpecError) as info:
        load_spec_text(base_text.replace(old, new, 1), "spec.yaml")
    (d,) = info.value.diagnostics
    assert d.path == path and message in d.message and fix in d.fix, (d.path, d.message, d.fix)
    assert d.line is not None
