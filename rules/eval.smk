rule eval_phase:
    """Evaluate a phase's model: held-out loss, perplexity and bits per byte per source, and the tasks."""
    input:
        WF.inputs("eval_phase"),
    output:
        **WF.outputs("eval_phase"),
    log:
        WF.log("eval_phase"),
    benchmark:
        WF.benchmark("eval_phase")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    shell:
        WF.command("eval_phase")
