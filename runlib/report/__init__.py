"""The run report: what a run of a spec produced, read from its artifacts.

runlib.report.run_report writes it (the entry point of `runlib report` and the workflow's report rule);
runlib.report.collect reads the run, runlib.report.document and runlib.report.plots make its content.
"""

from runlib.report.collect import collect_run
from runlib.report.run_report import default_run_report_dir, main_report, write_report_of, write_run_report

__all__ = ["collect_run", "default_run_report_dir", "main_report", "write_report_of", "write_run_report"]
