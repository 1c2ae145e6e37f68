rule curate_shard:
    """Curate one shard of one source: normalize, filter, dedup within the shard."""
    output:
        **WF.outputs("curate_shard"),
    log:
        WF.log("curate_shard"),
    benchmark:
        WF.benchmark("curate_shard")
    resources:
        mem_mb=2000,
        runtime=30,
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
    resources:
        mem_mb=2000,
        runtime=30,
    shell:
        WF.command("curate_source")
