"""The stage graph of a spec: every stage instance with its key, inputs and CLI parameters.

Pure but for one thing: a file-based source's shards are the files its glob matches now.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec.models import RunSpec, SourceSpec
from runlib.workflow.keys import stage_key
from runlib.workflow.settings import artifacts_dir

BUILTIN_DEFAULT_SHARDS = 2


@dataclass(frozen=True)
class StageNode:
    stage: str  # = rule name = `runlib <stage>` subcommand = artifact folder
    instance: str  # human name of this instance, e.g. "curate_shard code/0"
    key: str
    projection: dict[str, Any]  # the spec fields this stage reads
    inputs: dict[str, str] = field(default_factory=dict)  # role -> input node key
    params: dict[str, Any] = field(default_factory=dict)  # CLI arguments that select the instance

    @property
    def dir(self) -> Path:
        return artifacts_dir() / self.stage / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / "manifest.json"


@dataclass(frozen=True)
class StageGraph:
    nodes: tuple[StageNode, ...]

    def by_key(self, stage: str, key: str) -> StageNode:
        for n in self.nodes:
            if n.stage == stage and n.key == key:
                return n
        raise UserError(
            f"no {stage} stage with key {key} in this spec's plan (the spec changed since the DAG was built?)"
        )

    def of(self, stage: str) -> list[StageNode]:
        return [n for n in self.nodes if n.stage == stage]

    def find(self, stage: str, **params: Any) -> StageNode:
        for n in self.of(stage):
            if all(n.params.get(k) == v for k, v in params.items()):
                return n
        raise UserError(f"no {stage} stage with {params} in this spec")

    def input_nodes(self, node: StageNode) -> dict[str, StageNode]:
        index = {n.key: n for n in self.nodes}
        return {role: index[key] for role, key in node.inputs.items()}


def source_files(name: str, source: SourceSpec) -> list[str]:
    """The files a file-based source reads, sorted; an error names the source when there are none."""
    pattern = source.input.path
    if not pattern:
        raise UserError(
            f"data.sources.{name}.input.path: format {source.input.format} needs a path (a glob of input files)"
        )
    matches = sorted(glob.glob(pattern, recursive=True))
    if source.input.format == "text":
        if Path(pattern).is_dir():  # a directory of plain-text files
            matches = sorted(str(p) for p in Path(pattern).rglob("*") if p.is_file())
        else:
            matches = [m for m in matches if Path(m).is_file()]
    if not matches:
        raise UserError(
            f"data.sources.{name}.input.path: {pattern!r} matches no file; check the path (relative to {Path.cwd()})"
        )
    return matches


def shard_plan(name: str, source: SourceSpec) -> list[list[str]]:
    """Each curation shard's input files ([] for builtin sources, which split their documents)."""
    if source.input.format == "builtin":
        return [[] for _ in range(source.input.shards or BUILTIN_DEFAULT_SHARDS)]
    files = source_files(name, source)
    n = min(source.input.shards or len(files), len(files))
    return [files[i::n] for i in range(n)]


def build_graph(spec: RunSpec) -> StageGraph:
    nodes: list[StageNode] = []
    curated: dict[str, StageNode] = {}
    for name, source in spec.data.sources.items():
        shards = shard_plan(name, source)
        source_input = source.input.model_dump(mode="json")
        curate = source.curate.model_dump(mode="json")
        shard_nodes = []
        for i, files in enumerate(shards):
            projection = {"input": source_input, "curate": curate, "shard": i, "shards": len(shards), "files": files}
            node = StageNode(
                "curate_shard",
                f"curate_shard {name}/{i}",
                stage_key("curate_shard", projection, {}),
                projection,
                params={"source": name, "shard": i},
            )
            shard_nodes.append(node)
        nodes += shard_nodes
        projection = {"heldout_docs": spec.data.heldout_docs}
        inputs = {f"shard{i}": n.key for i, n in enumerate(shard_nodes)}
        curated[name] = StageNode(
            "curate_source",
            f"curate_source {name}",
            stage_key("curate_source", projection, inputs),
            projection,
            inputs,
            params={"source": name},
        )
        nodes.append(curated[name])

    tok = spec.tokenizer
    tok_projection = tok.model_dump(mode="json")
    tok_inputs = {f"source:{name}": curated[name].key for name in sorted(tok.train_on) if name in curated}
    tokenizer = StageNode(
        "train_tokenizer",
        "train_tokenizer",
        stage_key("train_tokenizer", tok_projection, tok_inputs),
        tok_projection,
        tok_inputs,
    )
    nodes.append(tokenizer)
    for name in spec.data.sources:
        projection = {"token_dtype": spec.data.token_dtype}
        inputs = {"curated": curated[name].key, "tokenizer": tokenizer.key}
        nodes.append(
            StageNode(
                "tokenize",
                f"tokenize {name}",
                stage_key("tokenize", projection, inputs),
                projection,
                inputs,
                params={"source": name},
            )
        )
    return StageGraph(tuple(nodes))
