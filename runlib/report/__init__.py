"""The run report (runlib.report.run_report): what a run of a spec produced, read from its artifacts."""

from runlib.report.run_report import collect_run, default_run_report_dir, main_report, write_report_of, write_run_report

__all__ = ["collect_run", "default_run_report_dir", "main_report", "write_report_of", "write_run_report"]
