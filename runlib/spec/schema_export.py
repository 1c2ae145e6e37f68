"""The JSON schema of the run spec, generated from the pydantic models (field docstrings become
descriptions). A committed copy lives at specs/runspec.schema.json; a test keeps it in sync."""

from __future__ import annotations

import json

from runlib.spec.models import RunSpec


def schema_json() -> str:
    schema = RunSpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "runlib run spec"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
