"""gpu_check's summary: the table of its training rows, and the compiled rows' speed against their eager twins."""

from __future__ import annotations

from typing import Any


def summary_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "model",
        "backend",
        "documents",
        "recompute",
        "compiled",
        "tokens/s",
        "MFU",
        "peak GiB",
        "plan GiB",
        "ratio",
        "note",
    )
    lines = []

    def fmt(value: object, spec: str) -> str:
        return format(value, spec) if isinstance(value, (int, float)) and value is not None else "-"

    for r in rows:
        note = "skipped" if r.get("skipped") else ("error" if r.get("error") else "")
        lines.append(
            (
                r["model"],
                r["backend"],
                "yes" if r["documents"] else "no",
                r["recompute"],
                "yes" if r.get("compiled") else "no",
                fmt(r.get("tokens_per_s"), ",.0f"),
                fmt(r.get("mfu"), ".1%"),
                fmt(r.get("peak_gib"), ".2f"),
                fmt(r.get("plan_gib"), ".2f"),
                fmt(r.get("ratio"), ".2f"),
                note,
            )
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def compiled_vs_eager(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each compiled row's tokens/s over its eager twin's (same model, backend, documents, recompute), by
    the rows' names; rows that did not both run are left out."""
    names = ("model", "backend", "documents", "recompute")
    eager = {tuple(r[k] for k in names): r for r in rows if not r.get("compiled")}
    out = {}
    for r in rows:
        twin = eager.get(tuple(r[k] for k in names)) if r.get("compiled") else None
        if twin is not None and r.get("tokens_per_s") and twin.get("tokens_per_s"):
            name = f"{r['model']} {r['backend']} docs={r['documents']} recompute={r['recompute']}"
            out[name] = r["tokens_per_s"] / twin["tokens_per_s"]
    return out
