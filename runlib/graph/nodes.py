"""How each stage kind's nodes are built from the spec: one function per kind, named in its registry entry
(runlib.graph.registry). runlib.graph.build calls them in the registry's order, each with the nodes of the
kinds before it, so a kind's inputs are always built before the kind.

A node's config (runlib.graph.configs) is all its stage code reads besides its inputs' artifacts; its key
hashes that config, the kind's code version and the input keys (runlib.store.keys.stage_key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from runlib.curate.config import CurateShardConfig, ScoreQualityConfig, TrainNgramLmConfig
from runlib.errors import UserError
from runlib.graph import configs
from runlib.ladder.rungs import Ladder, ladder_rungs
from runlib.plan import Plan, derive
from runlib.spec.models import RunSpec
from runlib.store.keys import stage_key
from runlib.store.node import StageNode
from runlib.store.stageconfig import StageConfig
from runlib.train.config import TrainPhaseConfig
from runlib.train.soup_config import SoupConfig


@dataclass(frozen=True)
class TrainingRun:
    """A run whose phases are trained: the spec's own, a ladder rung's or a branch of the last phase's."""

    spec: RunSpec
    plan: Plan
    tag: dict[str, str] = field(default_factory=dict)
    """{"rung": name} or {"branch": name}: carried in each node's params; {} for the spec's own run."""
    label: str = ""
    """The prefix of its nodes' instance names: '' (own), '<rung>/' (a rung); a branch names its phase
    '<phase>@<branch>' instead."""

    @property
    def phases(self) -> list[int]:
        """The phases this run trains itself: every phase, or only the last for a branch (the phases before it
        are the spec's own)."""
        n = len(self.plan.phases)
        return [n - 1] if "branch" in self.tag else list(range(n))

    def phase_label(self, index: int) -> str:
        name = self.plan.phases[index].name
        return f"{name}@{self.tag['branch']}" if "branch" in self.tag else f"{self.label}{name}"


@dataclass
class GraphContext:
    """What the node builders read: the spec (without branches: the prefix and the base phase, keyed as if
    written without them), its plan, the nodes built so far, and the registry's code versions."""

    spec: RunSpec
    branched: RunSpec
    """The spec as written, branches included."""
    plan: Plan
    versions: dict[str, int]
    shard_configs: dict[str, list[CurateShardConfig]] | None = None
    nodes: list[StageNode] = field(default_factory=list)

    def make(
        self, stage: str, instance: str, config: StageConfig, inputs: dict[str, str] | None = None, **params: Any
    ) -> StageNode:
        """A node keyed by its config, its kind's code version and its inputs' keys."""
        inputs = dict(inputs or {})
        key = stage_key(stage, self.versions[stage], config, inputs)
        return StageNode(stage, instance, key, config, inputs, params)

    def of(self, stage: str) -> list[StageNode]:
        return [n for n in self.nodes if n.stage == stage]

    def one(self, stage: str, **params: Any) -> StageNode:
        return next(n for n in self.of(stage) if all(n.params.get(k) == v for k, v in params.items()))

    def curated(self, source: str) -> list[StageNode]:
        return curated_parts(self.nodes, source)

    @cached_property
    def trains(self) -> bool:
        """Whether the spec trains its own run (a ladder with train_target false trains only its rungs)."""
        return self.spec.ladder is None or self.spec.ladder.train_target

    @cached_property
    def ladder(self) -> Ladder | None:
        return None if self.spec.ladder is None else ladder_rungs(self.spec, self.plan)

    @cached_property
    def runs(self) -> list[TrainingRun]:
        """Every run trained, in the order its nodes are listed: the spec's own, its branches, the rungs."""
        runs: list[TrainingRun] = []
        if self.trains:
            runs.append(TrainingRun(self.spec, self.plan))
            for name, spec in configs.branch_specs(self.branched, self.plan).items():
                runs.append(TrainingRun(spec, derive(spec), {"branch": name}))
        if self.ladder is not None:
            runs += [TrainingRun(r.spec, r.plan, {"rung": r.name}, f"{r.name}/") for r in self.ladder.rungs]
        return runs

    def tokenized(self) -> dict[str, list[StageNode]]:
        """Source -> its tokenize nodes, in part order."""
        out: dict[str, list[StageNode]] = {}
        for node in self.of("tokenize"):
            out.setdefault(node.params["source"], []).append(node)
        return out

    def token_inputs(self, sources: list[str]) -> dict[str, str]:
        """The input roles of these sources' token parts: tokens:<source>/<part> -> key."""
        tokenized = self.tokenized()
        return {
            f"tokens:{name}/{node.params['part']}": node.key for name in sources for node in tokenized.get(name, [])
        }


def curated_parts(nodes: Sequence[StageNode], source: str) -> list[StageNode]:
    """The nodes whose train.jsonl and heldout.jsonl, in this order, are the source's finished documents (what
    tokenize and train_tokenizer read and `runlib docs` streams): its filter_shard nodes, in shard order."""
    parts = [n for n in nodes if n.stage == "filter_shard" and n.params.get("source") == source]
    if not parts:
        raise UserError(f"no filter_shard stage for source {source!r} in this spec")
    return sorted(parts, key=lambda n: int(n.params["shard"]))


def funnel_node(nodes: Sequence[StageNode], source: str) -> StageNode:
    """The node whose stats.json holds every curation step of the whole source (the report's funnel ends at
    it): its filter_quality when it has a quality filter, else its curate_source."""
    for stage in ("filter_quality", "curate_source"):
        for node in nodes:
            if node.stage == stage and node.params.get("source") == source:
                return node
    raise UserError(f"no curate_source stage for source {source!r} in this spec")


NodeBuilder = Callable[[GraphContext], list[StageNode]]


def curate_shard_nodes(g: GraphContext) -> list[StageNode]:
    shard_configs = configs.curate_shard_configs(g.spec, g.plan) if g.shard_configs is None else g.shard_configs
    return [
        g.make("curate_shard", f"curate_shard {name}/{c.shard}", c, source=name, shard=c.shard)
        for name in g.spec.data.sources
        for c in shard_configs[name]
    ]


def _shard_inputs(g: GraphContext, source: str, role: str = "") -> dict[str, str]:
    """The roles <role>shard0, <role>shard1, ... of a source's curate_shard nodes."""
    shards = [n for n in g.of("curate_shard") if n.params["source"] == source]
    return {f"{role}shard{i}": n.key for i, n in enumerate(shards)}


def _joined_inputs(g: GraphContext, source: str, role: str) -> dict[str, str]:
    """A source's documents after its join, as a stage that reads them takes them: role -> its curate_source,
    role/shard0, ... -> its curate shards (runlib.curate.joined)."""
    return {role: g.one("curate_source", source=source).key} | _shard_inputs(g, source, f"{role}/")


def dedup_partition_nodes(g: GraphContext) -> list[StageNode]:
    shards = {name: len(_shard_inputs(g, name)) for name in g.spec.data.sources}
    return [
        g.make(
            "dedup_partition",
            f"dedup_partition {name}/{c.partition}",
            c,
            _shard_inputs(g, name),
            source=name,
            partition=c.partition,
        )
        for name, partitions in configs.dedup_partition_configs(g.spec, shards).items()
        for c in partitions
    ]


def curate_source_nodes(g: GraphContext) -> list[StageNode]:
    out = []
    for name, config in configs.curate_source_configs(g.spec, g.plan).items():
        partitions = [n for n in g.of("dedup_partition") if n.params["source"] == name]
        inputs = _shard_inputs(g, name) | {f"partition{i}": n.key for i, n in enumerate(partitions)}
        out.append(g.make("curate_source", f"curate_source {name}", config, inputs, source=name))
    return out


def train_classifier_nodes(g: GraphContext) -> list[StageNode]:
    """Per source with curate.classifier: positives from the anchors' joined documents, negatives from its own."""
    out = []
    for name, config in configs.train_classifier_configs(g.spec).items():
        anchors = g.spec.data.sources[name].curate.classifier.positives  # type: ignore[union-attr]
        inputs: dict[str, str] = {}
        for i, anchor in enumerate(anchors):
            inputs |= _joined_inputs(g, anchor, f"positive{i}")
        inputs |= _joined_inputs(g, name, "negatives")
        out.append(g.make("train_classifier", f"train_classifier {name}", config, inputs, source=name))
    return out


def _ngram_lm_node(g: GraphContext, name: str, config: TrainNgramLmConfig) -> StageNode:
    reference = g.spec.data.sources[name].curate.perplexity.reference  # type: ignore[union-attr]
    inputs: dict[str, str] = {}
    for i, source in enumerate(reference):
        inputs |= _joined_inputs(g, source, f"reference{i}")
    return g.make("train_ngram_lm", f"train_ngram_lm {name}", config, inputs, source=name)


def train_ngram_lm_nodes(g: GraphContext) -> list[StageNode]:
    """Per source with curate.perplexity, its reference sources' n-gram model: one node per distinct model (two
    sources with the same reference and order share it, under the first one's name)."""
    out: dict[str, StageNode] = {}
    for name, config in configs.train_ngram_lm_configs(g.spec).items():
        node = _ngram_lm_node(g, name, config)
        out.setdefault(node.key, node)
    return list(out.values())


def score_quality_nodes(g: GraphContext) -> list[StageNode]:
    """Per source with a classifier or a perplexity filter, one job per curate shard: the shard's documents
    after the join, scored by its models."""
    out = []
    lm_configs = configs.train_ngram_lm_configs(g.spec)
    for name, config in configs.filter_quality_configs(g.spec).items():
        models = {}
        if config.classifier is not None:
            models["classifier"] = g.one("train_classifier", source=name).key
        if config.perplexity is not None:
            models["ngram_lm"] = _ngram_lm_node(g, name, lm_configs[name]).key
        source = g.one("curate_source", source=name).key
        for shard, key in enumerate(_shard_inputs(g, name).values()):
            scored = ScoreQualityConfig(
                classifier=config.classifier is not None, perplexity=config.perplexity is not None, shard=shard
            )
            inputs = {"shard": key, "source": source} | models
            out.append(
                g.make("score_quality", f"score_quality {name}/{shard}", scored, inputs, source=name, shard=shard)
            )
    return out


def filter_quality_nodes(g: GraphContext) -> list[StageNode]:
    """Per source with a classifier or a perplexity filter: which of its documents the scores keep."""
    out = []
    for name, config in configs.filter_quality_configs(g.spec).items():
        inputs = {"source": g.one("curate_source", source=name).key}
        scored = [n for n in g.of("score_quality") if n.params["source"] == name]
        inputs |= {f"scores{i}": n.key for i, n in enumerate(scored)}
        out.append(g.make("filter_quality", f"filter_quality {name}", config, inputs, source=name))
    return out


def filter_shard_nodes(g: GraphContext) -> list[StageNode]:
    """Per source, one job per curate shard: the shard's documents the join and the quality filters keep."""
    shards = {name: len(_shard_inputs(g, name)) for name in g.spec.data.sources}
    out = []
    for name, shard_configs in configs.filter_shard_configs(g.spec, shards).items():
        source = g.one("curate_source", source=name).key
        quality = [n for n in g.of("filter_quality") if n.params["source"] == name]
        for config, key in zip(shard_configs, _shard_inputs(g, name).values(), strict=True):
            inputs = {"shard": key, "source": source}
            if quality:
                inputs |= {
                    "quality": quality[0].key,
                    "scores": g.one("score_quality", source=name, shard=config.shard).key,
                }
            instance = f"filter_shard {name}/{config.shard}"
            out.append(g.make("filter_shard", instance, config, inputs, source=name, shard=config.shard))
    return out


def train_tokenizer_nodes(g: GraphContext) -> list[StageNode]:
    """The tokenizer, on the train_on sources' curated shards (roles source:<name>/<shard>)."""
    inputs: dict[str, str] = {}
    for name in sorted(g.spec.tokenizer.train_on):
        if name in g.spec.data.sources:
            inputs |= {f"source:{name}/{n.params['shard']}": n.key for n in g.curated(name)}
    return [g.make("train_tokenizer", "train_tokenizer", configs.tokenizer_config(g.spec, g.plan), inputs)]


def tokenize_nodes(g: GraphContext) -> list[StageNode]:
    """Per source, one tokenize job per curated shard."""
    tokenizer = g.one("train_tokenizer")
    out = []
    for name, config in configs.tokenize_configs(g.spec, g.plan).items():
        for curated in g.curated(name):
            part = int(curated.params["shard"])
            inputs = {"curated": curated.key, "tokenizer": tokenizer.key}
            out.append(g.make("tokenize", f"tokenize {name}/{part}", config, inputs, source=name, part=part))
    return out


def train_phase_nodes(g: GraphContext) -> list[StageNode]:
    """Per run, a train_phase per phase, each from the previous phase's end (a branch's from the end of the
    spec's own phase before it); a branch that trains exactly as another phase is an error."""
    tokenizer = g.one("train_tokenizer")
    out: list[StageNode] = []
    for run in g.runs:
        trained = configs.train_phase_configs(run.spec, run.plan)
        for i in run.phases:
            inputs = {"tokenizer": tokenizer.key}
            mixture = run.plan.phases[i].settings.phase.mixture
            inputs |= g.token_inputs([n for n, w in sorted(mixture.items()) if w > 0])
            previous = _trained(out, run.tag if "rung" in run.tag else {}, i - 1)
            if previous is not None:
                inputs["previous"] = previous.key
            node = g.make("train_phase", f"train_phase {run.phase_label(i)}", trained[i], inputs, phase=i, **run.tag)
            if "branch" in run.tag:
                same = next((n for n in out if n.key == node.key), None)
                if same is not None:
                    raise UserError(
                        f"phases[{i}].branches ({run.tag['branch']}): trains exactly as "
                        f"{same.instance.removeprefix('train_phase ')}; give it another mixture, tokens, decay, "
                        "seq_len or seed, or remove it"
                    )
            out.append(node)
    return out


def _tag(node: StageNode) -> dict[str, str]:
    """The run a node belongs to, as TrainingRun.tag."""
    return {k: node.params[k] for k in ("rung", "branch") if k in node.params}


def _trained(nodes: list[StageNode], tag: dict[str, str], phase: int) -> StageNode | None:
    """The train_phase node of `phase` of the run tagged `tag` ({} for the spec's own)."""
    return next((n for n in nodes if n.params["phase"] == phase and _tag(n) == tag), None)


def eval_phase_nodes(g: GraphContext) -> list[StageNode]:
    """Per run, an eval_phase after each phase it evaluates (eval.after_each_phase) or after the last."""
    tokenizer = g.one("train_tokenizer")
    tokens = g.token_inputs(sorted(g.tokenized()))
    out = []
    for run in g.runs:
        for i, config in configs.eval_configs(run.spec, run.plan).items():
            if i not in run.phases:
                continue
            model = next(n for n in g.of("train_phase") if n.params["phase"] == i and _tag(n) == run.tag)
            inputs = {"model": model.key, "tokenizer": tokenizer.key, **tokens}
            out.append(g.make("eval_phase", f"eval_phase {run.phase_label(i)}", config, inputs, phase=i, **run.tag))
    return out + _soup_eval_nodes(g, tokens, tokenizer)


def _soup_ingredients(g: GraphContext) -> list[str]:
    """The names the last phase's soup averages (PhaseSpec.soup), [] without a soup or without the run's own
    phases (a ladder with train_target false)."""
    last = g.branched.phases[-1] if g.branched.phases else None
    if last is None or last.soup is None or not g.trains:
        return []
    return last.soup.ingredients or [last.name, *(b.name for b in last.branches or [])]


def soup_phase_nodes(g: GraphContext) -> list[StageNode]:
    """The soup of the last phase (PhaseSpec.soup): one node averaging its ingredients' final weights, tagged as
    a branch of its own (named '<phase>@<soup>')."""
    names = _soup_ingredients(g)
    if not names:
        return []
    last = len(g.branched.phases) - 1
    phase, soup = g.branched.phases[last], g.branched.phases[last].soup
    assert soup is not None  # _soup_ingredients is [] without one
    trained = {phase.name: _trained(g.of("train_phase"), {}, last)}
    trained |= {b.name: _trained(g.of("train_phase"), {"branch": b.name}, last) for b in phase.branches or []}
    inputs, lengths = {}, {}
    for i, name in enumerate(names):
        node = trained[name]
        assert node is not None  # every branch of the last phase is trained (train_phase_nodes)
        inputs[f"ingredient{i}"] = node.key
        lengths[name] = node.config_as(TrainPhaseConfig).seq_len
    if len(set(lengths.values())) > 1:
        raise UserError(
            f"phases[{last}].soup.ingredients: the models average at one context length, and these train at "
            f"different seq_len ({', '.join(f'{n} {v}' for n, v in lengths.items())}); soup branches of one seq_len"
        )
    config = SoupConfig(phase_index=last, weights=[1 / len(names)] * len(names))
    label = f"{phase.name}@{soup.name}"
    return [g.make("soup_phase", f"soup_phase {label}", config, inputs, phase=last, branch=soup.name, soup=soup.name)]


def _soup_eval_nodes(g: GraphContext, tokens: dict[str, str], tokenizer: StageNode) -> list[StageNode]:
    """The soup's evaluation: its first ingredient's eval config, recorded under the soup's name."""
    souped = g.of("soup_phase")
    if not souped:
        return []
    node, first = souped[0], _soup_ingredients(g)[0]
    last = node.params["phase"]
    run = next(r for r in g.runs if r.tag == ({"branch": first} if first != g.spec.phases[last].name else {}))
    config = configs.eval_configs(run.spec, run.plan)[last]
    label = f"{g.spec.phases[last].name}@{node.params['soup']}"
    config = config.model_copy(update={"phase": label})
    inputs = {"model": node.key, "tokenizer": tokenizer.key, **tokens}
    params = {k: node.params[k] for k in ("phase", "branch", "soup")}
    return [g.make("eval_phase", f"eval_phase {label}", config, inputs, **params)]


def fit_ladder_nodes(g: GraphContext) -> list[StageNode]:
    """The fit over the ladder's rungs' last evaluations (runlib.ladder.rungs); none without a ladder."""
    if g.ladder is None:
        return []
    evals = {}
    for rung in g.ladder.rungs:
        last = [n for n in g.of("eval_phase") if n.params.get("rung") == rung.name][-1]
        evals[f"eval:{rung.name}"] = last.key
    return [g.make("fit_ladder", "fit_ladder", configs.fit_ladder_config(g.spec, g.plan, g.ladder), evals)]
