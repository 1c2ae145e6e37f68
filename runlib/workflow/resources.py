"""What each stage job asks of Snakemake and Slurm: threads, memory and a time limit. A stage kind's fixed
share comes from its registry entry (runlib.graph.registry.Resources); a training phase's from its phase's
plan (one rule serves every phase, so each value is a function of the job's wildcards): nodes, a task per
node (one `accelerate launch` each), a core per process, host memory and a time limit from the plan's
estimates with a margin (runlib.train.launch.slurm_resources says how)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runlib.curate.memory import SIZED_STAGES, data_job_mem_mb, join_mem_mb, quality_cut_mem_mb
from runlib.graph.build import StageGraph
from runlib.graph.registry import stage_kind
from runlib.graph.scale import TIMED_STAGES, curated_estimate, job_runtime_min, job_seconds
from runlib.graph.train_plans import RunId, node_run, train_plans
from runlib.plan import Plan
from runlib.plan.derive import PhasePlan
from runlib.spec import RunSpec
from runlib.store.node import StageNode
from runlib.train.config import TrainPhaseConfig
from runlib.train.launch import phase_job_resources
from runlib.train.phase import processes_per_node

Wildcards = Any  # snakemake.io.Wildcards: its attributes are the rule's wildcards
COUNTED_STAGES = ("curate_source", "filter_quality")
"""The data stages whose memory is set when the job starts, from its inputs' counts (runlib.curate.memory)."""


def _counts(node: StageNode) -> dict[str, Any]:
    """The counts of a built input's stats.json ({} when it cannot be read: the registry share applies)."""
    try:
        counts = json.loads((node.dir / "stats.json").read_text(encoding="utf-8")).get("counts")
    except (OSError, ValueError, AttributeError):
        return {}
    return counts if isinstance(counts, dict) else {}


class JobResources:
    def __init__(self, spec: RunSpec, graph: StageGraph):
        self.spec, self.graph = spec, graph
        self._plans: dict[RunId, Plan] | None = None
        self._train: dict[str, dict[str, int | str]] = {}

    def phase_plan(self, node: StageNode) -> PhasePlan:
        """The plan of a train_phase node's phase: the spec's, its ladder rung's or its branch's."""
        if self._plans is None:
            self._plans = train_plans(self.spec)
        return self._plans[node_run(node)].phases[node.config_as(TrainPhaseConfig).phase_index]

    def train_processes(self) -> int:
        """Processes a training job starts on its node (the most of any phase; RUNLIB_PROCESSES overrides)."""
        return max((processes_per_node(n.config_as(TrainPhaseConfig)) for n in self.graph.of("train_phase")), default=1)

    def threads(self, stage: str) -> int:
        fixed = stage_kind(stage).resources
        return self.train_processes() if fixed is None else fixed.threads

    def resources(self, stage: str) -> dict[str, int | Callable[..., int | str]]:
        """The rule's `resources:` (mem_mb, runtime, and for training the Slurm layout of the phase); a data
        job's memory from the bytes it reads (data_job_mem_mb) or from its inputs' counts (counted_mem_mb)."""
        fixed = stage_kind(stage).resources
        if fixed is not None:
            out: dict[str, int | Callable[..., int | str]] = dict(fixed.slurm())
            if stage in TIMED_STAGES:
                out["runtime"] = lambda wildcards: self.data_runtime_min(stage, wildcards.key)
            if stage in SIZED_STAGES:  # dedup_partition's once its shards are built: what they kept
                out["mem_mb"] = lambda wildcards, input: self.data_mem_mb(stage, wildcards.key)
            if stage in COUNTED_STAGES:  # a callable that takes `input` runs once the inputs exist
                out["mem_mb"] = lambda wildcards, input: self.counted_mem_mb(stage, wildcards.key)
            return out
        phases = self.graph.of(stage)
        names = self._phase_resources(phases[0].key).keys() if phases else ()
        return {name: self._value(name) for name in names}

    def data_mem_mb(self, stage: str, key: str) -> int:
        """A curate_shard or dedup_partition job's memory: its registry share, or more for a large shard."""
        node = self.graph.by_key(stage, key)
        fixed = stage_kind(stage).resources
        assert fixed is not None
        fmt = self.graph.input_format(node) if stage == "curate_shard" else "jsonl"
        return max(fixed.mem_mb, data_job_mem_mb(stage, self.graph.bytes_read(node), fmt))

    def counted_mem_mb(self, stage: str, key: str) -> int:
        """A curate_source or filter_quality job's memory from its built inputs' counts: the largest shard's
        documents and the duplicates and pairs the partitions found, or the documents the join kept; at least
        its registry share."""
        node = self.graph.by_key(stage, key)
        fixed = stage_kind(stage).resources
        assert fixed is not None
        inputs = self.graph.input_nodes(node)
        if stage == "curate_source":
            shard_docs = [int(_counts(n).get("docs", 0)) for r, n in inputs.items() if r.startswith("shard")]
            found = [_counts(n) for r, n in inputs.items() if r.startswith("partition")]
            duplicates = sum(int(c.get("exact_duplicates", 0)) + int(c.get("verified_pairs", 0)) for c in found)
            model = join_mem_mb(max(shard_docs, default=0), duplicates)
        else:
            joined = _counts(inputs["source"])
            model = quality_cut_mem_mb(int(joined.get("docs_train", 0)) + int(joined.get("docs_heldout", 0)))
        return max(fixed.mem_mb, model)

    def data_runtime_min(self, stage: str, key: str) -> int:
        """A data job's time limit from its work at this machine's measured rates (runlib.graph.scale): a shard's
        input, a slice of the source's, or what curation is expected to keep (the declared tokens' bytes)."""
        node = self.graph.by_key(stage, key)
        name = node.params["source"]
        source = self.spec.data.sources[name]
        shards = [n for n in self.graph.of("curate_shard") if n.params["source"] == name]
        if stage in SIZED_STAGES:
            work = self.graph.bytes_read(node)
        else:
            total = sum(self.graph.bytes_read(n) for n in shards)
            one_shard = stage in ("filter_shard", "tokenize")  # a job per shard: its share of the curated bytes
            work = curated_estimate(self.spec, name, total) // (len(shards) if one_shard else 1)
        fixed = stage_kind(stage).resources
        assert fixed is not None
        seconds = job_seconds(stage, work, source.input.format, source.input.extract)
        return job_runtime_min(seconds, fixed.runtime_min)

    def _phase_resources(self, key: str) -> dict[str, int | str]:
        if key not in self._train:
            node = self.graph.by_key("train_phase", key)
            config = node.config_as(TrainPhaseConfig)
            self._train[key] = phase_job_resources(
                config.parallel, config.accelerator, processes_per_node(config), self.phase_plan(node)
            )
        return self._train[key]

    def _value(self, name: str) -> Callable[[Wildcards], int | str]:
        return lambda wildcards: self._phase_resources(wildcards.key)[name]
