rule soup_phase:
    """Average the weights of branches of the last phase into one model (phases[].soup)."""
    input:
        WF.inputs("soup_phase"),
    output:
        **WF.outputs("soup_phase"),
    log:
        WF.log("soup_phase"),
    benchmark:
        WF.benchmark("soup_phase")
    threads: WF.threads("soup_phase")
    resources:
        **WF.resources("soup_phase"),
    shell:
        WF.command("soup_phase")
