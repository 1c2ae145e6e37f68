"""The stage graph of a spec: every stage instance with its config, key, inputs and CLI parameters.

A node's config (built by runlib.workflow.configs) is all its stage code reads besides its inputs'
artifacts; its key hashes that config, the stage's code version and the input keys (keys.stage_key).
Pure but for one thing: a file-based source's shards are the files its glob matches now.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runlib.errors import UserError
from runlib.spec.models import RunSpec
from runlib.stageconfig import StageConfig
from runlib.workflow import configs
from runlib.workflow.keys import stage_key
from runlib.workflow.manifest import MANIFEST
from runlib.workflow.settings import artifacts_dir, done_stamp


@dataclass(frozen=True)
class StageNode:
    stage: str  # = rule name = `runlib <stage>` subcommand = artifact folder
    instance: str  # human name of this instance, e.g. "curate_shard code/0"
    key: str
    config: StageConfig  # all the stage reads besides its inputs' artifacts
    inputs: dict[str, str] = field(default_factory=dict)  # role -> input node key
    params: dict[str, Any] = field(default_factory=dict)  # CLI arguments that select the instance

    @property
    def dir(self) -> Path:
        return artifacts_dir() / self.stage / self.key

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def done_path(self) -> Path:
        """The done stamp: the Snakemake target of this node (runlib.workflow.settings.done_stamp)."""
        return done_stamp(self.stage, self.key)


def make_node(
    stage: str, instance: str, config: StageConfig, inputs: dict[str, str] | None = None, **params: Any
) -> StageNode:
    """A node keyed by its config and its inputs' keys."""
    inputs = dict(inputs or {})
    return StageNode(stage, instance, stage_key(stage, config, inputs), config, inputs, params)


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

    def phase_node(self, stage: str, phase: int) -> StageNode | None:
        """The spec's own train_phase / eval_phase node of phase `phase` (not a ladder rung's); None when the
        spec does not run it (a ladder with train_target false)."""
        return next(
            (n for n in self.of(stage) if n.params.get("phase") == phase and not is_rung(n) and not is_branch(n)),
            None,
        )

    def branch_nodes(self, stage: str) -> dict[str, StageNode]:
        """Branch name -> the spec's own train_phase / eval_phase node of that branch of the last phase."""
        return {n.params["branch"]: n for n in self.of(stage) if is_branch(n) and not is_rung(n)}

    def named_phase_node(self, spec: RunSpec, stage: str, name: str, where: str) -> StageNode:
        """The spec's own train_phase / eval_phase node of the phase `name`, or of a branch of the last phase
        named '<phase>@<branch>' as its stages are (train_phase anneal@code-heavy); a UserError at `where`
        for a name that is neither, or a spec that does not train its own phases."""
        names = [p.name for p in spec.phases]
        last = spec.phases[-1] if spec.phases else None
        branches = {f"{last.name}@{b.name}": b.name for b in (last.branches or [])} if last else {}
        if name in branches:
            node = self.branch_nodes(stage).get(branches[name])
        elif name in names:
            node = self.phase_node(stage, names.index(name))
        else:
            known = names + list(branches)
            guess = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else f"the phases: {', '.join(known)}"
            raise UserError(f"{where}: {name[:80]!r} is not a phase of this spec (nor <phase>@<branch>); {hint}")
        if node is None:
            raise UserError(f"{where}: this spec does not train its own phases (ladder.train_target: false)")
        return node

    def input_nodes(self, node: StageNode) -> dict[str, StageNode]:
        index = {n.key: n for n in self.nodes}
        return {role: index[key] for role, key in node.inputs.items()}


def build_graph(spec: RunSpec, shard_configs: dict[str, list] | None = None) -> StageGraph:
    """Every stage of the spec. `shard_configs` (source -> its curate_shard configs) replaces the listing of
    the sources' input files (runlib.review.diff plans specs whose files are elsewhere)."""
    from runlib.plan import derive

    branched = spec
    spec = configs.without_branches(spec)  # the prefix and the base phase: keys as if written without branches
    plan = derive(spec)
    nodes: list[StageNode] = []
    curated: dict[str, StageNode] = {}
    if shard_configs is None:
        shard_configs = configs.curate_shard_configs(spec, plan)
    source_configs = configs.curate_source_configs(spec, plan)
    for name in spec.data.sources:
        shard_nodes = [
            make_node("curate_shard", f"curate_shard {name}/{c.shard}", c, source=name, shard=c.shard)
            for c in shard_configs[name]
        ]
        nodes += shard_nodes
        inputs = {f"shard{i}": n.key for i, n in enumerate(shard_nodes)}
        curated[name] = make_node("curate_source", f"curate_source {name}", source_configs[name], inputs, source=name)
        nodes.append(curated[name])

    tok_inputs = {f"source:{name}": curated[name].key for name in sorted(spec.tokenizer.train_on) if name in curated}
    tokenizer = make_node("train_tokenizer", "train_tokenizer", configs.tokenizer_config(spec, plan), tok_inputs)
    nodes.append(tokenizer)
    tokenized: dict[str, StageNode] = {}
    for name, config in configs.tokenize_configs(spec, plan).items():
        inputs = {"curated": curated[name].key, "tokenizer": tokenizer.key}
        tokenized[name] = make_node("tokenize", f"tokenize {name}", config, inputs, source=name)
        nodes.append(tokenized[name])
    if spec.ladder is None or spec.ladder.train_target:
        own = training_nodes(spec, plan, tokenizer, tokenized)
        nodes += own + branch_nodes(configs.branch_specs(branched, plan), own, tokenizer, tokenized)
    if spec.ladder is not None:
        nodes += ladder_nodes(spec, plan, tokenizer, tokenized)
    return StageGraph(tuple(nodes))


def training_nodes(
    spec: RunSpec, plan, tokenizer: StageNode, tokenized: dict[str, StageNode], rung: str | None = None
) -> list[StageNode]:
    """train_phase per phase (each from the previous one's end) and eval_phase after each (or the last).

    rung: a ladder rung's name (runlib.ladder.rungs), carried in each node's params and instance name."""
    nodes: list[StageNode] = []
    previous: StageNode | None = None
    tag = {} if rung is None else {"rung": rung}
    prefix = "" if rung is None else f"{rung}/"
    for i, (phase, config) in enumerate(zip(plan.phases, configs.train_phase_configs(spec, plan), strict=True)):
        inputs = {"tokenizer": tokenizer.key}
        mixture = phase.settings.phase.mixture
        inputs.update({f"tokens:{n}": tokenized[n].key for n, w in sorted(mixture.items()) if w > 0 and n in tokenized})
        if previous is not None:
            inputs["previous"] = previous.key
        previous = make_node("train_phase", f"train_phase {prefix}{phase.name}", config, inputs, phase=i, **tag)
        nodes.append(previous)
    trained = {n.params["phase"]: n for n in nodes}
    for i, config in configs.eval_configs(spec, plan).items():
        inputs = {
            "model": trained[i].key,
            "tokenizer": tokenizer.key,
            **{f"tokens:{n}": t.key for n, t in sorted(tokenized.items())},
        }
        name = f"eval_phase {prefix}{plan.phases[i].name}"
        nodes.append(make_node("eval_phase", name, config, inputs, phase=i, **tag))
    return nodes


def branch_nodes(
    branches: dict[str, RunSpec], own: list[StageNode], tokenizer: StageNode, tokenized: dict[str, StageNode]
) -> list[StageNode]:
    """A train_phase and an eval_phase per branch of the last phase (configs.branch_specs), the training from
    the end of the phase before it (the shared prefix's last train_phase node in `own`; none when the run has
    one phase), named '<phase>@<branch>' and carrying `branch` in their params."""
    from runlib.plan import derive

    nodes: list[StageNode] = []
    for name, spec in branches.items():
        plan = derive(spec)
        last = len(plan.phases) - 1
        phase = plan.phases[last]
        config = configs.train_phase_configs(spec, plan)[last]
        inputs = {"tokenizer": tokenizer.key}
        mixture = phase.settings.phase.mixture
        inputs.update({f"tokens:{n}": tokenized[n].key for n, w in sorted(mixture.items()) if w > 0 and n in tokenized})
        previous = next((n for n in own if n.stage == "train_phase" and n.params["phase"] == last - 1), None)
        if previous is not None:
            inputs["previous"] = previous.key
        label = f"{phase.name}@{name}"
        train = make_node("train_phase", f"train_phase {label}", config, inputs, phase=last, branch=name)
        same = next((n for n in [*own, *nodes] if n.stage == "train_phase" and n.key == train.key), None)
        if same is not None:
            raise UserError(
                f"phases[{last}].branches ({name}): trains exactly as {same.instance.removeprefix('train_phase ')}; "
                "give it another mixture, tokens, decay or seq_len, or remove it"
            )
        evaluation = {
            "model": train.key,
            "tokenizer": tokenizer.key,
            **{f"tokens:{n}": t.key for n, t in sorted(tokenized.items())},
        }
        eval_config = configs.eval_configs(spec, plan)[last]
        nodes += [
            train,
            make_node("eval_phase", f"eval_phase {label}", eval_config, evaluation, phase=last, branch=name),
        ]
    return nodes


def ladder_nodes(spec: RunSpec, plan, tokenizer: StageNode, tokenized: dict[str, StageNode]) -> list[StageNode]:
    """The ladder's rungs (runlib.ladder.rungs), each trained and evaluated from the target's own
    tokenizer and tokenized sources, and the fit_ladder node over the rungs' evaluations."""
    from runlib.ladder.rungs import ladder_rungs

    ladder = ladder_rungs(spec, plan)
    nodes: list[StageNode] = []
    evals: dict[str, str] = {}
    for rung in ladder.rungs:
        rung_nodes = training_nodes(rung.spec, rung.plan, tokenizer, tokenized, rung=rung.name)
        nodes += rung_nodes
        evals[f"eval:{rung.name}"] = [n for n in rung_nodes if n.stage == "eval_phase"][-1].key
    config = configs.fit_ladder_config(spec, plan, ladder)
    nodes.append(make_node("fit_ladder", "fit_ladder", config, evals))
    return nodes


def is_rung(node: StageNode) -> bool:
    """A node of a ladder rung (not of the spec's own run)."""
    return "rung" in node.params


def is_branch(node: StageNode) -> bool:
    """A node of a branch of the last phase (PhaseSpec.branches), not of the phase itself."""
    return "branch" in node.params
