rule fit_ladder:
    """Fit L(N, D) = E + A/N^alpha + B/D^beta to the ladder's rungs; predict the spec's held-out loss."""
    input:
        WF.inputs("fit_ladder"),
    output:
        **WF.outputs("fit_ladder"),
    log:
        WF.log("fit_ladder"),
    benchmark:
        WF.benchmark("fit_ladder")
    threads: WF.threads("fit_ladder")
    resources:
        **WF.resources("fit_ladder"),
    shell:
        WF.command("fit_ladder")
