"""The plan each training stage trains by: the spec's own run, a ladder rung's, or a branch's.

    train_plans(spec) -> {(rung, branch): Plan}      node_device_hours(node, plans) -> the plan's estimate

A train_phase node carries `rung` (runlib.ladder.rungs) or `branch` (configs.branch_specs) in its params;
its phase index is into that run's plan. Used where the plan's hours are set beside a node: `runlib diff`'s
reruns and the MLflow parent's planned device-hours.
"""

from __future__ import annotations

from runlib.graph import configs
from runlib.ladder.rungs import ladder_rungs
from runlib.plan import Plan, derive
from runlib.spec.branches import without_branches
from runlib.spec.models import RunSpec
from runlib.store.node import StageNode

RunId = tuple[str | None, str | None]  # (rung, branch); (None, None) is the spec's own run


def train_plans(spec: RunSpec) -> dict[RunId, Plan]:
    """(rung, branch) -> the plan of that run: the spec's own (None, None), each ladder rung's and each
    branch's of the last phase."""
    base = without_branches(spec)
    plan = derive(base)
    plans: dict[RunId, Plan] = {(None, None): plan}
    if spec.ladder is not None:
        plans.update({(r.name, None): r.plan for r in ladder_rungs(base, plan).rungs})
    plans.update({(None, name): derive(b) for name, b in configs.branch_specs(spec, plan).items()})
    return plans


def node_run(node: StageNode) -> RunId:
    return node.params.get("rung"), node.params.get("branch")


def node_device_hours(node: StageNode, plans: dict[RunId, Plan]) -> float:
    """The plan's device-hours (GPU-hours, core-hours on CPU) of one train_phase node."""
    phase = plans[node_run(node)].phases[node.params["phase"]]
    hours: float = phase.hours
    return hours * int(phase.settings.devices)  # the phase's own devices (phases[].hardware)
