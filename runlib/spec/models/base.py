"""What every spec section shares: the base model, the bounds of the spec's numbers, the field markers,
the phase overrides derived from the run-level sections, and the field docstrings the schema shows.

Every number is finite (no NaN or infinity anywhere: SpecModel's allow_inf_nan=False) and bounded on
both sides (ge/le on every numeric field, MAX_COUNT for counts), far outside any real run but small
enough that no arithmetic of the plan or the audit overflows, loops long or builds huge integers;
tests/spec/test_hostile.py checks that every numeric field of the schema has a maximum.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, create_model, model_serializer
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaMode

from runlib.util.keyed import omit_new_fields_at_default

# pydantic looks up its plugins (the entry points of every installed distribution: ~60 ms of the cold
# start in a venv of ~350 packages) when it builds the first validator. The spec models use none, so
# the lookup is switched off (pydantic's documented PYDANTIC_DISABLE_PLUGINS) while runlib.spec.models
# builds them; its __init__ restores the variable (restore_plugins_env) once every section is built.
_PLUGINS_ENV = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"


def restore_plugins_env() -> None:
    """Put PYDANTIC_DISABLE_PLUGINS back as it was before runlib.spec.models was imported."""
    if _PLUGINS_ENV is None:
        os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)
    else:
        os.environ["PYDANTIC_DISABLE_PLUGINS"] = _PLUGINS_ENV


NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# names become folder, file and MLflow run names (reports/<name>/run/..., a Snakemake log path with the
# name inside another name): 100 characters keep the longest derived file name well under the 255
# bytes of a file name (NAME_MAX, Linux limits.h)
MAX_NAME_CHARS = 100
ONE_LINE_PATTERN = r"^[^\x00-\x1f\x7f]+$"  # printable text on one line: no control characters (NUL, newline, tab)
# on the Field of a spec field that no stage reads (the audit and the plan do): the schema carries it
# as "planning_only": true, the README lists these fields, and tests/spec/test_fields_enacted.py
# checks that every other field reaches a stage key
PLANNING_ONLY: JsonDict = {"planning_only": True}
# on the Field of a spec field that names a file or a folder: the schema carries it as "names_file": true,
# and tests/audit/test_gate_fields.py checks that each is checked at the workflow gate, at its line
# (runlib.audit.named_files.FILE_FIELDS)
NAMES_FILE: JsonDict = {"names_file": True}

# bounds of the spec's numbers: far beyond any real run, finite so that no arithmetic blows up
MAX_NODES = 100_000
MAX_DEVICES_PER_NODE = 1_024
MAX_WIDTH = 2**20  # d_model, heads, head_dim
MAX_SEQ_LEN = 2**24
MAX_VOCAB = 2**31  # token ids fit int32 (and uint32 on disk)
MAX_PARALLEL = 65_536  # tensor, pipeline, context degree
MAX_MICRO = 2**20  # micro_batch, grad_accum
MAX_ROPE_THETA = 1e12
MAX_WEIGHT = 1e6  # a mixture weight (the audit checks signs and sums: MIX001)
MAX_PHASES = 32  # a run has a few; the workflow graph grows with the square of their number
SEED_LIMIT = 2**63  # torch.manual_seed takes [-2^63, 2^64); numpy's SeedSequence needs >= 0

Weight = Annotated[float, Field(ge=-MAX_WEIGHT, le=MAX_WEIGHT)]
"""A sampling weight: finite; the audit reports negative weights and sums other than 1."""

_MODELS: list[type[SpecModel]] = []  # every spec model in the order it was built: a model after the ones it holds


class SpecModel(BaseModel):
    """Base of every spec section: unknown keys are errors, values are immutable.

    Field docstrings become the schema's descriptions, attached when a JSON schema is asked for
    (`_attach_field_docstrings`), not at import: pydantic's use_attribute_docstrings re-reads and
    re-parses each module's source once per class (inspect.getsource), about a third of the cold start
    of `runlib audit`, for text only the schema shows.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.__module__.startswith(__package__ or __name__):  # the spec's sections, not a test's models
            _MODELS.append(cls)

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = None,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = GenerateJsonSchema,
        mode: JsonSchemaMode = "validation",
        *,
        union_format: Literal["any_of", "primitive_type_array"] = "any_of",
    ) -> dict[str, Any]:
        _attach_field_docstrings()
        return super().model_json_schema(by_alias, ref_template, schema_generator, mode, union_format=union_format)


class KeyedWhenSet(SpecModel):
    """A section with fields added after stage keys existed: each field named in KEYED_WHEN_SET is left
    out of the section's serialized form (model_dump, and so every stage config and key that holds the
    section) while it has its default, so adding the field changed no existing key; a value other than
    the default is serialized, and so reruns what reads it."""

    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_new_fields_at_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)  # a model serializes to a mapping of its fields
        return omit_new_fields_at_default(self, self.KEYED_WHEN_SET, data)


class PhaseOverride(SpecModel):
    """What one phase changes in a run-level section (`phases[].parallelism`, `.batch`, `.optimizer`):
    the section's fields, each optional with no default (omitted or null: the run's value), built by
    `override_of` from the section's own fields, so a field added to the section is a phase override
    too unless it is excluded with a reason. runlib.plan.effective merges every override onto its
    section (the phase's effective settings)."""

    OVERRIDES: ClassVar[type[SpecModel]]
    """The run-level section whose fields this override repeats."""
    EXCLUDED: ClassVar[Mapping[str, str]] = {}
    """Fields of OVERRIDES a phase cannot override -> why."""
    NOTES: ClassVar[Mapping[str, str]] = {}
    """Fields whose description in the override is not the section's -> that description."""

    if TYPE_CHECKING:
        # the derived fields are built at import (pydantic.create_model), so no static type exists for them
        def __getattr__(self, name: str) -> Any: ...

    def overrides(self) -> dict[str, object]:
        """The fields of OVERRIDES this phase sets (not None) -> their values, as validated."""
        return {
            n: v
            for n in type(self).model_fields
            if n in self.OVERRIDES.model_fields and (v := getattr(self, n)) is not None
        }


_O = TypeVar("_O", bound=PhaseOverride)


def _optional(info: FieldInfo) -> Any:
    """The annotation of `info`'s field with None allowed: its bounds (annotated_types) stay on the field,
    where runlib.spec.loader reads them for its messages; its validators wrap the non-None value only."""
    inner = [m for m in info.metadata if not isinstance(m, annotated_types.BaseMetadata)]
    bounds = [m for m in info.metadata if isinstance(m, annotated_types.BaseMetadata)]
    value: Any = Annotated[(info.annotation, *inner)] if inner else info.annotation
    optional = value | None
    return Annotated[(optional, *bounds)] if bounds else optional


def override_of(
    section: type[SpecModel], *, exclude: Mapping[str, str], notes: Mapping[str, str] | None = None
) -> Callable[[type[_O]], type[_O]]:
    """A class decorator: the PhaseOverride it decorates gets every field of `section` but those in
    `exclude` (field -> why a phase cannot set it), each with the section's type, bounds and markers
    (PLANNING_ONLY, NAMES_FILE), None allowed and the default; its description is the section's, or
    notes[field]. Fields the class declares itself come first, as in the schema and model_dump."""

    def derive(declared: type[_O]) -> type[_O]:
        unknown = sorted((set(exclude) | set(notes or {})) - set(section.model_fields))
        if unknown:
            raise TypeError(f"{declared.__name__}: {', '.join(unknown)} not fields of {section.__name__}")
        fields: dict[str, Any] = {
            name: (_optional(info), Field(None, json_schema_extra=info.json_schema_extra))
            for name, info in section.model_fields.items()
            if name not in exclude and name not in declared.model_fields
        }
        derived = create_model(
            declared.__name__,
            __base__=declared,
            __module__=declared.__module__,
            __qualname__=declared.__qualname__,
            __doc__=declared.__doc__,
            **fields,
        )
        derived.OVERRIDES = section
        derived.EXCLUDED = dict(exclude)
        derived.NOTES = dict(notes or {})
        return derived

    return derive


@cache
def _module_docstrings(module: str) -> dict[str, dict[str, str]]:
    """Class name -> field name -> the string literal under the field's annotated assignment, inspect.cleandoc'd
    (what pydantic's use_attribute_docstrings reads), for each top-level class of `module`."""
    source = getattr(sys.modules.get(module), "__file__", None)
    if source is None:
        return {}
    docs: dict[str, dict[str, str]] = {}
    for node in ast.parse(Path(source).read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = docs.setdefault(node.name, {})
        for stmt, after in zip(node.body, node.body[1:], strict=False):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                fields[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


@cache
def _attach_field_docstrings() -> None:
    """Set each spec field's description from the string literal under it (as pydantic's
    use_attribute_docstrings does), a derived override field's from its section's field (or the
    override's NOTES), then rebuild the models' schemas in the order they were built, leaves first."""
    for model in _MODELS:
        docs = _module_docstrings(model.__module__).get(model.__name__, {})
        section = model.OVERRIDES if issubclass(model, PhaseOverride) and "OVERRIDES" in vars(model) else None
        for name, info in model.model_fields.items():
            if info.description is not None:
                continue
            if name in docs:
                info.description = docs[name]
            elif section is not None and issubclass(model, PhaseOverride):
                info.description = model.NOTES.get(name) or section.model_fields[name].description
    for model in _MODELS:
        model.model_rebuild(force=True)
