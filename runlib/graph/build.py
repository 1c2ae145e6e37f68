"""The stage graph of a spec: every stage instance with its config, key, inputs and CLI parameters, built
kind by kind as the stage registry (runlib.graph.registry) lists them.

Pure but for one thing: a file-based source's shards are the files its glob matches now.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from runlib.curate.config import CurateShardConfig, DedupPartitionConfig
from runlib.errors import UserError
from runlib.graph.nodes import GraphContext, curated_parts, funnel_node
from runlib.graph.registry import STAGES, versions
from runlib.plan import derive
from runlib.spec.branches import without_branches
from runlib.spec.models import RunSpec
from runlib.store.node import StageNode


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

    def bytes_read(self, node: StageNode) -> int:
        """The input bytes a curate_shard job reads (its files), or a dedup_partition holds (a slice of its
        source's shards: the documents they kept, docs.jsonl, once built, else their input files, over the
        slices); 0 for a builtin source's."""
        if node.stage == "curate_shard":
            return sum(f.bytes for f in node.config_as(CurateShardConfig).files)
        shards = [self.by_key("curate_shard", k) for k in node.inputs.values()]
        kept = [n.dir / "docs.jsonl" for n in shards]
        if all(path.is_file() for path in kept):
            total = sum(path.stat().st_size for path in kept)
        else:
            total = sum(f.bytes for n in shards for f in n.config_as(CurateShardConfig).files)
        return total // max(1, node.config_as(DedupPartitionConfig).partitions)

    def input_format(self, node: StageNode) -> str:
        """The input.format of a curate_shard's source."""
        return node.config_as(CurateShardConfig).input.format

    def curated(self, source: str) -> list[StageNode]:
        """The source's filter_shard nodes, in shard order: its finished documents."""
        return curated_parts(self.nodes, source)

    def funnel(self, source: str) -> StageNode:
        """The node whose stats.json holds all of the source's curation steps."""
        return funnel_node(self.nodes, source)

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
        named '<phase>@<branch>' as its stages are (train_phase anneal@code-heavy), or of its soup (for
        train_phase: the soup_phase node, whose final.pt is the soup's model); a UserError at `where`
        for a name that is neither, or a spec that does not train its own phases."""
        names = [p.name for p in spec.phases]
        last = spec.phases[-1] if spec.phases else None
        branches = {f"{last.name}@{b.name}": b.name for b in (last.branches or [])} if last else {}
        soup = last.soup.name if last is not None and last.soup is not None else None
        if last is not None and soup is not None:
            branches[f"{last.name}@{soup}"] = soup
        if name in branches:
            # a soup's model is its soup_phase's final.pt: where a phase's is its train_phase's
            souped = stage == "train_phase" and branches[name] == soup
            node = self.branch_nodes("soup_phase" if souped else stage).get(branches[name])
        elif name in names:
            node = self.phase_node(stage, names.index(name))
        else:
            known = names + list(branches)
            guess = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else f"the phases: {', '.join(known)}"
            raise UserError(
                f"{where}: {name[:80]!r} is not a phase of this spec (nor <phase>@<branch> or <phase>@<soup>); {hint}"
            )
        if node is None:
            raise UserError(f"{where}: this spec does not train its own phases (ladder.train_target: false)")
        return node

    def input_nodes(self, node: StageNode) -> dict[str, StageNode]:
        index = {n.key: n for n in self.nodes}
        return {role: index[key] for role, key in node.inputs.items()}


def build_graph(spec: RunSpec, shard_configs: dict[str, list[CurateShardConfig]] | None = None) -> StageGraph:
    """Every stage of the spec: each kind's nodes (runlib.graph.registry, in its order) from the nodes of the
    kinds before it. `shard_configs` (source -> its curate_shard configs) replaces the listing of the
    sources' input files (runlib.review.diff plans specs whose files are elsewhere)."""
    base = without_branches(spec)  # the prefix and the base phase: keys as if written without branches
    context = GraphContext(base, spec, derive(base), versions(), shard_configs)
    for kind in STAGES.values():
        context.nodes += kind.nodes(context)
    return StageGraph(tuple(context.nodes))


def is_rung(node: StageNode) -> bool:
    """A node of a ladder rung (not of the spec's own run)."""
    return "rung" in node.params


def is_branch(node: StageNode) -> bool:
    """A node of a branch of the last phase (PhaseSpec.branches), not of the phase itself."""
    return "branch" in node.params
