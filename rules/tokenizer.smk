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
    threads: WF.threads("train_tokenizer")
    resources:
        **WF.resources("train_tokenizer"),
    shell:
        WF.command("train_tokenizer")
