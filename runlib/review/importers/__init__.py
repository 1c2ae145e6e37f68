"""`runlib import`: a run spec from another tool's config, every unstated value marked `# assumed: ...`.

Formats: nanogpt (a Python file of assignments, read with ast), hf (a Hugging Face config.json, plus an
optional TrainingArguments JSON), torchtitan (a job TOML), megatron (a Megatron-LM argument list).
Pure: the caller reads the file and writes the result; nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.review.importers.common import parse_json_config
from runlib.review.importers.draft import Draft, HardwareChoice, UnmappableConfig, load_draft
from runlib.spec.hardware import CATALOG
from runlib.util.userfile import read_bounded

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
    # a FIFO, a device or /proc/kmsg is refused before it is read: reading one blocks
    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES, "the config file")
    except UserError as exc:
        raise UserError(f"runlib import: {exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(
            f"runlib import: {path} is over {MAX_CONFIG_BYTES >> 20} MiB; a config is a few KB: is this the right file?"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"runlib import: {path} is not UTF-8 text; give the config file") from None


def read_json(path: Path, what: str) -> dict[str, Any]:
    data = parse_json_config(read_config(path), str(path), what)
    if not isinstance(data, dict):
        raise UnmappableConfig(f"{path}: {what} must be a JSON object")
    return data


def import_file(
    path: str | Path,
    fmt: str = "auto",
    training_args: str | Path | None = None,
    out_name: str = "<imported>",
    hardware: HardwareChoice | None = None,
) -> Imported:
    """The spec of one config file; `hardware` (runlib import --devices/--nodes/--accelerator) for a file that
    does not state the machine it runs on."""
    path = Path(path)
    text = read_config(path)
    if fmt == "auto":
        fmt = detect_format(path, text)
    if fmt not in FORMATS:
        raise UserError(f"runlib import: unknown format {fmt!r}; one of auto, {', '.join(FORMATS)}")
    if training_args is not None and fmt != "hf":
        raise UserError("runlib import: --training-args goes with --format hf (a config.json) only")
    hardware = hardware or HardwareChoice()
    if hardware != HardwareChoice() and fmt == "nanogpt":
        raise UserError(
            "runlib import: --devices/--nodes/--accelerator go with hf, torchtitan and megatron files; a nanoGPT "
            "config names its launch in its torchrun comment"
        )
    if hardware.accelerator is not None and hardware.accelerator not in CATALOG:
        raise UserError(
            f"runlib import: --accelerator {hardware.accelerator!r} is not in the catalog (`runlib explain hardware`)"
        )
    try:
        draft = _draft(path, fmt, text, training_args, hardware)
    except UserError:
        raise
    except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        # a value the checks of common.check_source_values let through and the mapping cannot use
        # (a zero, a negative or a string where a count goes): still the file's fault, never a traceback
        raise UnmappableConfig(
            f"{path}: a value of this {fmt} config cannot be mapped ({type(exc).__name__}: {str(exc)[:160]}); "
            "check its sizes and counts (positive whole numbers) and its rates (finite numbers)"
        ) from None
    yaml_text = draft.to_yaml()
    loaded = load_draft(yaml_text, out_name, f"{path} ({fmt})", draft.comments)
    return Imported(fmt, yaml_text, loaded)


def _draft(path: Path, fmt: str, text: str, training_args: str | Path | None, hardware: HardwareChoice) -> Draft:
    draft: Draft
    if fmt == "nanogpt":
        from runlib.review.importers.nanogpt import import_nanogpt

        draft = import_nanogpt(path, text)
    elif fmt == "hf":
        from runlib.review.importers.hf import import_hf

        config = parse_json_config(text, str(path), "the config")
        if not isinstance(config, dict):
            raise UnmappableConfig(f"{path}: a config.json is a JSON object")
        args = read_json(Path(training_args), "the training arguments") if training_args is not None else None
        draft = import_hf(path, config, args, hardware)
    elif fmt == "torchtitan":
        from runlib.review.importers.torchtitan import import_torchtitan

        draft = import_torchtitan(path, text, hardware)
    else:
        from runlib.review.importers.megatron import import_megatron

        draft = import_megatron(path, text, hardware)
    return draft


__all__ = ["FORMATS", "HardwareChoice", "Imported", "UnmappableConfig", "detect_format", "import_file"]
