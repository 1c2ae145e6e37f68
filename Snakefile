# runlib: a run spec expanded into a DAG of content-addressed stages.
#   snakemake --cores 2                                  (specs/demo.yaml)
#   snakemake --cores 2 --config spec=specs/other.yaml
#   snakemake --profile cluster --config spec=...         (Slurm)
# The gate audits the spec first and refuses to build the DAG while the audit has errors.
import sys

from runlib.workflow.snake import load_workflow, KEY_PATTERN
from runlib.workflow.until import until_from_argv, until_refusal

WF = load_workflow(str(config.get("spec", "specs/demo.yaml")))

# `--until train_phase` ran into Snakemake's "BUG: Out of jobs ready" (runlib/workflow/until.py): refused
_UNTIL = until_refusal(until_from_argv(sys.argv), WF.graph, WF.done, WF.spec_path)
if _UNTIL:
    sys.stderr.write(f"runlib: {_UNTIL}\n")
    raise SystemExit(1)


wildcard_constraints:
    key=KEY_PATTERN,


include: "rules/curate.smk"
include: "rules/tokenizer.smk"
include: "rules/tokenize.smk"
include: "rules/train.smk"
include: "rules/soup.smk"
include: "rules/eval.smk"
include: "rules/ladder.smk"
include: "rules/track.smk"
include: "rules/report.smk"
include: "rules/export.smk"


# console progress (stage names, training step / tokens / loss / tokens/s / ETA) and, at the end, where the
# reports and MLflow are: runlib/workflow/progress.py. RUNLIB_PROGRESS=0 turns the view off.
onstart:
    WF.progress_start()


onsuccess:
    WF.progress_end(True)


onerror:
    WF.progress_end(False)


rule all:
    input:
        WF.targets(),
        **WF.report(),
