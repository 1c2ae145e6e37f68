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
    threads: WF.threads("tokenize")
    resources:
        **WF.resources("tokenize"),
    shell:
        WF.command("tokenize")
