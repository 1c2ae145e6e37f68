"""What the Snakefile and rules/*.smk call: one Workflow per spec, made of the gate (runlib.workflow.gate),
the rules' paths (runlib.workflow.paths), the jobs' resources (runlib.workflow.resources), the input functions
and the console progress hooks.

The Snakefile stays declarative; everything that computes lives here. An artifact's path names its
content (its key), so Snakemake's own rerun triggers must never fire for an artifact that exists, and
Snakemake must never delete one:
- a rule's outputs are two small files outside the artifact directory, the done stamp and the built
  marker (runlib.store.settings), written atomically after the artifact's commit (the protocol in
  runlib.store.artifacts). What Snakemake deletes after a kill (`--rerun-incomplete`) or a failure
  is those, never the artifact; the rerun finds the artifact committed, verifies it and rewrites them
  without rebuilding;
- downstream rules depend on the done stamp, marked ancient, so neither a newer upstream stamp nor a
  rebuilt upstream artifact (same key, same content) reruns them;
- an artifact whose folder was deleted by hand loses its built marker when the Snakefile loads
  (Workflow.drop_stale_markers): Snakemake reruns that job for the missing output (rule all requests
  the markers too), and nothing downstream, whose input (the stamp) is still there. (A missing stamp would rerun every job
  downstream: Snakemake honours ancient() only for files that exist, snakemake/dag.py update_needrun.)
- the shell line is the same for every spec and machine (the spec path and the interpreter come
  from the environment), so the code trigger cannot fire when another spec shares an artifact; every
  path in it is quoted (`{log:q}`: a work directory with spaces works);
- rules have no params, so the params trigger has nothing to compare.

Tracking (runlib.track) is a rule of its own, `track` (a local rule): after each training phase and its
evaluation, one job records every built artifact of the spec in MLflow (`runlib track --resync --stamp`);
the report waits for all of them. Its stamp is named by the phase's key and the spec's MLflow parent
(store, experiment, spec name and key: runlib.track.mlflow_track.parent_identity), its inputs are ancient
done stamps: a rebuilt artifact (same key) is not tracked again, a renamed spec or another tracking URI is.
Stage jobs never import mlflow.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from snakemake.io import ancient

from runlib.graph.build import StageGraph, is_rung
from runlib.plan.derive import PhasePlan
from runlib.store.node import StageNode
from runlib.store.settings import built_marker, tracking_uri, work_dir
from runlib.train.phase import scratch_dir
from runlib.workflow import progress
from runlib.workflow.gate import GateRefused, open_gate
from runlib.workflow.paths import RulePaths
from runlib.workflow.resources import JobResources, Wildcards

KEY_PATTERN = "[0-9a-f]{16}"
InputFunction = Callable[[Wildcards], list[str]]


class Workflow:
    """The spec's workflow as the rules see it: paths, input functions, resources, progress hooks."""

    def __init__(self, spec_path: str):
        self.spec_path = spec_path
        if Path(spec_path).exists():
            # stage jobs read these (Slurm jobs get them through --export=ALL); rebuild advice names the spec
            os.environ["RUNLIB_SPEC"] = str(Path(spec_path).resolve())
        opened = open_gate(spec_path)
        self.spec, self.graph = opened.spec, opened.graph
        self.work = work_dir()
        os.environ["RUNLIB_PYTHON"] = sys.executable
        os.environ["RUNLIB_WORK_DIR"] = str(self.work.resolve())
        self.paths = RulePaths(self.work, self.spec, spec_path)
        self.jobs = JobResources(self.spec, self.graph)
        self._progress: progress.Running | None = None
        self.drop_stale_markers()

    def drop_stale_markers(self) -> list[str]:
        """Remove the built marker of every artifact of this spec whose folder is gone (deleted by hand, e.g.
        as a verification error advises): the marker is written only after the commit, so one without a
        manifest is stale, and its absence makes Snakemake rerun that job alone (settings.built_marker)."""
        dropped = []
        for node in self.graph.nodes:
            marker = built_marker(node.stage, node.key)
            if marker.exists() and not node.manifest_path.exists():
                marker.unlink(missing_ok=True)
                dropped.append(node.instance)
                print(f"runlib: {node.instance}: {node.dir} is gone; it will be rebuilt", file=sys.stderr)
        return dropped

    # ------------------------------------------------------------------ what the rules name (paths)
    def done(self, stage: str, key: str = "{key}") -> str:
        return self.paths.done(stage, key)

    def outputs(self, stage: str) -> dict[str, str]:
        return self.paths.outputs(stage)

    def log(self, stage: str, key: str = "{key}") -> str:
        return self.paths.log(stage, key)

    def benchmark(self, stage: str, key: str = "{key}") -> str:
        return self.paths.benchmark(stage, key)

    def tracked(self, key: str = "{key}") -> str:
        return self.paths.tracked(key)

    def track_log(self) -> str:
        return self.paths.track_log()

    def report_dir(self) -> str:
        return self.paths.report_dir()

    def report(self) -> dict[str, str]:
        return self.paths.report()

    def export_dir(self) -> str:
        return self.paths.export_dir()

    # ------------------------------------------------------------------ what the jobs get (resources)
    def threads(self, stage: str) -> int:
        return self.jobs.threads(stage)

    def resources(self, stage: str) -> dict[str, int | Callable[..., int | str]]:
        return self.jobs.resources(stage)

    def phase_plan(self, node: StageNode) -> PhasePlan:
        return self.jobs.phase_plan(node)

    @staticmethod
    def command(stage: str) -> str:
        # RAYON_NUM_THREADS: tokenizers would otherwise use every core, whatever the rule's threads.
        # `>>`: two specs sharing a stage (one work dir, two snakemake runs) run one job each on the same
        # log; the one waiting for the build lock once truncated the builder's log.
        # run_stage heads each attempt with its pid and time. Snakemake also deletes a job's declared log
        # before the job runs (snakemake/jobs.py, Job.remove_existing_output), which unlinked the builder's
        # log under it and a killed attempt's log at the rerun: so the declared log is a symlink to
        # <key>.attempts.log, which holds every attempt; deleting the link leaves the attempts file.
        return (
            "ln -sfn {wildcards.key:q}.attempts.log {log:q} && "
            f'RAYON_NUM_THREADS={{threads}} "$RUNLIB_PYTHON" -m runlib {stage.replace("_", "-")} '
            '--key {wildcards.key:q} >> "$(dirname {log:q})"/{wildcards.key:q}.attempts.log 2>&1'
        )

    # ------------------------------------------------------------------ input functions and targets
    def _stamps(self, nodes: list[StageNode]) -> list[str]:
        """The done stamps of nodes, marked ancient (a rebuilt artifact keeps its key: nothing reruns)."""
        return [ancient(self.done(n.stage, n.key)) for n in nodes]

    def inputs(self, stage: str) -> InputFunction:
        """An input function for a rule: the done stamps of the node's inputs, marked ancient."""

        def function(wildcards: Wildcards) -> list[str]:
            node = self.graph.by_key(stage, wildcards.key)
            return self._stamps(list(self.graph.input_nodes(node).values()))

        return function

    def track_inputs(self) -> InputFunction:
        """An input function for the track rule: the done stamps of a training phase and of its evaluations,
        marked ancient (a rebuilt artifact keeps its key, so its record stands)."""

        def function(wildcards: Wildcards) -> list[str]:
            fits = [n for n in self.graph.of("fit_ladder") if n.key == wildcards.key]
            if fits:  # a ladder is tracked once, after its fit: every rung's stages and the fit
                nodes = [n for n in self.graph.nodes if is_rung(n)] + fits
            else:
                stage = (
                    "soup_phase" if any(n.key == wildcards.key for n in self.graph.of("soup_phase")) else "train_phase"
                )
                train = self.graph.by_key(stage, wildcards.key)
                nodes = [train, *(n for n in self.graph.of("eval_phase") if train.key in n.inputs.values())]
            return self._stamps(nodes)

        return function

    def track_targets(self) -> list[str]:
        """One track stamp per training phase of the run (the data stages are recorded by the first), one for
        a soup (PhaseSpec.soup) and one for a ladder's rungs and fit (keyed by the fit: one MLflow process for all the rungs)."""
        phases = [n for n in self.graph.of("train_phase") if not is_rung(n)]
        return [self.tracked(n.key) for n in [*phases, *self.graph.of("soup_phase"), *self.graph.of("fit_ladder")]]

    def report_inputs(self) -> list[str]:
        """The training and evaluation done stamps, and the track stamps: the report logs itself to the
        spec's parent run once every stage is recorded there."""
        shown = ("train_phase", "soup_phase", "eval_phase", "fit_ladder")
        done = [self.done(n.stage, n.key) for n in self.graph.nodes if n.stage in shown]
        return done + self.track_targets()

    def export_inputs(self, wildcards: Wildcards) -> list[str]:
        """The stamps of the phase to export (an input function: the phase is the target's wildcard)."""
        node = self.graph.named_phase_node(self.spec, "train_phase", wildcards.phase, f"exports/{self.spec.name}")
        return [self.done(node.stage, node.key), str(built_marker(node.stage, node.key))]

    def targets(self, *stages: str) -> list[str]:
        """Both outputs of every node of these stages (all stages when none are named): Snakemake reruns a
        job for a missing output only when something requests that output."""
        nodes = [n for n in self.graph.nodes if not stages or n.stage in stages]
        return [path for n in nodes for path in (self.done(n.stage, n.key), str(built_marker(n.stage, n.key)))]

    # ------------------------------------------------------------------ console progress
    def progress_start(self) -> None:
        """The Snakefile's onstart: the console view of runlib.workflow.progress (stage names, training
        step, tokens, loss, tokens/s, ETA)."""
        try:
            phases = []
            for node in self.graph.of("train_phase"):
                planned = self.phase_plan(node)
                seconds = planned.hours * 3600 if planned.hours is not None and math.isfinite(planned.hours) else None
                phases.append(progress.PhaseTime(node.key, node.instance, planned.span.tokens, seconds))
            labels = {(n.stage, n.key): n.instance for n in self.graph.nodes}
            self._progress = progress.start(labels, phases, scratch_dir)
            if self._progress is not None:  # phases built before this run count as done for the ETA
                built = [n.key for n in self.graph.of("train_phase") if n.done_path.exists()]
                self._progress.view.finished.update(built)
        except Exception as exc:  # a view must never stop the run
            print(f"runlib: warning: no console progress ({type(exc).__name__}: {exc})", file=sys.stderr)

    def progress_end(self, ok: bool) -> None:
        """The Snakefile's onsuccess / onerror: stop the view; print the report, audit and MLflow pointers."""
        lines = progress.summary_lines(self.spec_path, self.spec.name, tracking_uri(), ok)
        progress.finish(self._progress, lines)


def load_workflow(spec_path: str) -> Workflow:
    """The workflow of a spec; a refusal prints its reason and ends Snakemake (exit 1), no traceback."""
    try:
        return Workflow(spec_path)
    except GateRefused as exc:
        print(f"runlib: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


__all__ = ["KEY_PATTERN", "GateRefused", "StageGraph", "Workflow", "load_workflow"]
