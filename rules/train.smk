rule train_phase:
    """Train one phase, starting from the previous phase's final state (accelerate launch)."""
    input:
        WF.inputs("train_phase"),
    output:
        **WF.outputs("train_phase"),
    log:
        WF.log("train_phase"),
    benchmark:
        WF.benchmark("train_phase")
    threads: WF.threads("train_phase")
    resources:
        **WF.resources("train_phase"),
    shell:
        WF.command("train_phase")
