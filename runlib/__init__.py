"""runlib: audit a pre-training run spec, then run it as a Snakemake DAG."""

__version__ = "0.1.0"
