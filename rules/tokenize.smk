rule tokenize:
    """Tokenize one curated source into token shards, train and held-out apart."""
    input:
        WF.inputs("tokenize"),
    output:
        **WF.outputs("tokenize"),
    log:
        WF.log("tokenize"),
    benchmark:
        WF.benchmark("tokenize")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    shell:
        WF.command("tokenize")
