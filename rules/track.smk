import os


def track_retry(wildcards):
    """The retry marker of a track that failed (runlib.track.resync.retry_marker): newer than the stamp,
    so Snakemake runs the track job again; none after a track that succeeded."""
    marker = WF.tracked(wildcards.key) + ".retry"
    return [marker] if os.path.exists(marker) else []


rule track:
    """Record every built artifact of the spec in MLflow (one process for many manifests), after each
    training phase and its evaluation: stage jobs never import mlflow. A tracking failure is a warning."""
    input:
        WF.track_inputs(),
        track_retry,
    output:
        WF.tracked(),
    log:
        WF.track_log(),
    localrule: True
    # no core: tracking never holds one that the next training phase waits for (with --cores N a
    # phase needs them all; a track job holding one delayed the next phase by 99 s)
    threads: 0
    shell:
        '"$RUNLIB_PYTHON" -m runlib track --resync --stamp {output:q} > {log:q} 2>&1'
