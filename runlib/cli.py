"""The one entry point: `runlib audit|explain|plan|verify|schema|<stage> ...` (also `python -m runlib`).

Exit status: 0 fine, 1 the audit found errors (or warnings with --strict), 2 bad input or usage.
Heavy imports (matplotlib) happen only in the commands that need them; torch never here.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

from runlib.errors import UserError


def _cmd_audit(args: argparse.Namespace) -> int:
    from runlib.audit import audit_spec_file

    result = audit_spec_file(args.spec)
    if args.format == "json":
        from runlib.audit.render.json_view import render

        print(render(result))
    elif args.format == "text":
        from runlib.audit.render.text import render

        sys.stdout.write(render(result))
    else:
        from runlib.audit.render.report import default_report_dir, write_report
        from runlib.audit.render.text import render

        out = Path(args.out) if args.out else default_report_dir(result)
        path = write_report(result, out, args.format)
        sys.stdout.write(render(result))
        print(f"report: {path}")
    return result.exit_code(strict=args.strict)


def _cmd_explain(args: argparse.Namespace) -> int:
    from runlib.audit.checks import all_checks, get_check

    if not args.code:
        for c in all_checks():
            print(f"{c.code:<9} {c.severity:<8} {c.name}")
        return 0
    check = get_check(args.code)
    if check is None:
        codes = [c.code for c in all_checks()]
        guess = difflib.get_close_matches(args.code.upper(), codes, n=1)
        hint = f"; did you mean {guess[0]}?" if guess else "; `runlib explain` lists them"
        raise UserError(f"runlib explain: unknown check code {args.code!r}{hint}")
    print(f"{check.code} ({check.name}), default severity: {check.severity}\n")
    print(check.doc)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from runlib.spec.schema_export import schema_json

    text = schema_json()
    if args.out:
        from runlib.util.atomic import write_text_atomic

        write_text_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from runlib.spec import load_spec
    from runlib.workflow.graph import build_graph
    from runlib.workflow.plan_view import find_instance, plan_rows, render, stage_view

    graph = build_graph(load_spec(args.spec).spec)
    if args.stage:  # one stage's config (JSON whatever --format says: it is the config itself)
        print(json.dumps(stage_view(graph, find_instance(graph, args.stage)), indent=2))
        return 0
    rows = plan_rows(graph)
    if args.format == "json":
        print(json.dumps({"spec": args.spec, "stages": rows}, indent=2))
    else:
        sys.stdout.write(render(rows, args.spec))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """Every built artifact of the spec (or of --stage) against its manifest: sizes and XXH3-128 digests."""
    import time

    from runlib.spec import load_spec
    from runlib.workflow.artifacts import is_built, verify_artifact
    from runlib.workflow.graph import build_graph
    from runlib.workflow.keys import STAGE_VERSIONS
    from runlib.workflow.manifest import rebuild_advice
    from runlib.workflow.plan_view import find_instance

    if not args.spec:
        raise UserError("runlib verify: give the spec (or set RUNLIB_SPEC)")
    graph = build_graph(load_spec(args.spec).spec)
    if not args.stage:
        nodes = list(graph.nodes)
    elif args.stage in STAGE_VERSIONS:
        nodes = graph.of(args.stage)
    else:
        nodes = [find_instance(graph, args.stage)]
    started = time.perf_counter()
    checked_bytes, failed, unbuilt = 0, 0, 0
    print(f"verify {args.spec}")
    for node in nodes:
        where = f"{node.instance[:28]:<28} {node.stage + '/' + node.key:<33}"
        if not is_built(node):
            unbuilt += 1
            print(f"  {'not built':<9} {where}")
            continue
        v = verify_artifact(node.dir, full=True)
        checked_bytes += v.checked_bytes
        print(f"  {'ok' if v.ok else 'FAILED':<9} {where}  {v.checked_bytes / 1e9:8.3f} GB  {v.seconds:7.2f} s")
        if not v.ok:
            failed += 1
            for problem in v.problems:
                print(f"            {problem}")
            print(f"            {rebuild_advice(node.dir, args.spec)}")
    seconds = time.perf_counter() - started
    gigabytes = checked_bytes / 1e9
    rate = f"{seconds / gigabytes:.2f} s/GB" if checked_bytes >= 1e8 else "too little data for a rate"
    built = len(nodes) - unbuilt
    print(
        f"{built} built artifact(s) verified, {failed} FAILED, {unbuilt} not built: "
        f"{gigabytes:.3f} GB in {seconds:.2f} s ({rate}; XXH3-128, one core)"
    )
    return 2 if failed else 0


def _cmd_stage(args: argparse.Namespace) -> int:
    from runlib.workflow.stages import run_stage

    if not args.spec:
        raise UserError(f"runlib {args.stage.replace('_', '-')}: give --spec (or set RUNLIB_SPEC)")
    run_stage(args.stage, args.spec, args.key)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from runlib.report.run_report import main_report

    if not args.spec:
        raise UserError("runlib report: give the spec (or set RUNLIB_SPEC)")
    return main_report(args.spec, args.out, track=args.track)


def _cmd_track(args: argparse.Namespace) -> int:
    from runlib.track.resync import main_resync

    if not args.resync:
        raise UserError("runlib track: give --resync (rebuild the spec's MLflow records from the manifests)")
    if not args.spec:
        raise UserError("runlib track --resync: give the spec (or set RUNLIB_SPEC)")
    return main_resync(args.spec, stamp=args.stamp)


STAGE_COMMANDS = {
    "curate-shard": "curate one shard of one source (normalize, filter, dedup within the shard)",
    "curate-source": "join a source's shards: dedup across shards, split off the held-out documents",
    "train-tokenizer": "train the byte-level BPE tokenizer on the train_on mixture",
    "tokenize": "tokenize one curated source into token shards (train and held-out)",
    "train-phase": "train one phase from the previous phase's end (accelerate launch, one process per device)",
    "eval-phase": "evaluate a phase's model: held-out loss per source and the spec's tasks",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runlib", description="Audit and run LLM pre-training specs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("audit", help="derive every quantity of a spec and check it for inconsistencies")
    p.add_argument("spec", help="run spec (YAML)")
    p.add_argument("--format", choices=["text", "json", "markdown", "html"], default="text")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--out", help="report directory for markdown/html (default reports/<run name>)")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("explain", help="print a check's documentation (no code: list all checks)")
    p.add_argument("code", nargs="?")
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("plan", help="list every stage of the spec with its key and whether it is built")
    p.add_argument("spec", help="run spec (YAML)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument(
        "--stage",
        metavar="INSTANCE",
        help="print this stage's config, key and input keys as JSON (an instance name such as "
        "'train_phase long' or 'curate_shard code/0', or a key)",
    )
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("verify", help="check every built artifact of the spec against its manifest (sizes, digests)")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument(
        "--stage",
        metavar="S",
        help="only this stage kind (e.g. tokenize), or one instance ('train_phase long', 'curate_shard code/0') or key",
    )
    p.set_defaults(func=_cmd_verify)

    for command, text in STAGE_COMMANDS.items():
        p = sub.add_parser(command, help=f"stage: {text}")
        p.add_argument("--spec", default=os.environ.get("RUNLIB_SPEC"), help="run spec (YAML); default $RUNLIB_SPEC")
        p.add_argument("--key", required=True, help="the stage key (the artifact folder name)")
        # stages never record themselves in MLflow (the workflow's track rule does); kept for old scripts
        p.add_argument("--no-track", action="store_true", help=argparse.SUPPRESS)
        p.set_defaults(func=_cmd_stage, stage=command.replace("-", "_"))

    p = sub.add_parser("report", help="write the run report (loss, LR, eval tables, wall time per stage)")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument("--out", help="report directory (default reports/<run name>/run)")
    p.add_argument("--track", action="store_true", help="also log the report to the spec's MLflow parent run")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("track", help="MLflow records: --resync rebuilds them from the manifests of the built artifacts")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument(
        "--resync",
        action="store_true",
        help="record every built artifact of the spec that MLflow lacks (parent run, one child per artifact)",
    )
    p.add_argument(
        "--stamp",
        metavar="FILE",
        help="the workflow's track rule: write FILE when done, and make a tracking failure a warning (exit 0)",
    )
    p.set_defaults(func=_cmd_track)

    p = sub.add_parser("schema", help="print the JSON schema of the run spec")
    p.add_argument("--out", help="write it to this file instead")
    p.set_defaults(func=_cmd_schema)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return args.func(args)
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
