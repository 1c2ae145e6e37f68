"""Defects planted in published runs: each is found, and its clean twin gets nothing of the kind.

Each row takes a spec under specs/ that reproduces a run that really trained, changes one thing the way a
typo or a copied config would, and names the check that must report it at the line it changed, with the
least severity it must have. The clean spec must not get that code at that path with that severity or
worse: a check that fires on the clean twin cannot tell the defect from the recipe. The checks' own pass
and fail cases run in test_check_cases.py; these hold them against real recipes' numbers.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from runlib.audit import audit
from runlib.audit.cases import apply_patch
from runlib.audit.registry import SEVERITIES
from runlib.spec import validate_data
from runlib.spec.loader import parse_yaml

ROOT = Path(__file__).parent.parent.parent

# id -> (spec, patch, code, path the finding is at, least severity)
PLANTED: dict[str, tuple[str, dict[str, object], str, str, str]] = {
    # the anneal's LR scale typed 10 for 0.1: its LR 10x the run's peak
    # (late in Llama 3's cosine the anneal sits at ~1% of the peak: 10x stays below it, and still raises it)
    "anneal_lr_scale_typo": (
        "llama3-8b",
        {"phases[2].optimizer": {"lr_scale": 10}},
        "SCHED010",
        "phases[2]",
        "warning",
    ),
    # OLMo 2's Dolmino anneal starts near the cosine's floor (0.1x the peak): 10x takes it back to the peak
    "anneal_lr_scale_typo_olmo2": (
        "olmo2-7b",
        {"phases[1].optimizer": {"lr_scale": 10}},
        "SCHED010",
        "phases[1]",
        "warning",
    ),
    # rolling back 5,000 steps while 2 checkpoints 2,000 steps apart are kept
    "rollback_past_kept_checkpoints": (
        "llama3-8b",
        {
            "monitor.spike": {"zscore": 5.0, "window": 200, "action": "rollback", "rollback": "5000 steps"},
            "checkpoint.keep": 2,
        },
        "MON003",
        "monitor.spike",
        "error",
    ),
    # a phase without clipping (OPT001 read only the run-level value)
    "phase_grad_clip_zero": ("olmo2-7b", {"phases[1].optimizer": {"grad_clip": 0}}, "OPT001", "phases[1]", "warning"),
    # weight decay 1.0 typed for 0.1
    "weight_decay_typo": ("olmo2-7b", {"optimizer.weight_decay": 1.0}, "OPT004", "optimizer.weight_decay", "warning"),
    # a 13x-MTBF checkpoint interval on 2,048 GPUs: almost never reaches a save
    "checkpoint_interval_past_mtbf": (
        "llama3-8b",
        {"hardware.nodes": 256, "checkpoint.every": "300000 steps"},
        "CKPT002",
        "checkpoint.every",
        "error",
    ),
    # z-loss removed from PaLM's 256K-vocabulary run at its Adafactor LR 1e-2
    "palm_z_loss_removed": ("palm-540b", {"optimizer.z_loss": 0.0}, "OPT003", "optimizer", "warning"),
    # warmup longer than the run (a percent typed as a fraction's digits)
    "warmup_past_the_run": ("pythia-1b", {"schedule.warmup": "100%"}, "SCHED001", "schedule.warmup", "error"),
    # fp16 without a loss scale on a run that trained in bf16
    "fp16_without_loss_scaling": (
        "tinyllama-1.1b",
        {"precision.compute": "fp16", "precision.loss_scaling": "none"},
        "PREC001",
        "precision.loss_scaling",
        "error",
    ),
    # a source shrunk to a twentieth: repeated ~20 times
    "source_repeated_twenty_times": (
        "deepseek-llm-67b",
        {"data.sources.bilingual.tokens": "100B"},
        "MIX003",
        "data.sources.bilingual.tokens",
        "error",
    ),
    # a cosine decay over half the run, copied from a shorter run
    "decay_half_the_run": ("falcon-7b", {"schedule.decay": "50%"}, "SCHED002", "schedule.decay", "warning"),
    # a global batch that the micro-batch, accumulation and data-parallel degree do not make
    "batch_does_not_divide": ("mpt-7b", {"batch.global_batch": "4000000 tokens"}, "BATCH001", "batch", "error"),
    # tensor parallelism that does not divide Falcon's 71 heads
    "tensor_not_dividing_heads": ("falcon-7b", {"parallelism.tensor": 2}, "PAR002", "parallelism.tensor", "error"),
    # BLOOM's peak LR typed 6e-3 for 6e-5 (6e-4 would sit inside the DeepSeek fit's band for its compute)
    "peak_lr_typo": ("bloom-176b", {"optimizer.lr": 6.0e-3}, "SCHED008", "optimizer.lr", "warning"),
}


@cache
def _data(spec: str) -> dict[str, object]:
    data, _ = parse_yaml((ROOT / "specs" / f"{spec}.yaml").read_text(), f"{spec}.yaml")
    assert isinstance(data, dict)
    return data


def _hits(data: dict[str, object], code: str, path: str, least: str) -> list[str]:
    """The findings of `code` at `path` or under it with `least` severity or worse, as text."""
    result = audit(validate_data(data).spec, select={code})
    worst = SEVERITIES.index(least)
    return [
        f"{f.severity} {f.path}: {f.message}"
        for f in result.findings
        if f.code == code and f.path.startswith(path) and SEVERITIES.index(f.severity) <= worst
    ]


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_planted_defect_is_found_and_its_clean_twin_is_not_flagged(name: str) -> None:
    spec, patch, code, path, least = PLANTED[name]
    clean = _data(spec)
    assert not _hits(clean, code, path, least), f"{spec}: {code} on the clean spec"
    found = _hits(apply_patch(clean, patch), code, path, least)
    assert found, f"{spec} with {patch}: no {code} at {path} ({least} or worse)"
