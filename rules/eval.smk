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
    threads: WF.threads("eval_phase")
    resources:
        **WF.resources("eval_phase"),
    shell:
        WF.command("eval_phase")
