"""The audit report: a directory with audit.md and/or audit.html and the plots, written atomically.

The numbers come from the JSON view (`json_view.audit_view`, the typed document `to_dict` serializes), so the
report never disagrees with the contract other tools read; the plots come from the Plan. The content is built once as a list of
blocks (headings, paragraphs, tables, figures) and rendered to either format, so markdown and HTML
always say the same thing.

The directory is built in a temporary sibling (`.tmp-<name>-<random>`) and swapped into place only
when complete: a crash or a failing plot leaves the previous report (or nothing), never half of one.

The run report (runlib.report) builds its document from the same parts, through the public names in
__all__: the blocks (Heading, Para, Table with Cell values Code and Link, Image), the two renderers, the
sections derived_blocks and findings_blocks.
"""

from __future__ import annotations

import html
import math
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runlib.audit import AuditResult
from runlib.audit.render import plots
from runlib.audit.render.json_view import AuditView, DerivedView, FindingView, audit_view, days_text, hours_text
from runlib.spec.units import format_count
from runlib.util.atomic import replace_dir
from runlib.util.report_dirs import SPEC_PATH_FILE, report_dir, spec_path_text

__all__ = [
    "CSS",
    "FILE_NAMES",
    "Block",
    "Cell",
    "Code",
    "Format",
    "Heading",
    "Image",
    "Link",
    "Para",
    "Table",
    "build_blocks",
    "default_report_dir",
    "derived_blocks",
    "findings_blocks",
    "render_html",
    "render_markdown",
    "sentence_case",
    "write_report",
]

Format = Literal["markdown", "html"]
FILE_NAMES: dict[str, str] = {"markdown": "audit.md", "html": "audit.html"}
GIB = 2**30


def default_report_dir(result: AuditResult, root: Path = Path("reports")) -> Path:
    """Where `runlib audit SPEC --format html|markdown` writes, beside the run report (reports/<run>/run):
    runlib.util.report_dirs.report_dir of kind "audit" (reports/<run>/audit for the run's own spec file,
    reports/<run>/audit-<file stem> for another file; the README and the Snakefile name
    reports/demo/audit/audit.html), so no audit ever overwrites the report of a different spec file."""
    return report_dir(result.spec.name, result.file if result.file != "<spec>" else None, "audit", root)


def _spec_path(result: AuditResult) -> str | None:
    return spec_path_text(result.file) if result.file != "<spec>" else None


def write_report(result: AuditResult, out_dir: Path, fmt: Format = "markdown") -> Path:
    """Write the report directory `out_dir` (plots + audit.md or audit.html); returns out_dir.

    An existing out_dir is replaced only once the new report is complete. The formats coexist: when
    out_dir holds the other format's document, it is written again from this audit too (both then
    agree with the new plots), never dropped.
    """
    if fmt not in FILE_NAMES:
        raise ValueError(f"unknown report format {fmt!r}: expected one of {', '.join(FILE_NAMES)}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    formats = [f for f in FILE_NAMES if f == fmt or (out_dir / FILE_NAMES[f]).is_file()]
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private (0700); a report is meant to be shared
        plots.write_plots(result.plan, tmp)
        blocks = build_blocks(result)
        for f in formats:
            text = render_markdown(blocks) if f == "markdown" else render_html(blocks, f"Audit: {result.spec.name}")
            (tmp / FILE_NAMES[f]).write_text(text, encoding="utf-8")
        spec_path = _spec_path(result)
        if spec_path:
            (tmp / SPEC_PATH_FILE).write_text(spec_path + "\n", encoding="utf-8")
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


# --- content -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heading:
    """A heading: level 1 is the document's title (h1, '#')."""

    level: int
    text: str


@dataclass(frozen=True)
class Para:
    """A paragraph of plain text (escaped in both formats, whitespace folded)."""

    text: str


@dataclass(frozen=True)
class Code:
    """A table cell of literal text (codes, spec paths, keys): monospace, never reflowed."""

    text: str


@dataclass(frozen=True)
class Link:
    """A table cell that links to another file: href in the HTML, md_href (default href) in the markdown."""

    text: str
    href: str
    md_href: str | None = None


Cell = str | Code | Link


@dataclass(frozen=True)
class Table:
    """A table: a header row, then rows of cells (one per header)."""

    headers: tuple[str, ...]
    rows: Sequence[tuple[Cell, ...]]


@dataclass(frozen=True)
class Image:
    """A figure: a PNG beside the document (by file name), with a title above and a caption below."""

    file: str
    title: str
    caption: str


Block = Heading | Para | Table | Image


def _count(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{format_count(x)}{unit}"


def _float(x: float | None, fmt: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, fmt)


def _gib(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x / GIB:.1f} GiB"


def _epochs(e: float | None, available: int | None) -> str:
    if available is None:
        return "unknown"
    if e is None:
        return "∞ (none available)"
    return f"{e:.2f}"


def sentence_case(text: str) -> str:
    """First letter upper case, the rest as written ('core-hours' -> 'Core-hours', 'GPU-hours' stays)."""
    return text[:1].upper() + text[1:]


def _location(f: FindingView) -> Code:
    return Code(f"{f.path}:{f.line}" if f.line else f.path or "(spec)")


def build_blocks(result: AuditResult) -> list[Block]:
    """The report's content, format-neutral."""
    view = audit_view(result)
    assert view.derived is not None  # an audited spec has a plan: only a load failure has none
    return [
        *_header(result, view),
        *derived_blocks(result, view.derived),
        *_phases(view.derived),
        *_sources(view.derived),
        *findings_blocks(view),
        *_ignored(view),
        *_figures(),
    ]


def _header(result: AuditResult, view: AuditView) -> list[Block]:
    s = view.summary
    strict = result.exit_code(strict=True)
    status = f"exit status {view.exit_code}" + (f" ({strict} with --strict)" if strict != view.exit_code else "")
    verdict = "FAIL" if view.exit_code else "PASS"
    return [
        Heading(1, f"Audit report: {view.name}"),
        Para(f"Spec file: {view.file} · runlib {view.runlib_version}"),
        Para(
            f"{verdict}: {s.error} errors, {s.warning} warnings, {s.info} info; {len(view.ignored)} silenced; {status}."
        ),
    ]


def derived_blocks(result: AuditResult, dv: DerivedView) -> list[Block]:
    """The "Derived quantities" section: a heading, then a two-column table (quantity, value) of the plan's
    headline numbers from the JSON view's `derived` (json_view.audit_view(result).derived), with the spec's
    budget beside the device-hours and days; the run report shows the table under its audit section."""
    p, fl, refs, acc, sched = dv.params, dv.flops, dv.references, dv.accelerator, dv.schedule
    budget = result.spec.budget
    batch = dv.phases[0].tokens_per_step if dv.phases else None
    tpp = refs.tokens_per_param
    rows: list[tuple[Cell, ...]] = [
        (
            "Parameters",
            f"{_count(p.total)} total; {_count(p.embedding)} embedding, {_count(p.non_embedding)} non-embedding"
            + (f"; {_count(p.active)} active per token" if p.active != p.total else "")
            + (f"; {_count(p.mtp)} more in the MTP modules" if p.mtp else ""),
        ),
        ("Training tokens", f"{_count(dv.tokens_total)} ({dv.tokens_total:,})"),
        ("Optimizer steps", f"{dv.steps_total:,}"),
        (
            "Training FLOPs",
            f"{_float(fl.total)} ({fl.convention}); 6ND {_float(fl.kaplan_6nd)}, causal {_float(fl.megatron_causal)}",
        ),
        (
            sentence_case(dv.device_hours_unit),  # "Core-hours" on a CPU
            hours_text(dv.gpu_hours) + (f" (budget {budget.gpu_hours:,})" if budget.gpu_hours is not None else ""),
        ),
        (
            "Wall-clock days",
            days_text(dv.wall_days) + (f" (budget {budget.days:g})" if budget.days is not None else ""),
        ),
        ("Devices", f"{dv.devices} × {acc.key}, {acc.memory_text}, MFU {acc.mfu:g}"),
        ("Data-parallel degree", str(dv.data_parallel)),
        ("Tokens per parameter", f"{_float(tpp, '.1f')} (Chinchilla ≈ {refs.chinchilla_tokens_per_param:g})"),
        (
            "Compute-optimal size (Besiroglu refit)",
            f"{_count(refs.optimal_params)} params, {_count(refs.optimal_tokens)} tokens",
        ),
        (
            "Compute-optimal batch (DeepSeek)",
            f"{_count(refs.optimal_batch_tokens)} tokens; this run {_count(batch)}",
        ),
        ("Compute-optimal peak LR (DeepSeek)", f"{_float(refs.optimal_lr)}; this run {_float(sched.peak_lr)}"),
        ("Predicted loss (refit)", _float(refs.predicted_loss, ".3f") + f" ({refs.predicted_loss_note})"),
        (
            "LR schedule",
            f"{sched.kind}, peak {_float(sched.peak_lr)}, floor {_float(sched.floor_lr)}, warmup {_count(sched.warmup_tokens)} tokens"
            + "".join(f"; {ph.name} ×{ph.lr_scale:g}" for ph in dv.phases if ph.lr_scale != 1.0),
        ),
    ]
    return [Heading(2, "Derived quantities"), Table(("Quantity", "Value"), rows)]


def _phases(dv: DerivedView) -> list[Block]:
    device = dv.accelerator.memory_gib * GIB
    rows: list[tuple[Cell, ...]] = []
    for ph in dv.phases:
        per_step = list(dict.fromkeys(g.tokens_per_step for g in ph.segments))  # a ramp inside the phase: a -> b
        mem = ph.memory_bytes_per_device
        share = f" ({mem / device:.0%})" if mem is not None and device else ""
        rows.append(
            (
                ph.name,
                ph.kind,
                f"{_count(ph.start_tokens)} – {_count(ph.end_tokens)}",
                f"{ph.steps:,}",
                " → ".join(_count(t) for t in per_step),
                str(ph.seq_len),
                f"{ph.rope_theta:g}",
                f"{_float(ph.lr_start)} → {_float(ph.lr_end)}",
                _gib(mem) + share,
            )
        )
    headers = ("Phase", "Kind", "Tokens", "Steps", "Tokens/step", "seq_len", "rope_theta", "LR", "Memory/device")
    if not rows:
        return [Heading(2, "Phases"), Para("No phases.")]
    return [Heading(2, "Phases"), Table(headers, rows)]


def _sources(dv: DerivedView) -> list[Block]:
    rows: list[tuple[Cell, ...]] = [
        (
            s.name,
            _count(s.tokens_available) if s.tokens_available is not None else "unknown",
            _count(s.tokens_used),
            _epochs(s.epochs, s.tokens_available),
        )
        for s in dv.sources
    ]
    if not rows:
        return [Heading(2, "Sources"), Para("No sources.")]
    return [Heading(2, "Sources"), Table(("Source", "Available tokens", "Used tokens", "Epochs"), rows)]


def findings_blocks(view: AuditView) -> list[Block]:
    """The "Findings" section: a heading, then per severity that has any a sub-heading ("Errors (2)") and a
    table (code, where, message, fix); "No findings." without any. The run report shows it one level down."""
    blocks: list[Block] = [Heading(2, "Findings")]
    if not view.findings:
        return [*blocks, Para("No findings.")]
    for severity, title in (("error", "Errors"), ("warning", "Warnings"), ("info", "Info")):
        group = [f for f in view.findings if f.severity == severity]
        if group:
            rows: list[tuple[Cell, ...]] = [(Code(f.code), _location(f), f.message, f.fix) for f in group]
            blocks += [Heading(3, f"{title} ({len(group)})"), Table(("Code", "Where", "Message", "Fix"), rows)]
    return blocks


def _ignored(view: AuditView) -> list[Block]:
    if not view.ignored:
        return [Heading(2, "Silenced findings"), Para("None: audit.ignore silenced no finding.")]
    rows: list[tuple[Cell, ...]] = [(Code(f.code), f.severity, _location(f), f.message, f.reason) for f in view.ignored]
    return [Heading(2, "Silenced findings"), Table(("Code", "Severity", "Where", "Message", "Reason"), rows)]


def _figures() -> list[Block]:
    return [Heading(2, "Plots"), *(Image(file, title, caption) for file, title, caption in plots.PLOTS)]


# --- renderers -----------------------------------------------------------------------------------


def _md_text(text: str) -> str:
    """Plain markdown text: one line, no live HTML, no table-breaking pipes."""
    text = " ".join(str(text).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _md_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        href = (
            (cell.md_href or cell.href).replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("|", "%7C")
        )
        return f"[{_md_text(cell.text).replace('[', '&#91;').replace(']', '&#93;')}]({href})"
    if isinstance(cell, Code):
        text = " ".join(cell.text.split()).replace("|", "\\|")
        fence = "``" if "`" in text else "`"
        return f"{fence}{text}{fence}"
    return _md_text(cell)


def render_markdown(blocks: list[Block]) -> str:
    """The blocks as one markdown document (GitHub tables; text escaped so none of it is live HTML)."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + _md_text(b.text), ""]
        elif isinstance(b, Para):
            out += [_md_text(b.text), ""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_text(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---" for _ in b.headers) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Image):
            out += [
                f"### {_md_text(b.title)}",
                "",
                f"![{_md_text(b.title)}]({b.file})",
                "",
                f"*{_md_text(b.caption)}*",
                "",
            ]
    return "\n".join(out).rstrip() + "\n"


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .2em; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #eee; }
h3 { font-size: 1.1em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
tr:nth-child(even) td { background: #fafafa; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .95em; background: #f2f2f2;
       padding: 0 .2em; border-radius: 3px; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; }
""".strip()


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href, quote=True)}">{html.escape(cell.text)}</a>'
    if isinstance(cell, Code):
        return f"<code>{html.escape(cell.text)}</code>"
    return html.escape(str(cell))


def render_html(blocks: list[Block], title: str) -> str:
    """A self-contained page: inline CSS, no script, images by relative file name."""
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            body.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            rows = "\n".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            body.append(f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>")
        elif isinstance(b, Image):
            body.append(
                f"<figure>\n<h3>{html.escape(b.title)}</h3>\n"
                f'<img src="{html.escape(b.file, quote=True)}" alt="{html.escape(b.title, quote=True)}">\n'
                f"<figcaption>{html.escape(b.caption)}</figcaption>\n</figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
