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
    tokenized: dict[str, StageNode] = {}
    for name in spec.data.sources:
        projection = {"token_dtype": spec.data.token_dtype}
        inputs = {"curated": curated[name].key, "tokenizer": tokenizer.key}
        tokenized[name] = StageNode(
            "tokenize",
            f"tokenize {name}",
            stage_key("tokenize", projection, inputs),
            projection,
            inputs,
            params={"source": name},
        )
        nodes.append(tokenized[name])
    nodes += training_nodes(spec, tokenizer, tokenized)
    return StageGraph(tuple(nodes))


def schedule_within(plan, start: float, end: float) -> dict[str, Any]:
    """The LR schedule's parameters that matter inside [start, end) tokens: a phase's key must change
    when its LRs change, and only then (editing the anneal phase leaves the foundation's LRs alone)."""
    s = plan.schedule
    out: dict[str, Any] = {"kind": s.kind, "peak_lr": s.peak_lr}
    if start < s.warmup_tokens:
        out["warmup_tokens"] = s.warmup_tokens
    if s.kind != "constant" and end > s.decay_start_tokens:
        out.update(floor_lr=s.floor_lr, decay_start_tokens=s.decay_start_tokens, decay_end_tokens=s.decay_end_tokens)
    return out


def training_nodes(spec: RunSpec, tokenizer: StageNode, tokenized: dict[str, StageNode]) -> list[StageNode]:
    """train_phase per phase (each from the previous one's end) and eval_phase after each (or the last)."""
    from runlib.plan import derive

    plan = derive(spec)
    common = {
        "model": spec.model.model_dump(mode="json", exclude={"seq_len", "rope_theta"}),
        "vocab_rows": plan.vocab_rows,
        "optimizer": spec.optimizer.model_dump(mode="json"),
        "precision": spec.precision.model_dump(mode="json"),
        "seed": spec.seed,
        "data": spec.data.model_dump(mode="json", include={"packing", "boundary_targets", "loss_normalization"}),
        "fim": {n: s.fim.model_dump(mode="json") for n, s in spec.data.sources.items() if s.fim},
        "checkpoint_every_steps": round(plan.duration_steps(spec.checkpoint.every)) if spec.checkpoint.every else None,
        "spike": spec.monitor.spike.model_dump(mode="json") if spec.monitor.spike else None,
    }
    nodes: list[StageNode] = []
    history: list[dict[str, Any]] = []  # the phases so far: where each source's data stream stands
    previous: StageNode | None = None
    for i, phase in enumerate(plan.phases):
        s = phase.settings
        history.append(
            {
                "name": phase.name,
                "steps": phase.steps,
                "seq_len": s.seq_len,
                "mixture": dict(s.phase.mixture),
                "global_batch_sequences": phase.tokens_per_step // s.seq_len,
                "micro_batch": s.micro_batch,
            }
        )
        projection = {
            **common,
            "phases": list(history),
            "rope_theta": s.rope_theta,
            "start_tokens": phase.span.start_tokens,
            "schedule": schedule_within(plan, phase.span.start_tokens, phase.span.end_tokens),
        }
        inputs = {"tokenizer": tokenizer.key}
        inputs.update(
            {f"tokens:{n}": tokenized[n].key for n, w in sorted(s.phase.mixture.items()) if w > 0 and n in tokenized}
        )
        if previous is not None:
            inputs["previous"] = previous.key
        node = StageNode(
            "train_phase",
            f"train_phase {phase.name}",
            stage_key("train_phase", projection, inputs),
            projection,
            inputs,
            params={"phase": i},
        )
        nodes.append(node)
        previous = node
    trained = {n.params["phase"]: n for n in nodes}
    for i, phase in enumerate(plan.phases):
        if not spec.eval.after_each_phase and i != len(plan.phases) - 1:
            continue
        projection = {"eval": spec.eval.model_dump(mode="json"), "seq_len": phase.settings.seq_len}
        inputs = {
            "model": trained[i].key,
            "tokenizer": tokenizer.key,
            **{f"tokens:{n}": t.key for n, t in sorted(tokenized.items())},
        }
        nodes.append(
            StageNode(
                "eval_phase",
                f"eval_phase {phase.name}",
                stage_key("eval_phase", projection, inputs),
                projection,
                inputs,
                params={"phase": i},
            )
        )
    return nodes
