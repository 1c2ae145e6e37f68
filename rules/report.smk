rule report:
    """The run report: loss per source against tokens, LR, eval tables, wall time per stage."""
    input:
        WF.report_inputs(),
    output:
        **WF.report(),
    log:
        WF.log("report", "report"),
    shell:
        '"$RUNLIB_PYTHON" -m runlib report --track > {log:q} 2>&1'
