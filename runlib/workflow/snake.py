"""What the Snakefile and rules/*.smk call: the gate, paths by stage and key, input functions.

The Snakefile stays declarative; everything that computes lives here. An artifact's path names its
content (its key), so Snakemake's own rerun triggers must never fire for an artifact that exists, and
Snakemake must never delete one:
- a rule's outputs are two small files outside the artifact directory, the done stamp and the built
  marker (runlib.workflow.settings), written atomically after the artifact's commit (the protocol in
  runlib.workflow.artifacts). What Snakemake deletes after a kill (`--rerun-incomplete`) or a failure
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

import os
import sys
from pathlib import Path

from runlib.errors import SpecError, UserError
from runlib.workflow.graph import StageGraph, build_graph
from runlib.workflow.settings import built_marker, done_stamp, work_dir

KEY_PATTERN = "[0-9a-f]{16}"


class GateRefused(Exception):
    """The spec does not load or its audit has errors: the DAG is not built."""


class Workflow:
    def __init__(self, spec_path: str):
        from runlib.audit import audit_loaded
        from runlib.audit.render.text import render
        from runlib.spec import load_spec

        self.spec_path = spec_path
        if not Path(spec_path).exists():
            raise GateRefused(f"--config spec={spec_path}: file not found")
        # stage jobs read these (Slurm jobs get them through --export=ALL); rebuild advice names the spec
        os.environ["RUNLIB_SPEC"] = str(Path(spec_path).resolve())
        try:
            loaded = load_spec(spec_path)
            result = audit_loaded(loaded, use_measured=True)
        except SpecError as exc:
            print(str(exc), file=sys.stderr)
            raise GateRefused(f"{spec_path} does not load (see above); fix it before running the workflow") from None
        except UserError as exc:  # e.g. a tokenize manifest the audit reads measured counts from does not verify
            raise GateRefused(str(exc)) from None
        if result.count("error"):
            sys.stderr.write(render(result))
            raise GateRefused(
                f"{spec_path}: the audit found {result.count('error')} error(s) (listed above); "
                "no job was started. Fix the spec, or silence a finding in audit.ignore with a reason."
            )
        # RUN findings (runlib.audit.enact): values the trainer cannot enact; audit.ignore does not lift them
        refused = [f for f in result.findings + [i.finding for i in result.ignored] if f.code.startswith("RUN")]
        if refused:
            for f in refused:
                where = f"{result.file}:{f.line}: " if f.line else f"{result.file}: "
                print(f"{where}{f.code} {f.path}: {f.message}\n    fix: {f.fix}", file=sys.stderr)
            raise GateRefused(
                f"{spec_path}: {len(refused)} value(s) this machine cannot run (a layout, an input format or a "
                "file the spec names; listed above); no job was started. "
                "Change them as each fix says."
            )
        # lm-eval tasks (runlib.eval.harness.gate): what this machine cannot run (not installed, a task file
        # missing, a download while offline), before any job
        from runlib.eval.harness.gate import harness_refusals

        harness = harness_refusals(loaded.spec.eval.tasks, loaded.spec.model)
        if harness:
            for r in harness:
                pos = loaded.source_map.position(r.field)
                where = f"{spec_path}:{pos[0]}: " if pos else f"{spec_path}: "
                print(f"{where}{r.field}: {r.problem}\n    fix: {r.fix}", file=sys.stderr)
            raise GateRefused(
                f"{spec_path}: {len(harness)} lm-eval task setting(s) cannot run on this machine (listed above); "
                "no job was started."
            )
        self.spec = loaded.spec
        try:
            self.graph: StageGraph = build_graph(self.spec)
        except UserError as exc:
            # a source's files are missing (the audit warns: SRC001): show those findings at their lines too
            for f in result.findings + [i.finding for i in result.ignored]:
                if f.code == "SRC001":
                    where = f"{result.file}:{f.line}: " if f.line else f"{result.file}: "
                    print(f"{where}{f.code} {f.path}: {f.message}\n    fix: {f.fix}", file=sys.stderr)
            raise GateRefused(str(exc)) from None
        self.work = work_dir()
        os.environ["RUNLIB_PYTHON"] = sys.executable
        os.environ["RUNLIB_WORK_DIR"] = str(self.work.resolve())
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

    # paths by stage and key (a key may be a wildcard like "{key}")
    def done(self, stage: str, key: str = "{key}") -> str:
        return str(done_stamp(stage, key))

    def outputs(self, stage: str) -> dict[str, str]:
        """A rule's outputs: the done stamp and the built marker, both outside the artifact (which the
        stage itself commits)."""
        return {"done": self.done(stage), "built": str(built_marker(stage, "{key}"))}

    def log(self, stage: str, key: str = "{key}") -> str:
        return str(self.work / "logs" / stage / f"{key}.log")

    def benchmark(self, stage: str, key: str = "{key}") -> str:
        return str(self.work / "benchmarks" / stage / f"{key}.tsv")

    def inputs(self, stage: str):
        """An input function for a rule: the done stamps of the node's inputs, marked ancient."""
        from snakemake.io import ancient

        def function(wildcards) -> list[str]:
            node = self.graph.by_key(stage, wildcards.key)
            return [ancient(self.done(n.stage, n.key)) for n in self.graph.input_nodes(node).values()]

        return function

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

    def train_processes(self) -> int:
        """Processes a training job starts on its node (the most of any phase; RUNLIB_PROCESSES overrides)."""
        from runlib.train.phase import processes_per_node

        return max((processes_per_node(n.config) for n in self.graph.of("train_phase")), default=1)

    def train_resources(self) -> dict:
        """Slurm resources of each train_phase job, from the plan of its phase (one rule serves every
        phase, so each value is a function of the job's wildcards): nodes, a task per node (one
        `accelerate launch` each), a core per process, host memory and a time limit from the plan's
        estimates with a margin (runlib.train.launch.slurm_resources says how)."""
        from runlib.train.launch import phase_job_resources
        from runlib.train.phase import processes_per_node

        cache: dict[str, dict] = {}

        def of(key: str) -> dict:
            if key not in cache:
                node = self.graph.by_key("train_phase", key)
                config = node.config
                cache[key] = phase_job_resources(
                    config.parallel, config.accelerator, processes_per_node(config), self.phase_plan(node)
                )
            return cache[key]

        def value(name: str):
            return lambda wildcards: of(wildcards.key)[name]

        phases = self.graph.of("train_phase")
        names = of(phases[0].key).keys() if phases else ()
        return {name: value(name) for name in names}

    def phase_plan(self, node):
        """The plan of a train_phase node's phase: the spec's, its ladder rung's (runlib.ladder.rungs) or its
        branch's (runlib.workflow.configs.branch_specs, under '@<branch>')."""
        from runlib.plan import derive
        from runlib.workflow.graph import is_branch, is_rung

        if not hasattr(self, "_plans"):
            from runlib.ladder.rungs import ladder_rungs
            from runlib.workflow.configs import branch_specs

            plan = derive(self.spec)
            branches = {f"@{name}": derive(spec) for name, spec in branch_specs(self.spec, plan).items()}
            self._plans = {None: plan, **{r.name: r.plan for r in ladder_rungs(self.spec, plan).rungs}, **branches}
        which = node.params["rung"] if is_rung(node) else f"@{node.params['branch']}" if is_branch(node) else None
        return self._plans[which].phases[node.config.phase_index]

    def tracked(self, key: str = "{key}") -> str:
        """The track rule's stamp for the training phase with `key`, under this spec's MLflow parent."""
        from runlib.track.mlflow_track import parent_identity

        if not hasattr(self, "_parent_identity"):
            self._parent_identity = parent_identity(self.spec)
        return str(self.work / "tracked" / self._parent_identity / key)

    def track_log(self) -> str:
        return str(Path(self.log("track", "{key}")).parent / Path(self.tracked()).parent.name / "{key}.log")

    def track_inputs(self):
        """An input function for the track rule: the done stamps of a training phase and of its evaluations,
        marked ancient (a rebuilt artifact keeps its key, so its record stands)."""
        from snakemake.io import ancient

        from runlib.workflow.graph import is_rung

        def function(wildcards) -> list[str]:
            fits = [n for n in self.graph.of("fit_ladder") if n.key == wildcards.key]
            if fits:  # a ladder is tracked once, after its fit: every rung's stages and the fit
                nodes = [n for n in self.graph.nodes if is_rung(n)] + fits
            else:
                train = self.graph.by_key("train_phase", wildcards.key)
                nodes = [train, *(n for n in self.graph.of("eval_phase") if train.key in n.inputs.values())]
            return [ancient(self.done(n.stage, n.key)) for n in nodes]

        return function

    def track_targets(self) -> list[str]:
        """One track stamp per training phase of the run (the data stages are recorded by the first) and
        one for a ladder's rungs and fit (keyed by the fit: one MLflow process for all the rungs)."""
        from runlib.workflow.graph import is_rung

        phases = [n for n in self.graph.of("train_phase") if not is_rung(n)]
        return [self.tracked(n.key) for n in [*phases, *self.graph.of("fit_ladder")]]

    def report_dir(self) -> str:
        """The spec file's run report directory (runlib.util.report_dirs: reports/<run>/run for the file named
        after its run, reports/<run>/run-<file stem> for a variant), passed to `runlib report --out`."""
        from runlib.util.report_dirs import report_dir

        return str(report_dir(self.spec.name, self.spec_path, "run"))

    def report(self) -> dict[str, str]:
        """The run report: a view for people, rebuilt whenever a stage it shows changes key."""
        run_dir = Path(self.report_dir())
        return {"markdown": str(run_dir / "report.md"), "html": str(run_dir / "report.html")}

    def report_inputs(self) -> list[str]:
        """The training and evaluation done stamps, and the track stamps: the report logs itself to the
        spec's parent run once every stage is recorded there."""
        shown = ("train_phase", "eval_phase", "fit_ladder")
        done = [self.done(n.stage, n.key) for n in self.graph.nodes if n.stage in shown]
        return done + self.track_targets()

    def progress_start(self) -> None:
        """The Snakefile's onstart: the console view of runlib.workflow.progress (stage names, training
        step, tokens, loss, tokens/s, ETA)."""
        import math

        from runlib.train.phase import scratch_dir
        from runlib.workflow import progress

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
        from runlib.workflow import progress
        from runlib.workflow.settings import tracking_uri

        lines = progress.summary_lines(self.spec_path, self.spec.name, tracking_uri(), ok)
        progress.finish(getattr(self, "_progress", None), lines)

    def export_dir(self) -> str:
        """Where `snakemake exports/<run>/<phase>` writes a phase's Hugging Face export (rules/export.smk)."""
        return str(Path("exports") / self.spec.name / "{phase}")

    def export_inputs(self, wildcards) -> list[str]:
        """The stamps of the phase to export (an input function: the phase is the target's wildcard)."""
        node = self.graph.named_phase_node(self.spec, "train_phase", wildcards.phase, f"exports/{self.spec.name}")
        return [self.done(node.stage, node.key), str(built_marker(node.stage, node.key))]

    def targets(self, *stages: str) -> list[str]:
        """Both outputs of every node of these stages (all stages when none are named): Snakemake reruns a
        job for a missing output only when something requests that output."""
        nodes = [n for n in self.graph.nodes if not stages or n.stage in stages]
        return [path for n in nodes for path in (self.done(n.stage, n.key), str(built_marker(n.stage, n.key)))]


def load_workflow(spec_path: str) -> Workflow:
    """The workflow of a spec; a refusal prints its reason and ends Snakemake (exit 1), no traceback."""
    try:
        return Workflow(spec_path)
    except GateRefused as exc:
        print(f"runlib: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
