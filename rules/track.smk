rule track:
    """Record every built artifact of the spec in MLflow (one process for many manifests), after each
    training phase and its evaluation: stage jobs never import mlflow. A tracking failure is a warning."""
    input:
        WF.track_inputs(),
    output:
        WF.tracked(),
    log:
        WF.track_log(),
    localrule: True
    shell:
        '"$RUNLIB_PYTHON" -m runlib track --resync --stamp {output:q} > {log:q} 2>&1'
