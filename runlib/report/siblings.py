"""Run reports of the same run name side by side: a variant (specs/variants/x.yaml, `name` as its baseline's)
writes its report to reports/<run>/run-<file stem> (runlib.util.report_dirs), beside the baseline's
reports/<run>/run; each report shows the others it finds there, with a link and their headline numbers.

Each run report leaves summary.json (`run_summary`: the spec file and key, the stages built, tokens trained,
the final training loss, the held-out loss per source of the last evaluation), so a report reads its
siblings' numbers without collecting their runs. A sibling written later than this report appears here only
when this report is written again (the workflow rewrites it whenever one of its stages changes).
"""

from __future__ import annotations

import json
from pathlib import Path

from runlib.audit.render.report import Block, Cell, Code, Heading, Link, Para, Table
from runlib.report.collect import JsonObject, RunData, json_object, number
from runlib.store.keys import spec_key
from runlib.util.report_dirs import SPEC_PATH_FILE, recorded_spec_path, sibling_reports

SUMMARY = "summary.json"
SUMMARY_MAX_BYTES = 1 << 20  # a summary is a few hundred bytes: a larger file is not one


def run_summary(run: RunData) -> JsonObject:
    """The headline numbers of a run report (pure: from the collected run)."""
    trained = [p for p in run.phases if p.train is not None and p.train.built]
    last = trained[-1] if trained else None
    counts = last.train.manifest.counts if last is not None and last.train and last.train.manifest else {}
    records = last.records if last is not None else []
    final_loss = number(counts.get("final_loss", records[-1].get("loss") if records else None))
    tokens = number(counts.get("tokens", records[-1].get("tokens") if records else None))
    evaluated = [p for p in run.phases if p.eval_data is not None]
    heldout: dict[str, float] = {}
    if evaluated:
        for source, entry in json_object((evaluated[-1].eval_data or {}).get("heldout")).items():
            loss = number(entry.get("loss")) if isinstance(entry, dict) else None
            if loss is not None:
                heldout[str(source)] = loss
    return {
        "run": run.spec.name,
        "spec_path": str(Path(run.spec_path).resolve()),
        "spec_key": spec_key(run.spec),
        "stages_built": len(run.stages) - len(run.missing),
        "stages": len(run.stages),
        "tokens_trained": tokens,
        "final_loss": final_loss,
        "heldout_phase": evaluated[-1].name if evaluated else None,
        "heldout_loss": heldout,
    }


def read_summary(directory: Path) -> JsonObject | None:
    """A report directory's summary.json, or None (missing, too large, not a JSON object)."""
    path = Path(directory) / SUMMARY
    try:
        if not path.is_file() or path.stat().st_size > SUMMARY_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sibling_summaries(out_dir: Path) -> list[tuple[Path, JsonObject | None]]:
    """The other run reports beside out_dir that hold a report (reports/<run>/run[-*]/report.html), each
    with its summary (None: written by a runlib before summaries, or unreadable)."""
    return [(d, read_summary(d)) for d in sibling_reports(out_dir, "run") if (d / "report.html").is_file()]


def _fmt(x: object, spec: str) -> str:
    value = number(x)
    return format(value, spec) if value is not None else "–"


def sibling_blocks(own: JsonObject, siblings: list[tuple[Path, JsonObject | None]]) -> list[Block]:
    """A table of this report and its siblings' (pure): spec file, link, stages, tokens, losses."""
    if not siblings:
        return []
    sources = list(json_object(own.get("heldout_loss")))
    for _, summary in siblings:
        sources += [s for s in json_object((summary or {}).get("heldout_loss")) if s not in sources]

    def row(label: Cell, summary: JsonObject | None, fallback_path: str | None) -> tuple[Cell, ...]:
        if summary is None:
            return (label, Code(fallback_path or "?"), "no summary (an older report)", *(["–"] * (3 + len(sources))))
        heldout = json_object(summary.get("heldout_loss"))
        built, total = summary.get("stages_built"), summary.get("stages")
        return (
            label,
            Code(str(summary.get("spec_path", fallback_path or "?"))),
            f"{built} of {total}" if number(built) is not None and number(total) is not None else "–",
            _fmt(summary.get("tokens_trained"), ",.0f"),
            _fmt(summary.get("final_loss"), ".4f"),
            str(summary.get("heldout_phase") or "–"),
            *(_fmt(heldout.get(s), ".4f") for s in sources),
        )

    own_path = own.get("spec_path")
    rows = [row("this report", own, own_path if isinstance(own_path, str) else None)]
    for directory, summary in siblings:
        link = Link(directory.name, f"../{directory.name}/report.html", f"../{directory.name}/report.md")
        rows.append(row(link, summary, recorded_spec_path(directory)))
    headers = ("Report", "Spec file", "Stages built", "Tokens trained", "Final loss", "Evaluated after")
    return [
        Heading(2, f"Other reports of run {own.get('run')}"),
        Para(
            f"Other spec files with the same run name (a variant beside its baseline) have their own run reports "
            f"beside this one; their numbers as each report last recorded them (its {SUMMARY}), held-out loss "
            "per source after the last evaluated phase."
        ),
        Table((*headers, *(f"held-out: {s}" for s in sources)), rows),
    ]


def write_summary(directory: Path, summary: JsonObject) -> None:
    """summary.json and the spec-path file into a report directory being written."""
    Path(directory, SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    Path(directory, SPEC_PATH_FILE).write_text(str(summary["spec_path"]) + "\n", encoding="utf-8")
