"""Where the Snakemake rules read and write, by stage and key (a key may be a wildcard like "{key}"): the
rule outputs (done stamp and built marker, both outside the artifact, which the stage commits itself), logs,
benchmarks, the track step's stamps, the run report and the exports. Machine-local: under the work
directory, never part of a key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runlib.spec import RunSpec
from runlib.store.settings import built_marker, done_stamp
from runlib.track.mlflow_track import parent_identity
from runlib.util.report_dirs import report_dir


@dataclass(frozen=True)
class RulePaths:
    work: Path
    spec: RunSpec
    spec_path: str

    def done(self, stage: str, key: str = "{key}") -> str:
        return str(done_stamp(stage, key))

    def built(self, stage: str, key: str = "{key}") -> str:
        return str(built_marker(stage, key))

    def outputs(self, stage: str) -> dict[str, str]:
        """A rule's outputs: the done stamp and the built marker, both outside the artifact (which the
        stage itself commits)."""
        return {"done": self.done(stage), "built": self.built(stage)}

    def log(self, stage: str, key: str = "{key}") -> str:
        return str(self.work / "logs" / stage / f"{key}.log")

    def benchmark(self, stage: str, key: str = "{key}") -> str:
        return str(self.work / "benchmarks" / stage / f"{key}.tsv")

    def tracked(self, key: str = "{key}") -> str:
        """The track rule's stamp for the training phase with `key`, under this spec's MLflow parent
        (runlib.track.mlflow_track.parent_identity: store, experiment, spec name and key)."""
        return str(self.work / "tracked" / parent_identity(self.spec) / key)

    def track_log(self) -> str:
        return str(Path(self.log("track", "{key}")).parent / Path(self.tracked()).parent.name / "{key}.log")

    def report_dir(self) -> str:
        """The spec file's run report directory (runlib.util.report_dirs: reports/<run>/run for the file named
        after its run, reports/<run>/run-<file stem> for a variant), passed to `runlib report --out`."""
        return str(report_dir(self.spec.name, self.spec_path, "run"))

    def report(self) -> dict[str, str]:
        """The run report: a view for people, rebuilt whenever a stage it shows changes key."""
        run_dir = Path(self.report_dir())
        return {"markdown": str(run_dir / "report.md"), "html": str(run_dir / "report.html")}

    def export_dir(self) -> str:
        """Where `snakemake exports/<run>/<phase>` writes a phase's Hugging Face export (rules/export.smk)."""
        return str(Path("exports") / self.spec.name / "{phase}")
