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
    threads: WF.train_processes()
    resources:
        **WF.train_resources(),
    shell:
        WF.command("train_phase")
