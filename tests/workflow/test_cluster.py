"""`snakemake --profile cluster` against a real single-node Slurm (.ci/start-slurm starts one)."""

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from runlib.graph.build import build_graph
from runlib.spec import load_spec
from tests.conftest import ROOT
from tests.helpers import DATA_STAGES
from tests.workflow.conftest import TINY, snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("sinfo") is None, reason="no Slurm here: .ci/start-slurm installs and starts one"),
]


SHARDS = 8


def write_sharded_spec(path: Path) -> Path:
    """The tiny spec with one source, its documents curated in SHARDS shards (so SHARDS curate_shard,
    dedup_partition and tokenize jobs): the data half of a run at the width a cluster spreads."""
    spec = yaml.safe_load(TINY.read_text())
    docs = spec["data"]["sources"]["docs"]
    docs["input"] |= {"shards": SHARDS, "max_docs": 400}
    docs["curate"] |= {"dedup": {"exact": True, "minhash": {}}}
    spec["data"]["sources"] = {"docs": docs}
    spec["tokenizer"]["train_on"] = {"docs": 1.0}
    for phase in spec["phases"]:
        phase["mixture"] = {"docs": 1.0}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_data_stages_run_as_slurm_jobs(workdir):
    """Each data job of a source in 8 shards is its own sbatch job, and each job's benchmark file has its
    peak RSS; the memory each asked is what the plan says (runlib.curate.memory, the stage's floor)."""
    idle = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    assert idle.stdout.strip() in ("idle", "mixed"), f"Slurm is not up: {idle.stdout!r} {idle.stderr!r}"
    spec_path = write_sharded_spec(workdir / "sharded.yaml")
    graph = build_graph(load_spec(spec_path).spec)
    data_nodes = [n for stage in DATA_STAGES for n in graph.of(stage)]
    assert [len(graph.of(s)) for s in ("curate_shard", "dedup_partition", "tokenize")] == [SHARDS] * 3
    targets = [str(n.done_path) for n in graph.of("tokenize")]
    proc = snakemake(workdir, spec_path, "--profile", str(ROOT / "cluster"), "--jobs", "4", *targets)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    submitted = set(re.findall(r"SLURM jobid (\d+)", log))  # the jobs really went through sbatch, one each
    assert len(submitted) >= len(data_nodes), (len(submitted), len(data_nodes))
    assert all(n.manifest_path.exists() for n in data_nodes)
    for node in data_nodes:
        with open(workdir / "work" / "benchmarks" / node.stage / f"{node.key}.tsv", encoding="utf-8") as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        assert 0 < float(row["max_rss"]) < 2000, (node.instance, row["max_rss"])  # under what each asked
