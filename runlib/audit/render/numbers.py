"""The number formats every view of an audit shares (text, json, markdown, html and the run report):
device-hours and days as printed, and the unit device-hours are counted in."""

from __future__ import annotations

import math

from runlib.spec.hardware import CATALOG
from runlib.spec.units import format_count

__all__ = ["days_text", "device_hours_unit", "hours_text"]


def device_hours_unit(accelerator: str) -> str:
    """The unit of `gpu_hours` in words: 'core-hours' on a CPU (the catalog's cpu device is one core),
    'TPU chip-hours' on a catalogued TPU (PaLM's and Gopher's papers count chips), 'GPU-hours' on a catalogued
    GPU, 'device-hours' on an accelerator given by its numbers."""
    if accelerator == "cpu":
        return "core-hours"
    if accelerator not in CATALOG:
        return "device-hours"
    return "TPU chip-hours" if accelerator.startswith("tpu") else "GPU-hours"


def hours_text(hours: float | None) -> str:
    """Device-hours as every view prints them (text, markdown, html, run report): three significant
    digits with K/M/B suffixes, so a shrunk run's 0.00871 core-hours is not rounded to '0.0'."""
    return format_count(hours) if hours is not None and math.isfinite(hours) else "n/a"


def days_text(days: float | None) -> str:
    """Wall-clock days as every view prints them: three significant digits."""
    return f"{days:.3g}" if days is not None and math.isfinite(days) else "n/a"
