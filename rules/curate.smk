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
    """Join a source's shards: decide the duplicates across shards and the held-out documents (no text)."""
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


rule train_classifier:
    """Train a source's fastText quality classifier: anchors' documents against its own."""
    input:
        WF.inputs("train_classifier"),
    output:
        **WF.outputs("train_classifier"),
    log:
        WF.log("train_classifier"),
    benchmark:
        WF.benchmark("train_classifier")
    threads: WF.threads("train_classifier")
    resources:
        **WF.resources("train_classifier"),
    shell:
        WF.command("train_classifier")


rule train_ngram_lm:
    """Train an n-gram language model on reference sources."""
    input:
        WF.inputs("train_ngram_lm"),
    output:
        **WF.outputs("train_ngram_lm"),
    log:
        WF.log("train_ngram_lm"),
    benchmark:
        WF.benchmark("train_ngram_lm")
    threads: WF.threads("train_ngram_lm")
    resources:
        **WF.resources("train_ngram_lm"),
    shell:
        WF.command("train_ngram_lm")


rule score_quality:
    """Score one part of a source's curated documents by its classifier and perplexity."""
    input:
        WF.inputs("score_quality"),
    output:
        **WF.outputs("score_quality"),
    log:
        WF.log("score_quality"),
    benchmark:
        WF.benchmark("score_quality")
    threads: WF.threads("score_quality")
    resources:
        **WF.resources("score_quality"),
    shell:
        WF.command("score_quality")


rule filter_quality:
    """Keep a source's curated documents by their scores, the cut set over the whole source."""
    input:
        WF.inputs("filter_quality"),
    output:
        **WF.outputs("filter_quality"),
    log:
        WF.log("filter_quality"),
    benchmark:
        WF.benchmark("filter_quality")
    threads: WF.threads("filter_quality")
    resources:
        **WF.resources("filter_quality"),
    shell:
        WF.command("filter_quality")


rule dedup_partition:
    """Find one slice of a source's exact duplicates and near-duplicate candidates across its shards."""
    input:
        WF.inputs("dedup_partition"),
    output:
        **WF.outputs("dedup_partition"),
    log:
        WF.log("dedup_partition"),
    benchmark:
        WF.benchmark("dedup_partition")
    threads: WF.threads("dedup_partition")
    resources:
        **WF.resources("dedup_partition"),
    shell:
        WF.command("dedup_partition")


rule filter_shard:
    """Write one curate shard's documents the source trains on and holds out: the join's and the quality filters' verdicts."""
    input:
        WF.inputs("filter_shard"),
    output:
        **WF.outputs("filter_shard"),
    log:
        WF.log("filter_shard"),
    benchmark:
        WF.benchmark("filter_shard")
    threads: WF.threads("filter_shard")
    resources:
        **WF.resources("filter_shard"),
    shell:
        WF.command("filter_shard")
