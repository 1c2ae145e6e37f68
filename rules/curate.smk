rule curate_shard:
    """Curate one shard of one source: normalize, filter, dedup within the shard."""
    output:
        **WF.outputs("curate_shard"),
    log:
        WF.log("curate_shard"),
    benchmark:
        WF.benchmark("curate_shard")
    threads: WF.threads("curate_shard")
    resources:
        **WF.resources("curate_shard"),
    shell:
        WF.command("curate_shard")


rule curate_source:
    """Join a source's shards: dedup across shards, split off the held-out documents."""
    input:
        WF.inputs("curate_source"),
    output:
        **WF.outputs("curate_source"),
    log:
        WF.log("curate_source"),
    benchmark:
        WF.benchmark("curate_source")
    threads: WF.threads("curate_source")
    resources:
        **WF.resources("curate_source"),
    shell:
        WF.command("curate_source")
