"""Load a run spec from YAML: YAML 1.2 scalars, line:col for every value, every problem at once.

The YAML is composed into a node tree (ruamel.yaml) and turned into plain data here, so that
duplicate keys anywhere are found and reported (PyYAML and most loaders silently keep the last one),
`1e-4` is a float (YAML 1.2), and each value keeps its position for diagnostics and findings.

Codes: SPEC001 the file cannot be read or is not YAML (syntax, duplicate keys); SPEC002 a value the
schema refuses (unknown key, wrong type, out of range, not finite); SPEC003 a document over a limit
of the loader (runlib.spec.bounded_yaml: size, nesting depth, values, aliases, digits of a number),
checked as the document is read so that a hostile file is refused in milliseconds.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from runlib.errors import Diagnostic, SpecError
from runlib.spec.bounded_yaml import (
    MAX_DOCUMENT_BYTES,
    MAX_KEY_CHARS,
    MAX_NUMBER_CHARS,
    LimitExceeded,
    compose_bounded,
)
from runlib.spec.models import RunSpec
from runlib.spec.units import short_repr

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
    except LimitExceeded as exc:
        raise SpecError([Diagnostic(file, exc.line, exc.col, "SPEC003", "", exc.message)]) from None
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


def _message(error: dict[str, Any], loc: tuple[Any, ...]) -> str:
    kind, msg = error["type"], error["msg"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(model.model_fields) if model else []
        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {guess[0]!r}?" if guess else (f"; allowed: {', '.join(allowed)}" if allowed else "")
        return f"unknown key {short_repr(loc[-1])}{hint}"
    if kind == "missing":
        return f"required key {loc[-1]!r} is missing: add it"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = error.get("input")
    if kind == "literal_error":
        expected = [
            e.strip().strip("'") for e in error.get("ctx", {}).get("expected", "").replace(" or ", ",").split(",")
        ]
        guess = difflib.get_close_matches(str(got), [e for e in expected if e], n=1, cutoff=0.5)
        if guess:
            return f"{msg} (got {short_repr(got)}); did you mean {guess[0]!r}?"
    if kind != "value_error" and not isinstance(got, (dict, list)):
        return f"{msg} (got {short_repr(got)})"
    return msg


def validation_diagnostics(exc: ValidationError, data: Any, smap: SourceMap) -> list[Diagnostic]:
    diagnostics = []
    for error in exc.errors():
        # keep only the loc parts that address data (pydantic adds validator names for unions)
        loc = tuple(
            part
            for part in error["loc"]
            if isinstance(part, int) or not (str(part).startswith(("function-", "tagged-union[")))
        )
        path = ""
        for part in loc:
            path = join_path(path, part)
        if error["type"] == "extra_forbidden":
            position = smap.keys.get(path) or smap.position(path)
        elif error["type"] == "missing":
            position = smap.position(parent_path(path))
        else:
            position = smap.position(path)
        line, col = position if position else (None, None)
        diagnostics.append(Diagnostic(smap.file, line, col, "SPEC002", path, _message(error, loc)))
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
    from runlib.plan.hardware import CATALOG

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
        if (task.path is None) == (task.from_heldout is None):
            problems.append(
                (f"eval.tasks[{i}]", "give exactly one of path (a JSONL file) or from_heldout (a source name)")
            )
        elif task.from_heldout is not None and task.from_heldout not in spec.data.sources:
            known = ", ".join(spec.data.sources)
            problems.append(
                (f"eval.tasks[{i}].from_heldout", f"unknown source {task.from_heldout!r}; sources: {known}")
            )
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
        with open(path, "rb") as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)  # never more: the file may be huge (or /dev/zero)
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise _size_problem(raw, file)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError([Diagnostic(file, None, None, "SPEC001", "", "file not found: check the path")]) from None
    except UnicodeDecodeError as exc:
        line, col = _line_col(raw, exc.start)
        message = f"not UTF-8 text (byte {raw[exc.start]:#04x}): save the spec as UTF-8"
        raise SpecError([Diagnostic(file, line, col, "SPEC001", "", message)]) from None
    except OSError as exc:
        raise SpecError([Diagnostic(file, None, None, "SPEC001", "", f"cannot read the file: {exc}")]) from None
    return load_spec_text(text, file)
