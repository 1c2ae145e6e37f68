"""The stage registry: a stage kind is one record, which everything that knows stage kinds reads.

    name        rule name = `runlib <name with dashes>` subcommand = artifact folder = function name
    version     the code version in every key of the kind (bump it when its code changes what it writes)
    config      its config type (runlib.store.stageconfig.StageConfig): all one instance reads
    nodes       how its instances are built from the spec (runlib.graph.nodes), in registry order
    run         builds one instance's artifact into a folder: (graph, node, out) -> counts for the manifest
    resources   a job's threads, memory and time limit on Slurm (None: per job, from the plan's estimate)
    tracked     whether the track step records its artifacts in MLflow; tracked_files: what it attaches
    help        one line: the CLI's help and the rule's docstring

Readers: keys (runlib.graph.nodes: version), the graph (runlib.graph.build: nodes, in this order), the
stage runner (runlib.graph.stages: run), the CLI (one subcommand per entry), the Snakemake rules
(rules/<stage>.smk through runlib.workflow.snake: resources and threads), tracking (runlib.track.resync)
and the run report (its stage table, in registry order). As Marin's ExecutorStep (marin/execution/executor.py) or torchtitan's TrainSpec
(torchtitan/protocols/train_spec.py) are: adding a stage kind is its own package's code and one entry here.

The run functions import their stage's package when called: stage code pulls torch, tokenizers or
pyarrow, and `runlib plan` / the Snakefile's gate read this registry without running any stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runlib.curate.config import (
    CurateShardConfig,
    CurateSourceConfig,
    DedupPartitionConfig,
    FilterQualityConfig,
    FilterShardConfig,
    ScoreQualityConfig,
    TrainClassifierConfig,
    TrainNgramLmConfig,
)
from runlib.data.config import TokenizeConfig
from runlib.errors import UserError
from runlib.eval.config import EvalConfig
from runlib.graph import nodes
from runlib.ladder.config import FitLadderConfig
from runlib.store.node import StageNode
from runlib.store.stageconfig import StageConfig
from runlib.tokenizer.config import TokenizerConfig
from runlib.train.config import TrainPhaseConfig
from runlib.train.soup_config import SoupConfig

if TYPE_CHECKING:
    from runlib.graph.build import StageGraph

Runner = Callable[["StageGraph", StageNode, Path], dict[str, Any]]


@dataclass(frozen=True)
class Resources:
    """A stage job's share of a machine (Snakemake threads; Slurm mem_mb and runtime in minutes)."""

    threads: int = 1
    mem_mb: int = 2000
    runtime_min: int = 30

    def slurm(self) -> dict[str, int]:
        return {"mem_mb": self.mem_mb, "runtime": self.runtime_min}


@dataclass(frozen=True)
class StageKind:
    name: str
    version: int
    config: type[StageConfig]
    nodes: nodes.NodeBuilder
    run: Runner
    help: str
    resources: Resources | None = Resources()
    tracked: bool = True
    tracked_files: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The CLI subcommand: `runlib curate-shard --key K`."""
        return self.name.replace("_", "-")


def input_dirs(graph: StageGraph, node: StageNode) -> dict[str, Path]:
    """Input role -> the input artifact's directory."""
    return {role: n.dir for role, n in graph.input_nodes(node).items()}


def _curate_shard(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.stage import curate_shard

    return curate_shard(node.config_as(CurateShardConfig), out, source_name=node.params["source"])


def _numbered(dirs: dict[str, Path], role: str) -> list[Path]:
    """The input directories of roles role0, role1, ... in order."""
    return [dirs[f"{role}{i}"] for i in range(sum(r.rstrip("0123456789") == role for r in dirs))]


def _dedup_partition(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.partition import dedup_partition

    shard_dirs = _numbered(input_dirs(graph, node), "shard")
    return dedup_partition(node.config_as(DedupPartitionConfig), shard_dirs, out, source_name=node.params["source"])


def _curate_source(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.source import curate_source

    dirs = input_dirs(graph, node)
    config = node.config_as(CurateSourceConfig)
    shards, partitions = _numbered(dirs, "shard"), _numbered(dirs, "partition")
    return curate_source(config, shards, out, source_name=node.params["source"], partition_dirs=partitions)


def _train_classifier(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.quality import train_classifier_stage

    config = node.config_as(TrainClassifierConfig)
    return train_classifier_stage(config, input_dirs(graph, node), out, source_name=node.params["source"])


def _train_ngram_lm(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.quality import train_ngram_lm_stage

    config = node.config_as(TrainNgramLmConfig)
    return train_ngram_lm_stage(config, input_dirs(graph, node), out, source_name=node.params["source"])


def _score_quality(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.scoring import score_quality

    return score_quality(node.config_as(ScoreQualityConfig), input_dirs(graph, node), out)


def _filter_quality(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.quality import filter_quality

    config = node.config_as(FilterQualityConfig)
    return filter_quality(config, input_dirs(graph, node), out, source_name=node.params["source"])


def _filter_shard(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.curate.filter_shard import filter_shard

    return filter_shard(node.config_as(FilterShardConfig), input_dirs(graph, node), out)


def _train_tokenizer(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.tokenizer.train import train_tokenizer

    parts: dict[str, list[tuple[int, Path]]] = {}
    for role, directory in input_dirs(graph, node).items():  # source:<name>/<shard>
        name, _, shard = role.removeprefix("source:").rpartition("/")
        parts.setdefault(name, []).append((int(shard), directory))
    curated: dict[str, Path | list[Path]] = {name: [d for _, d in sorted(p)] for name, p in parts.items()}
    return train_tokenizer(node.config_as(TokenizerConfig), curated, out)


def _tokenize(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.data.tokenize import tokenize_part

    dirs = input_dirs(graph, node)
    return tokenize_part(node.config_as(TokenizeConfig), dirs["curated"], dirs["tokenizer"], out)


def _train_phase(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.train.phase import train_phase

    return train_phase(node.config_as(TrainPhaseConfig), input_dirs(graph, node), out, key=node.key)


def _soup_phase(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.train.soup import soup_phase

    return soup_phase(node.config_as(SoupConfig), _numbered(input_dirs(graph, node), "ingredient"), out)


def _eval_phase(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.data.shards import token_inputs
    from runlib.eval.stage import evaluate_phase

    dirs = input_dirs(graph, node)
    token_dirs = token_inputs(dirs)
    return evaluate_phase(node.config_as(EvalConfig), dirs["model"], dirs["tokenizer"], dict(token_dirs), out)


def _fit_ladder(graph: StageGraph, node: StageNode, out: Path) -> dict[str, Any]:
    from runlib.ladder.stage import fit_ladder

    evals = {role.removeprefix("eval:"): d for role, d in input_dirs(graph, node).items()}
    return fit_ladder(node.config_as(FitLadderConfig), evals, out)


# Versions: 3 when manifests gained XXH3-128 file digests and their own checksum; +1 each when they gained
# an HMAC-SHA256 and the digests of the inputs they read (an artifact built before has neither, is refused
# on every read, and is rebuilt under its new key instead).
KINDS: tuple[StageKind, ...] = (
    StageKind(
        "curate_shard",
        7,
        CurateShardConfig,
        nodes.curate_shard_nodes,
        _curate_shard,
        "curate one shard of one source (normalize, filter, dedup within the shard)",
        Resources(threads=1, mem_mb=2000, runtime_min=30),
    ),
    StageKind(
        "dedup_partition",
        2,
        DedupPartitionConfig,
        nodes.dedup_partition_nodes,
        _dedup_partition,
        "find one slice of a source's exact duplicates and near-duplicate candidates across its shards",
        Resources(threads=1, mem_mb=2000, runtime_min=30),
    ),
    StageKind(
        "curate_source",
        9,
        CurateSourceConfig,
        nodes.curate_source_nodes,
        _curate_source,
        "join a source's shards: decide the duplicates across shards and the held-out documents",
        Resources(threads=1, mem_mb=2000, runtime_min=30),
    ),
    StageKind(
        "train_classifier",
        1,
        TrainClassifierConfig,
        nodes.train_classifier_nodes,
        _train_classifier,
        "train a source's fastText quality classifier: anchors' documents against its own (curate.classifier)",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
    ),
    StageKind(
        "train_ngram_lm",
        1,
        TrainNgramLmConfig,
        nodes.train_ngram_lm_nodes,
        _train_ngram_lm,
        "train an n-gram language model on reference sources (curate.perplexity)",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
    ),
    StageKind(
        "score_quality",
        2,
        ScoreQualityConfig,
        nodes.score_quality_nodes,
        _score_quality,
        "score one curate shard's documents after the join by the source's classifier and perplexity",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
    ),
    StageKind(
        "filter_quality",
        4,
        FilterQualityConfig,
        nodes.filter_quality_nodes,
        _filter_quality,
        "decide which of a source's documents its quality filters keep, the cut set over the whole source",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
    ),
    StageKind(
        "filter_shard",
        1,
        FilterShardConfig,
        nodes.filter_shard_nodes,
        _filter_shard,
        "write one curate shard's documents the source trains on and holds out (the join's and quality verdicts)",
        Resources(threads=1, mem_mb=1000, runtime_min=30),
    ),
    StageKind(
        "train_tokenizer",
        5,
        TokenizerConfig,
        nodes.train_tokenizer_nodes,
        _train_tokenizer,
        "train the byte-level BPE tokenizer on the train_on mixture",
        Resources(threads=2, mem_mb=4000, runtime_min=60),
        tracked_files=("tokenizer.json",),
    ),
    StageKind(
        "tokenize",
        6,
        TokenizeConfig,
        nodes.tokenize_nodes,
        _tokenize,
        "tokenize one curated shard of a source into token shards (train and held-out)",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
    ),
    StageKind(
        "train_phase",
        4,
        TrainPhaseConfig,
        nodes.train_phase_nodes,
        _train_phase,
        "train one phase from the previous phase's end (accelerate launch, one process per device)",
        None,  # nodes, processes, memory and time limit from the phase's plan (runlib.train.launch)
        tracked_files=("metrics.jsonl", "spikes.json"),
    ),
    StageKind(
        "soup_phase",
        1,
        SoupConfig,
        nodes.soup_phase_nodes,
        _soup_phase,
        "average the weights of branches of the last phase into one model (phases[].soup)",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
        tracked_files=(),
    ),
    StageKind(
        "eval_phase",
        5,
        EvalConfig,
        nodes.eval_phase_nodes,
        _eval_phase,
        "evaluate a phase's model: held-out loss per source and the spec's tasks",
        Resources(threads=1, mem_mb=4000, runtime_min=60),
        tracked_files=("eval.json",),
    ),
    StageKind(
        "fit_ladder",
        3,
        FitLadderConfig,
        nodes.fit_ladder_nodes,
        _fit_ladder,
        "fit L(N, D) to the ladder's rungs and predict the spec's held-out loss (spec: ladder)",
        Resources(threads=1, mem_mb=1000, runtime_min=30),
        tracked_files=("fit.json",),
    ),
)

STAGES: dict[str, StageKind] = {kind.name: kind for kind in KINDS}
"""Stage name -> its kind, in the order the graph builds them (a kind's inputs come before it). A test adds a
kind with monkeypatch.setitem(STAGES, name, kind)."""


def stage_kind(name: str) -> StageKind:
    if name not in STAGES:
        raise UserError(f"runlib: unknown stage {name!r}; one of {', '.join(STAGES)}")
    return STAGES[name]


def versions() -> dict[str, int]:
    return {name: kind.version for name, kind in STAGES.items()}
