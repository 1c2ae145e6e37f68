"""MLflow tracking (runlib.track.mlflow_track). The only package that imports mlflow; stage commands import it."""
