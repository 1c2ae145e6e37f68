"""Views of an audit result: text (terminal), json (the contract for tools), markdown and html (reports).

Public API (each module's __all__; a name with a leading underscore is private to this package, and
tests/audit/test_render_api.py fails on any import of one from outside it):

  json_view  the contract of `runlib audit --format json` as typed dataclasses: audit_view(result) -> AuditView
             (derived: DerivedView, findings: FindingView, ...), to_dict and render (its JSON), derived(plan)
             (the plan's part), load_failure_view / render_load_failure (a spec that does not load),
             SHOWN_AS / NOT_SHOWN / uncovered_plan_fields (which plan field is shown where); the number
             formats every view shares (defined in numbers): hours_text, days_text, device_hours_unit.
  text       render(result): the terminal view.
  report     the audit report directory (write_report, default_report_dir) and the document parts the run
             report (runlib.report) builds on: the blocks Heading, Para, Table (cells: str, Code, Link) and
             Image; render_markdown and render_html; the sections derived_blocks and findings_blocks;
             sentence_case.
  plots      the audit's plots from the Plan (write_plots, plot_*, draw_*, lr_curve, memory_table) and the
             drawing helpers the run report's plots share: new_figure, save_png, mark_empty, count_axis,
             colour_map, phase_lines, phase_bounds_tokens (matplotlib is imported only when a plot is drawn).
"""
