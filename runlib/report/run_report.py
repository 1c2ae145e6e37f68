"""The run report: what a run of a spec produced, read from its artifacts, as markdown, HTML and plots.

`runlib report SPEC` (main_report) and the workflow's report rule (rules/report.smk) write it. Its parts:
runlib.report.collect reads the built artifacts (manifests, metrics.jsonl, spikes.json, eval.json),
runlib.report.document turns them into the blocks of the audit report (runlib.audit.render.report), rendered
to both report.md and report.html, and runlib.report.plots draws the plots with the audit plots' helpers.

The directory (by default reports/<run>/run for the spec file named after its run, reports/<run>/run-<file
stem> for a variant: runlib.util.report_dirs) is built in a temporary sibling and swapped into place only
when complete; it lists the run reports of other spec files of the same run name beside it
(runlib.report.siblings). A partial run gets a report too; it names the stages not built yet.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from runlib.audit.render.report import Block, Heading, render_html, render_markdown
from runlib.report import siblings
from runlib.report.collect import RunData, collect_run
from runlib.report.document import build_blocks
from runlib.report.plots import write_plots
from runlib.spec.models import RunSpec
from runlib.util.atomic import replace_dir
from runlib.util.report_dirs import report_dir

__all__ = ["HTML", "MARKDOWN", "default_run_report_dir", "main_report", "write_report_of", "write_run_report"]

MARKDOWN = "report.md"
HTML = "report.html"


def default_run_report_dir(spec: RunSpec, spec_path: str | Path | None = None) -> Path:
    """reports/<run>/run for the run's own spec file, reports/<run>/run-<file stem> for another file of the
    same run name (a variant): runlib.util.report_dirs.report_dir, the audit report's rule."""
    return report_dir(spec.name, spec_path, "run")


def write_run_report(spec_path: str, out_dir: Path | None = None) -> Path:
    """Write the run report of the spec at spec_path (report.md, report.html, loss/lr/throughput PNGs)
    into out_dir (default: default_run_report_dir); returns out_dir.

    An existing out_dir is replaced only once the new report is complete."""
    return write_report_of(collect_run(spec_path), out_dir)


def write_report_of(run: RunData, out_dir: Path | None = None) -> Path:
    """write_run_report for a run already collected; the reports of other spec files of the same run name
    beside it are listed with links (runlib.report.siblings)."""
    out_dir = Path(out_dir) if out_dir is not None else default_run_report_dir(run.spec, run.spec_path)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private (0700); a report is meant to be shared
        write_plots(run, tmp)
        summary = siblings.run_summary(run)
        blocks = build_blocks(run)
        blocks[_after_header(blocks) : _after_header(blocks)] = siblings.sibling_blocks(
            summary, siblings.sibling_summaries(out_dir)
        )
        siblings.write_summary(tmp, summary)
        (tmp / MARKDOWN).write_text(render_markdown(blocks), encoding="utf-8")
        (tmp / HTML).write_text(render_html(blocks, f"Run report: {run.spec.name}"), encoding="utf-8")
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _after_header(blocks: list[Block]) -> int:
    """The index of the first second-level heading (the sections after the header)."""
    return next((i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == 2), len(blocks))


def main_report(spec_path: str, out: str | Path | None = None, track: bool = False) -> int:
    """`runlib report SPEC [--out DIR] [--track]`: write the run report and print where; with track,
    also log it as artifacts of the spec's MLflow parent run (under report/). Exit status 0, also for
    a run not finished yet (stderr says how many stages are missing)."""
    run = collect_run(spec_path)
    path = write_report_of(run, Path(out) if out else None)
    print(f"run report: {path / HTML}")
    if run.missing:
        print(
            f"runlib report: the run is incomplete: {len(run.missing)} of {len(run.stages)} stages not built",
            file=sys.stderr,
        )
    if track:
        from runlib.track.mlflow_track import log_report  # mlflow: imported only when tracking

        log_report(run.spec, spec_path, path)
    return 0
