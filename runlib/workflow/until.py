"""`snakemake --until <rule>` on a rule whose jobs depend on jobs of the same rule (train_phase: each phase
starts from the previous phase's state) stopped with Snakemake's "BUG: Out of jobs ready to be started,
but not all files built yet".

The cause is Snakemake's --until itself (snakemake 9, dag.py `DAG.finish`): when an --until job finishes,
the jobs depending on it are not marked ready ("Skip jobs that are marked as until jobs"), so phase 2
never becomes ready after phase 1, although phase 2 is an --until job too; the scheduler runs out of
ready jobs with jobs left (snakemake/snakemake issue 823). So the gate refuses such an --until before
any job runs, and says what does the same thing: the stamps of the rule's last jobs as targets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from runlib.store.command import snakemake_command

if TYPE_CHECKING:
    from runlib.graph.build import StageGraph


def self_dependent_stages(graph: StageGraph) -> set[str]:
    """Stages (= rule names) with a node whose input is a node of the same stage."""
    return {n.stage for n in graph.nodes for m in graph.input_nodes(n).values() if m.stage == n.stage}


def until_refusal(
    until: Iterable[str], graph: StageGraph, done: Callable[[str, str], str], spec_path: str
) -> str | None:
    """The refusal of `--until` naming a self-dependent rule, with the command that works; None when none
    does. `done(stage, key)`: the path of a stage's done stamp (Workflow.done)."""
    names = set(until or ())
    bad = sorted(names & self_dependent_stages(graph))
    if not bad:
        return None
    lines = []
    for stage in bad:
        nodes = graph.of(stage)
        needed = {m.key for n in nodes for m in graph.input_nodes(n).values() if m.stage == stage}
        last = [done(n.stage, n.key) for n in nodes if n.key not in needed]
        command = snakemake_command(spec_path, targets=[str(path) for path in last])
        lines.append(
            f"--until {stage}: each {stage} job depends on another {stage} job, and Snakemake's --until starts "
            f'no job that depends on an --until job, so it stops after the first ("BUG: Out of jobs ready", '
            f"snakemake issue 823). To build every {stage} and stop there, give their last stamps as targets:\n"
            f"  {command}"
        )
    return "\n".join(lines)


def until_from_argv(argv: list[str]) -> list[str]:
    """The names given to `--until` on Snakemake's command line (`--until a b`, `--until=a`).

    Read from the command line because the Snakefile is parsed before Snakemake sets its DAG settings
    (snakemake 9, api.py DAGApi.__post_init__ reads the parsed workflow first), and the --until refusal
    must come before any job, dry runs included (onstart handlers do not run in a dry run)."""
    names: list[str] = []
    collecting = False
    for word in argv[1:]:
        if word.startswith("--until="):
            names.append(word.split("=", 1)[1])
            collecting = False
        elif word == "--until":
            collecting = True
        elif word.startswith("-"):
            collecting = False
        elif collecting:
            names.append(word)
    return names
