"""The run spec: models, value types and the loader."""

from runlib.spec.loader import LoadedSpec, SourceMap, load_spec, load_spec_text, validate_data
from runlib.spec.models import RunSpec

__all__ = ["LoadedSpec", "RunSpec", "SourceMap", "load_spec", "load_spec_text", "validate_data"]
