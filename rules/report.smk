rule report:
    """The run report: loss per source against tokens, LR, eval tables, wall time per stage."""
    input:
        WF.report_inputs(),
    output:
        **WF.report(),
    params:
        out=WF.report_dir(),
    log:
        WF.log("report", "report"),
    shell:
        '"$RUNLIB_PYTHON" -m runlib report --track --out {params.out:q} > {log:q} 2>&1'
