"""Load a run spec from YAML: YAML 1.2 scalars, line:col for every value, every problem at once.

The YAML is composed into a node tree (ruamel.yaml) and turned into plain data here, so that
duplicate keys anywhere are found and reported (PyYAML and most loaders silently keep the last one),
`1e-4` is a float (YAML 1.2), and each value keeps its position for diagnostics and findings.

Codes: SPEC001 the file cannot be read or is not YAML (syntax, duplicate keys, an explicit tag such as
`!!str` or `!!python/object/apply`: a spec holds plain values only); SPEC002 a value the
schema refuses (unknown key, wrong type, out of range, not finite); SPEC003 a document over a limit
of the loader (runlib.spec.bounded_yaml: size, nesting depth, values, aliases, digits of a number),
checked as the document is read so that a hostile file is refused in milliseconds.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from runlib.errors import Diagnostic, SpecError, UserError
from runlib.spec.anchors import anchor_problems
from runlib.spec.bounded_yaml import (
    MAX_DOCUMENT_BYTES,
    MAX_KEY_CHARS,
    MAX_NUMBER_CHARS,
    LimitExceeded,
    compose_bounded,
)
from runlib.spec.hardware import CATALOG
from runlib.spec.models import NAME_PATTERN, ONE_LINE_PATTERN, RunSpec
from runlib.spec.units import short_repr
from runlib.util.userfile import read_bounded

Position = tuple[int, int]  # 1-based line, column


@dataclass
class SourceMap:
    """Where each spec path ('phases[2].seq_len') sits in its file."""

    file: str
    keys: dict[str, Position] = field(default_factory=dict)
    values: dict[str, Position] = field(default_factory=dict)

    def position(self, path: str) -> Position | None:
        """The value's position, else the key's, else the nearest enclosing path's."""
        while True:
            if path in self.values:
                return self.values[path]
            if path in self.keys:
                return self.keys[path]
            if not path:
                return None
            path = parent_path(path)


def parent_path(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rindex("[")]
    return path.rpartition(".")[0]


def join_path(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else str(part)


@dataclass(frozen=True)
class LoadedSpec:
    spec: RunSpec
    data: dict[str, Any]
    source_map: SourceMap


def _scalar(node: Any) -> Any:
    """The value of a scalar node; ValueError when an explicit tag (`!!int abc`) does not fit the text."""
    tag, text = str(node.tag), node.value
    if (tag.endswith((":int", ":float"))) and len(text) > MAX_NUMBER_CHARS:
        raise LimitExceeded.at(
            node.start_mark,
            f"a number of {len(text):,} characters: a spec number has at most {MAX_NUMBER_CHARS} "
            "(an int64 has 19 digits); write a value the run can use",
        )
    if tag.endswith(":null"):
        if text not in ("", "~", "null", "Null", "NULL"):
            raise ValueError(f"{short_repr(text)} is not null")
        return None
    if tag.endswith(":bool"):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{short_repr(text)} is not a boolean (true or false)")
        return text.lower() == "true"
    if tag.endswith(":int"):
        try:
            return int(text, 0) if text[:2].lower() in ("0x", "0o") else int(text)
        except ValueError:
            raise ValueError(f"{short_repr(text)} is not an integer") from None
    if tag.endswith(":float"):
        lowered = text.lower().replace("_", "")
        if lowered.endswith(".inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        if lowered.endswith(".nan"):
            return float("nan")
        try:
            return float(lowered)
        except ValueError:
            raise ValueError(f"{short_repr(text)} is not a number") from None
    return text


def _to_data(node: Any, path: str, smap: SourceMap, problems: list[Diagnostic]) -> Any:
    """Plain Python data from a composed node, recording positions and duplicate keys."""
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    smap.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _to_data(key_node, "", SourceMap(smap.file), problems) if key_node.tag else key_node.value
            if isinstance(key, (dict, list)):
                problems.append(_diag(smap.file, key_node, "SPEC002", path, "a mapping key must be a plain value"))
                continue
            if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
                message = f"a key of {len(key):,} characters: keys are names of at most {MAX_KEY_CHARS}"
                problems.append(_diag(smap.file, key_node, "SPEC003", path, message))
                continue
            key_path = join_path(path, str(key))
            if key in out:
                first = smap.keys[key_path]
                problems.append(
                    _diag(
                        smap.file,
                        key_node,
                        "SPEC001",
                        key_path,
                        f"duplicate key {key!r} (first at line {first[0]}); keep one of the two",
                    )
                )
                continue
            smap.keys[key_path] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _to_data(value_node, key_path, smap, problems)
        return out
    if isinstance(node, SequenceNode):
        return [_to_data(item, join_path(path, i), smap, problems) for i, item in enumerate(node.value)]
    try:
        return _scalar(node)
    except LimitExceeded as exc:
        problems.append(Diagnostic(smap.file, exc.line, exc.col, "SPEC003", path, exc.message))
    except ValueError as exc:  # an explicit tag the text does not fit, e.g. `!!int abc`
        problems.append(
            _diag(
                smap.file,
                node,
                "SPEC002",
                path,
                f"{exc} (!!{str(node.tag).rsplit(':', 1)[-1]}): fix the value or remove the tag",
            )
        )
    return None


def _diag(file: str, node: Any, code: str, path: str, message: str) -> Diagnostic:
    return Diagnostic(file, node.start_mark.line + 1, node.start_mark.column + 1, code, path, message)


def _line_col(text: str | bytes, index: int) -> tuple[int, int]:
    """1-based line and column of the character (or byte) at `index`."""
    newline = "\n" if isinstance(text, str) else b"\n"
    start = text.rfind(newline, 0, index) + 1  # type: ignore[arg-type]
    return text.count(newline, 0, index) + 1, index - start + 1  # type: ignore[arg-type]


def _size_problem(raw: bytes, file: str) -> SpecError:
    """SPEC003 at the line and column where the document passes MAX_DOCUMENT_BYTES."""
    line, col = _line_col(raw, MAX_DOCUMENT_BYTES)
    return SpecError(
        [
            Diagnostic(
                file,
                line,
                col,
                "SPEC003",
                "",
                f"the spec is larger than {MAX_DOCUMENT_BYTES // 1024} KiB (it goes on past here; a spec is a "
                "few KB): is this the right file?",
            )
        ]
    )


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    """YAML text -> (plain data, source map); raises SpecError: SPEC001 on syntax errors and duplicates,
    SPEC003 on a document over a limit of runlib.spec.bounded_yaml."""
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    if len(text) > MAX_DOCUMENT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise _size_problem(text[: MAX_DOCUMENT_BYTES + 1].encode("utf-8", "surrogatepass"), file)
    smap = SourceMap(file)
    try:
        node = compose_bounded(text)
    except LimitExceeded as exc:  # ExplicitTag is SPEC001, the limits SPEC003
        raise SpecError([Diagnostic(file, exc.line, exc.col, exc.code, "", exc.message)]) from None
    except RecursionError:  # not expected within the limits; never a traceback
        message = "nested too deeply for the YAML reader: remove the extra nesting"
        raise SpecError([Diagnostic(file, None, None, "SPEC003", "", message)]) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = (exc.problem or exc.context or "syntax error").strip()
        raise SpecError([Diagnostic(file, line, col, "SPEC001", "", f"YAML syntax error: {problem}")]) from None
    except ReaderError as exc:  # a character YAML does not allow (NUL, most control characters)
        line, col = _line_col(text, exc.position)
        problem = str(exc).splitlines()[0]
        raise SpecError([Diagnostic(file, line, col, "SPEC001", "", f"YAML error: {problem}")]) from None
    except YAMLError as exc:
        raise SpecError([Diagnostic(file, None, None, "SPEC001", "", f"YAML error: {exc}")]) from None
    if node is None:
        return None, smap
    problems: list[Diagnostic] = []
    data = _to_data(node, "", smap, problems)
    if problems:
        raise SpecError(problems)
    return data, smap


def _unwrap(annotation: Any) -> Any:
    """The model class behind Optional[...] / Annotated[...]."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _unwrap(arg)
    return annotation


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc`."""
    current: Any = RunSpec
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if part not in current.model_fields:
                return None
            current = current.model_fields[part].annotation
        elif typing.get_origin(current) in (dict, list):
            current = typing.get_args(current)[-1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


# --- our own text for the schema's errors: what is wrong, and a fix line with a valid example ----------

# a sound spec shipped with the package: realistic example values for required fields without a default
EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "audit" / "cases_base.yaml"
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./%*+ -]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


@functools.cache
def _example_data() -> Any:
    try:
        return parse_yaml(EXAMPLE_SPEC.read_text(encoding="utf-8"), str(EXAMPLE_SPEC))[0]
    except (OSError, SpecError):  # an installation without it: examples from defaults and types only
        return None


def _field_at(loc: tuple[Any, ...]) -> FieldInfo | None:
    """The pydantic field that validates the value at `loc` (None for a dict value or a list item)."""
    if not loc or isinstance(loc[-1], int):
        return None
    model = _model_at(loc[:-1])
    return model.model_fields.get(str(loc[-1])) if model else None


def _bounds(field: FieldInfo | None) -> tuple[tuple[float, bool] | None, tuple[float, bool] | None]:
    """((lower, inclusive), (upper, inclusive)) of a numeric field, each None when unbounded."""
    lower = upper = None
    for meta in field.metadata if field else ():
        for attr, inclusive, is_lower in (
            ("ge", True, True),
            ("gt", False, True),
            ("le", True, False),
            ("lt", False, False),
        ):
            bound = getattr(meta, attr, None)
            if bound is None:
                continue
            if is_lower:
                lower = (bound, inclusive)
            else:
                upper = (bound, inclusive)
    return lower, upper


def _yaml(value: Any) -> str:
    """A value as it is written in a spec (flow style for lists and mappings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g") if value == value else ".nan"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            if _PLAIN.match(value) and value.lower() not in _YAML_WORDS:
                return value  # plain: YAML reads it back as this text
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _from_example_spec(loc: tuple[Any, ...]) -> Any:
    """The value at `loc` in the example spec: list items by index (else the first), dict entries by
    name (else the first: a source or mixture named differently), model fields by name only."""
    node = _example_data()
    for i, part in enumerate(loc):
        if isinstance(node, list) and node:
            node = node[part] if isinstance(part, int) and part < len(node) else node[0]
        elif isinstance(node, dict) and node:
            if part in node:
                node = node[part]
            elif _model_at(loc[:i]) is None:  # a mapping of user names (sources, mixture): any entry will do
                node = next(iter(node.values()))
            else:
                return None
        else:
            return None
    return node


def _example(loc: tuple[Any, ...], field: FieldInfo | None) -> str | None:
    """`key: value` with a valid value for `loc`: the field's default, else the example spec's value, else
    one built from the type (the first allowed word, the lower bound); None when none fits on a line."""
    value: Any = None
    if field is not None and not field.is_required() and field.default not in (None, [], {}):
        value = field.default
    if value is None or hasattr(value, "model_dump"):
        value = _from_example_spec(loc)
    if value is None and field is not None:
        annotation = _unwrap(field.annotation)
        if typing.get_origin(annotation) is Literal:
            value = typing.get_args(annotation)[0]
        elif annotation is bool:
            value = False
        elif annotation in (int, float):
            lower, _ = _bounds(field)
            value = annotation(lower[0]) if lower and lower[1] else (1 if annotation is int else 1.0)
    if value is None or hasattr(value, "model_dump"):
        return None
    text = _yaml(value.model_dump() if hasattr(value, "model_dump") else value)
    if len(text) > 70:
        return None
    key = loc[-1] if loc and not isinstance(loc[-1], int) else None
    return f"{key}: {text}" if key is not None else f"- {text}"


def _got(value: Any) -> str:
    """The user's value with its kind: the text 'abc', the number 4.5, a list, a mapping, nothing."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {_yaml(value)}"
    if isinstance(value, (int, float)):
        return f"the number {short_repr(value)}"
    if isinstance(value, str):
        return f"the text {short_repr(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a mapping"
    return short_repr(value)


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def _range(field: FieldInfo | None, ctx: dict[str, Any]) -> str:
    lower, upper = _bounds(field)
    if lower is None and ("ge" in ctx or "gt" in ctx):
        lower = (ctx["ge"] if "ge" in ctx else ctx["gt"], "ge" in ctx)
    if upper is None and ("le" in ctx or "lt" in ctx):
        upper = (ctx["le"] if "le" in ctx else ctx["lt"], "le" in ctx)
    if lower is not None and upper is not None and lower[1] and upper[1]:
        return f"from {_number(lower[0])} to {_number(upper[0])}"
    parts = []
    if lower is not None:
        parts.append(f"{'at least' if lower[1] else 'above'} {_number(lower[0])}")
    if upper is not None:
        parts.append(f"{'at most' if upper[1] else 'below'} {_number(upper[0])}")
    return " and ".join(parts)


def _fix(path: str, what: str, example: str | None) -> str:
    return f"write {path} as {what}" + (f", e.g. `{example}`" if example else "")


def explain_error(error: ErrorDetails, loc: tuple[Any, ...], path: str) -> tuple[str, str]:
    """(message, fix) for one pydantic error at `loc` (`path` spelled as the spec's dotted path).

    Over 80 lines: one branch per kind of pydantic error, each its message and its fix, read side by side."""
    kind, got = error["type"], error.get("input")
    ctx = error.get("ctx") or {}
    field = _field_at(loc)
    example = _example(loc, field)
    eg = f", e.g. `{example}`" if example else ""
    key = loc[-1] if loc else ""
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(model.model_fields) if model else []
        guess = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
        if guess:
            return f"unknown key {short_repr(key)}; did you mean {guess[0]!r}?", f"rename {key} to {guess[0]}"
        return (
            f"unknown key {short_repr(key)}",
            f"remove it; the keys of {parent_path(path) or 'a run spec'} are: {', '.join(allowed)}",
        )
    if kind == "missing":
        if isinstance(key, int):
            return (
                f"item {key} is missing: {parent_path(path)} has too few items",
                f"give every item of {parent_path(path)}"
                + (
                    f", e.g. `{_example(loc[:-1], _field_at(loc[:-1]))}`"
                    if _example(loc[:-1], _field_at(loc[:-1]))
                    else ""
                ),
            )
        where = parent_path(path) or "the top level of the spec"
        return f"required key {key!r} is missing", f"add it under {where}{eg}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        rng = _range(field, ctx)
        return f"expected a whole number, got {_got(got)}", _fix(
            path, "a whole number" + (f" {rng}" if rng else "") + " (no quotes, units or decimals)", example
        )
    if kind in ("float_parsing", "float_type"):
        hint = ""
        if isinstance(got, str) and got.strip().endswith("%"):
            try:
                fraction = float(got.strip()[:-1]) / 100
            except ValueError:
                fraction = 0.45
            hint = f" (a fraction: {got.strip()} is {fraction:g})"
            example = f"{key}: {fraction:g}" if not isinstance(key, int) else example
        return f"expected a number, got {_got(got)}{hint}", _fix(path, "a plain number (no quotes or units)", example)
    if kind == "finite_number":
        return f"expected a finite number, got {_got(got)}", _fix(path, "a finite number (no .nan or .inf)", example)
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {_got(got)}", _fix(path, "true or false", example)
    if kind in ("string_type", "str_type"):
        return f"expected text, got {_got(got)}", _fix(path, "text (quote it if it looks like a number)", example)
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        rng = _range(field, ctx)
        side = "small" if kind.startswith("greater") else "large"
        return f"{short_repr(got)} is too {side}: {path} takes a value {rng}", f"use a value {rng}{eg}"
    if kind == "literal_error":
        expected = [e.strip().strip("'") for e in ctx.get("expected", "").replace(" or ", ",").split(",")]
        expected = [e for e in expected if e]
        guess = difflib.get_close_matches(str(got), expected, n=1, cutoff=0.5)
        choices = ", ".join(expected)
        if guess:
            return (
                f"{short_repr(got)} is not one of {choices}; did you mean {guess[0]!r}?",
                f"write `{key}: {guess[0]}`" if not isinstance(key, int) else f"write {guess[0]}",
            )
        return f"{short_repr(got)} is not one of {choices}", f"use one of {choices}{eg}"
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == NAME_PATTERN:
            fixed = re.sub(r"[^a-z0-9._-]+", "-", str(got).lower()).strip("-._") or "name"
            return (
                f"{short_repr(got)} is not a valid name: lowercase letters, digits, '.', '_' and '-', "
                "starting with a letter or digit (names become folder and run names)",
                f"rename it to {fixed!r}" if key == "[key]" else f"write `{key}: {fixed}`",  # a mapping key: a source
            )
        if ctx.get("pattern") == ONE_LINE_PATTERN:
            return (
                f"{short_repr(got)} holds a control character (a newline, a tab, a NUL byte)",
                "write it as one line of printable text",
            )
        return f"{short_repr(got)} does not match the pattern {ctx.get('pattern')}", f"use a value like the example{eg}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        model = _model_at(loc)
        keys = f" ({', '.join(list(model.model_fields)[:4])}, ...)" if model else ""
        return (
            f"expected a mapping of keys{keys}, got {_got(got)}",
            f"write {path} as `key: value` lines indented under {key}:{eg}",
        )
    if kind in ("list_type", "tuple_type", "set_type"):
        return f"expected a list, got {_got(got)}", _fix(path, "a list ([a, b] or '- item' lines)", example)
    if kind == "string_too_long":
        limit = ctx.get("max_length")
        shortened = str(got)[: min(int(limit or 1), 40)].rstrip("-._") if isinstance(got, str) else ""
        return (
            f"{short_repr(got)} has {len(got) if isinstance(got, str) else '?'} characters; {path} takes at most "
            f"{limit} (names become file and folder names)",
            f"write a shorter name, e.g. `{key}: {shortened}`"
            if shortened and not isinstance(key, int)
            else f"write a name of at most {limit} characters",
        )
    if kind in ("too_short", "too_long"):
        return (
            f"{path} has {ctx.get('actual_length', '?')} items; it takes "
            f"{'at least ' + str(ctx.get('min_length')) if kind == 'too_short' else 'at most ' + str(ctx.get('max_length'))}",
            f"{'add' if kind == 'too_short' else 'remove'} items{eg}",
        )
    msg = error["msg"].removeprefix("Value error, ")
    if kind == "value_error":  # our own validators (counts, durations, batch sizes): already our words
        return msg, (f"write {path} like `{example}`" if example else f"see `runlib schema` for {path}")
    shown = f" (got {_got(got)})" if not isinstance(got, (dict, list)) else ""
    return f"{msg}{shown}", (f"write {path} like `{example}`" if example else f"see `runlib schema` for {path}")


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The loc parts that address data (pydantic adds validator names for unions and tagged unions)."""
    return tuple(
        part for part in loc if isinstance(part, int) or not str(part).startswith(("function-", "tagged-union["))
    )


def _join_loc(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path = join_path(path, part)
    return path


def validation_diagnostics(exc: ValidationError, data: Any, smap: SourceMap) -> list[Diagnostic]:
    """One diagnostic per mistake: the schema's errors in our words, each with a fix line.

    A typo'd key gives pydantic two errors, the unknown key and the required key it was meant to be;
    they become one ("did you mean"). Several errors at one path (the members of a union) become the
    first one."""
    errors = [(e, _clean_loc(e["loc"])) for e in exc.errors()]
    missing = {loc for e, loc in errors if e["type"] == "missing"}
    renamed: set[tuple[Any, ...]] = set()
    for e, loc in errors:
        if e["type"] == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = list(model.model_fields) if model else []
            guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
            if guess and (*loc[:-1], guess[0]) in missing:
                renamed.add((*loc[:-1], guess[0]))
    diagnostics, seen = [], set()
    for error, loc in errors:
        if error["type"] == "missing" and loc in renamed:
            continue  # said by the unknown key's "did you mean"
        path = _join_loc(loc)
        if path in seen:
            continue
        seen.add(path)
        if error["type"] == "extra_forbidden":
            position = smap.keys.get(path) or smap.position(path)
        elif error["type"] == "missing":
            position = smap.position(parent_path(path))
        else:
            position = smap.position(path)
        line, col = position if position else (None, None)
        message, fix = explain_error(error, loc, path)
        if error["type"] == "extra_forbidden" and "did you mean" in message:
            meant = message.rsplit("'", 2)[-2]
            if (*loc[:-1], meant) in renamed:
                message += f" ({meant} is required and missing)"
        diagnostics.append(Diagnostic(smap.file, line, col, "SPEC002", path, message, fix))
    diagnostics.sort(key=lambda d: (d.line or 0, d.col or 0))
    return diagnostics


def load_spec_text(text: str, file: str = "<spec>") -> LoadedSpec:
    data, smap = parse_yaml(text, file)
    if not isinstance(data, dict):
        raise SpecError(
            [Diagnostic(file, 1, 1, "SPEC002", "", "a run spec is a YAML mapping (name:, hardware:, model:, ...)")]
        )
    return validate_data(data, smap)


def _cross_field_problems(spec: RunSpec) -> list[tuple[str, str]]:
    """Problems without which the spec has no meaning, but which one field's type cannot express."""
    problems = []
    hw = spec.hardware
    if hw.accelerator not in CATALOG and (hw.memory_gib is None or not hw.peak_tflops):
        guess = [k for k in CATALOG if k.startswith(hw.accelerator.lower())] or difflib.get_close_matches(
            hw.accelerator, list(CATALOG), n=1, cutoff=0.5
        )
        hint = f"did you mean {' or '.join(repr(g) for g in guess)}? " if guess else ""
        problems.append(
            (
                "hardware.accelerator",
                f"unknown accelerator {hw.accelerator!r}: {hint}known: {', '.join(CATALOG)}; "
                "for other hardware give hardware.memory_gib and hardware.peak_tflops",
            )
        )
    if spec.tokenizer.vocab_size is None and spec.tokenizer.pretrained is None:
        problems.append(
            ("tokenizer", "give tokenizer.vocab_size (to train one) or tokenizer.pretrained (a tokenizer.json)")
        )
    for i, task in enumerate(spec.eval.tasks):
        if task.kind != "lm_eval" and (task.path is None) == (task.from_heldout is None):  # lm_eval: EvalTaskSpec
            problems.append(
                (f"eval.tasks[{i}]", "give exactly one of path (a JSONL file) or from_heldout (a source name)")
            )
        elif task.from_heldout is not None and task.from_heldout not in spec.data.sources:
            known = ", ".join(spec.data.sources)
            problems.append(
                (f"eval.tasks[{i}].from_heldout", f"unknown source {task.from_heldout!r}; sources: {known}")
            )
    problems += anchor_problems(spec)
    if spec.model.vocab_size is None and spec.tokenizer.vocab_size is None:
        problems.append(
            ("model.vocab_size", "model.vocab_size is required when the tokenizer's size is unknown (pretrained)")
        )
    return problems


def validate_data(data: dict[str, Any], smap: SourceMap | None = None) -> LoadedSpec:
    smap = smap or SourceMap("<spec>")
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_diagnostics(exc, data, smap)) from None
    problems = _cross_field_problems(spec)
    if problems:
        diagnostics = []
        for path, message in problems:
            line, col = smap.position(path) or (None, None)
            diagnostics.append(Diagnostic(smap.file, line, col, "SPEC002", path, message))
        raise SpecError(diagnostics)
    return LoadedSpec(spec, data, smap)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read and validate a spec file; raises SpecError listing every problem."""
    file = str(path)
    try:
        # never more than the limit (the file may be huge); a FIFO, a device or /proc/kmsg is refused
        # before it is read (runlib.util.userfile): reading one blocks forever
        raw = read_bounded(path, MAX_DOCUMENT_BYTES, "the spec file")
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise _size_problem(raw, file)
        text = raw.decode("utf-8")
    except SpecError:
        raise
    except UserError as exc:
        message = str(exc).removeprefix(f"{file}: ").removeprefix(f"{file} ")
        if "file not found" in message:
            message = "file not found: check the path"
        raise SpecError([Diagnostic(file, None, None, "SPEC001", "", message)]) from None
    except UnicodeDecodeError as exc:
        line, col = _line_col(raw, exc.start)
        message = f"not UTF-8 text (byte {raw[exc.start]:#04x}): save the spec as UTF-8"
        raise SpecError([Diagnostic(file, line, col, "SPEC001", "", message)]) from None
    except OSError as exc:
        raise SpecError([Diagnostic(file, None, None, "SPEC001", "", f"cannot read the file: {exc}")]) from None
    return load_spec_text(text, file)
