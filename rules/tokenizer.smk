rule train_tokenizer:
    """Train the byte-level BPE tokenizer on the spec's train_on mixture."""
    input:
        WF.inputs("train_tokenizer"),
    output:
        **WF.outputs("train_tokenizer"),
    log:
        WF.log("train_tokenizer"),
    benchmark:
        WF.benchmark("train_tokenizer")
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
    shell:
        WF.command("train_tokenizer")
