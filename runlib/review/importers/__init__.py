"""`runlib import`: a run spec from another tool's config, every unstated value marked `# assumed: ...`.

Formats: nanogpt (a Python file of assignments, read with ast), hf (a Hugging Face config.json, plus an
optional TrainingArguments JSON), torchtitan (a job TOML), megatron (a Megatron-LM argument list).
Pure: the caller reads the file and writes the result; nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.review.importers.draft import Draft, UnmappableConfig, load_draft

FORMATS = ("nanogpt", "hf", "torchtitan", "megatron")
MAX_CONFIG_BYTES = 1 << 20  # a config is a few KB


@dataclass(frozen=True)
class Imported:
    format: str
    text: str  # the spec, commented YAML
    loaded: Any  # runlib.spec.LoadedSpec of that text


def detect_format(path: Path, text: str) -> str:
    """By extension, then content: .toml -> torchtitan, .json -> hf, .py -> nanogpt, `--flag` lists -> megatron."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return "torchtitan"
    if suffix == ".json":
        return "hf"
    if suffix == ".py":
        return "nanogpt"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "hf"
    if "--num-layers" in text or "--hidden-size" in text:
        return "megatron"
    if stripped.startswith("[") and "=" in text:
        return "torchtitan"
    raise UnmappableConfig(
        f"{path}: cannot tell the format from the name or the content; give --format ({', '.join(FORMATS)})"
    )


def read_config(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"runlib import: {path}: file not found; check the path") from None
    except IsADirectoryError:
        raise UserError(f"runlib import: {path} is a directory; give the config file itself") from None
    except OSError as exc:
        raise UserError(f"runlib import: {path}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(
            f"runlib import: {path} is over {MAX_CONFIG_BYTES >> 20} MiB; a config is a few KB: is this the right file?"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"runlib import: {path} is not UTF-8 text; give the config file") from None


def read_json(path: Path, what: str) -> dict[str, Any]:
    text = read_config(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnmappableConfig(f"{path}:{exc.lineno}:{exc.colno}: {what} is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UnmappableConfig(f"{path}: {what} must be a JSON object")
    return data


def import_file(
    path: str | Path,
    fmt: str = "auto",
    training_args: str | Path | None = None,
    out_name: str = "<imported>",
) -> Imported:
    path = Path(path)
    text = read_config(path)
    if fmt == "auto":
        fmt = detect_format(path, text)
    if fmt not in FORMATS:
        raise UserError(f"runlib import: unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}")
    if training_args is not None and fmt != "hf":
        raise UserError("runlib import: --training-args goes with --format hf (a config.json) only")
    draft: Draft
    if fmt == "nanogpt":
        from runlib.review.importers.nanogpt import import_nanogpt

        draft = import_nanogpt(path, text)
    elif fmt == "hf":
        from runlib.review.importers.hf import import_hf

        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UnmappableConfig(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
        if not isinstance(config, dict):
            raise UnmappableConfig(f"{path}: a config.json is a JSON object")
        args = read_json(Path(training_args), "the training arguments") if training_args is not None else None
        draft = import_hf(path, config, args)
    elif fmt == "torchtitan":
        from runlib.review.importers.torchtitan import import_torchtitan

        draft = import_torchtitan(path, text)
    else:
        from runlib.review.importers.megatron import import_megatron

        draft = import_megatron(path, text)
    yaml_text = draft.to_yaml()
    loaded = load_draft(yaml_text, out_name, f"{path} ({fmt})")
    return Imported(fmt, yaml_text, loaded)


__all__ = ["FORMATS", "Imported", "UnmappableConfig", "detect_format", "import_file"]
