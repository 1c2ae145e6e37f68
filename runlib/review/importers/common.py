"""What every importer fills in when its source does not say it: each value stated, each one `assumed:`.

The defaults are the ones a reader would guess and the audit can check: H100s at 40% MFU (Llama 3,
arXiv 2407.21783, Table 4: 38-43% BF16 MFU), bf16 with fp32 master weights, one foundation phase over
one placeholder source declared as a single pass over the run's tokens (so MIX003 stays silent unless
the source says how much data there is), and a log-only spike policy (it changes no update).
"""

from __future__ import annotations

import re

from runlib.review.importers.draft import Draft

NAME_CHARS = re.compile(r"[^a-z0-9._-]+")


def spec_name(text: str) -> str:
    """A spec name (lowercase, [a-z0-9._-], starting with a letter or digit) from free text."""
    name = NAME_CHARS.sub("-", text.lower()).strip("-._")
    return name or "imported"


def placeholder_source(draft: Draft, name: str, domain: str, tokens: int | None, why_tokens: str) -> None:
    """A file source at data/raw/<name>/ (a placeholder path: put the corpus there or edit it)."""
    draft.set(f"data.sources.{name}.domain", domain)
    draft.set(
        f"data.sources.{name}.input",
        {"format": "jsonl", "path": f"data/raw/{name}/*.jsonl"},
        "placeholder path: put the corpus there (or point to it) before running",
    )
    if tokens is not None:
        draft.set(f"data.sources.{name}.tokens", int(tokens), why_tokens)


def fill_defaults(draft: Draft, run_tokens: int, source: str = "web") -> None:
    draft.assume("seed", 0, "not given in the source")
    draft.assume("hardware.accelerator", "h100-sxm", "the source names no accelerator")
    draft.assume("hardware.nodes", 1, "the source gives no node count")
    draft.assume("hardware.devices_per_node", 8, "8-GPU nodes")
    draft.assume("hardware.mfu", 0.4, "planning MFU; Llama 3 reports 38-43% (arXiv 2407.21783, Table 4)")
    if not any(p.startswith("data.sources.") for p in draft.values):
        placeholder_source(
            draft,
            source,
            "web",
            run_tokens,
            "assumed: one pass over the run's tokens (the source gives no corpus size)",
        )
    sources = sorted({p.split(".")[2] for p in draft.values if p.startswith("data.sources.")})
    if not draft.has("phases"):
        draft.set(
            "phases",
            [
                {
                    "name": "pretrain",
                    "kind": "foundation",
                    "tokens": "100%",
                    "mixture": {s: round(1.0 / len(sources), 6) for s in sources},
                }
            ],
        )
        draft.comments["phases[0]"] = "assumed: one foundation phase over the whole run"
    draft.assume("tokens", int(run_tokens), "not given in the source")
    if draft.get("precision.loss_scaling") in ("dynamic", "static"):
        draft.assume(
            "checkpoint.state",
            ["model", "optimizer", "scheduler", "rng", "data", "scaler"],
            "everything an exact resume needs, the loss scaler included",
        )
    draft.assume(
        "monitor.spike",
        {"zscore": 5.0, "window": 200, "action": "log"},
        "log loss spikes only (changes no update; the source has no spike policy)",
    )
