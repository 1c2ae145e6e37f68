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
from typing import TYPE_CHECKING

from runlib.errors import UserError
from runlib.graph.registry import STAGES


def _cmd_audit(args: argparse.Namespace) -> int:
    from runlib.errors import SpecError
    from runlib.graph.measured import audit_spec_file

    try:
        result = audit_spec_file(args.spec)
    except SpecError as exc:
        if args.format != "json":
            raise
        from runlib.audit.render.json_view import render_load_failure

        print(render_load_failure(args.spec, exc.diagnostics))  # the contract holds: JSON on stdout, exit 2
        print(str(exc), file=sys.stderr)
        return 2
    if args.format == "json":
        from runlib.audit.render.json_view import render

        print(render(result))
    elif args.format == "text":
        from runlib.audit.render.text import render

        sys.stdout.write(render(result))
    else:
        from runlib.audit.render.report import FILE_NAMES, default_report_dir, write_report
        from runlib.audit.render.text import render

        out = Path(args.out) if args.out else default_report_dir(result)
        path = write_report(result, out, args.format)
        sys.stdout.write(render(result))
        print(f"report: {path / FILE_NAMES[args.format]}")
    return result.exit_code(strict=args.strict)


def _cmd_explain(args: argparse.Namespace) -> int:
    from runlib.audit.checks import all_checks, get_check

    if args.code and args.code.lower() == "hardware":  # the accelerator catalog: hardware.accelerator's keys
        from runlib.spec.hardware import catalog_lines

        print("\n".join(catalog_lines()))
        return 0
    if not args.code:
        for c in all_checks():
            print(f"{c.code:<9} {c.severity:<8} {c.name}")
        return 0
    check = get_check(args.code)
    if check is None:
        codes = [c.code for c in all_checks()]
        guess = difflib.get_close_matches(args.code.upper(), codes, n=1)
        listing = "; `runlib explain` lists them (`runlib explain hardware`: the accelerators)"
        hint = f"; did you mean {guess[0]}?" if guess else listing
        raise UserError(f"runlib explain: unknown check code {args.code[:80]!r}{hint}")  # not 100 KB echoed back
    print(f"{check.code} ({check.name}), default severity: {check.severity}\n")
    print(check.doc)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from runlib.spec.schema_export import schema_json

    text = schema_json()
    if args.out:
        from runlib.util.atomic import write_output

        write_output(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from runlib.graph.build import build_graph
    from runlib.graph.plan_view import find_instance, plan_rows, render, stage_view
    from runlib.spec import load_spec

    loaded = load_spec(args.spec)
    if args.input_bytes:  # on paper: the spec's files need not exist, so no graph
        from runlib.graph.scale import render_scale, source_scale
        from runlib.spec.units import parse_count

        for item in args.input_bytes:
            name, equals, size = item.partition("=")
            if not equals or not name:
                raise UserError(f"--input-bytes {item}: give SOURCE=SIZE, e.g. --input-bytes web=100T")
            try:
                nbytes = parse_count(size)
            except ValueError as exc:
                raise UserError(f"--input-bytes {item}: {exc}; e.g. --input-bytes web=100T") from None
            if nbytes < 1:
                raise UserError(f"--input-bytes {item}: the size must be at least 1 byte")
            sys.stdout.write(render_scale(source_scale(loaded.spec, name, nbytes)))
        return 0
    graph = build_graph(loaded.spec)
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
    """Every built artifact of the spec (or of --stage) against its manifest (its MAC, sizes and XXH3-128
    digests) and its built inputs against what it recorded reading (the chain: runlib.store.artifacts)."""
    import time

    from runlib.graph.build import build_graph
    from runlib.graph.plan_view import find_instance
    from runlib.spec import load_spec
    from runlib.store.artifacts import is_built, verify_artifact
    from runlib.store.manifest import rebuild_advice

    if not args.spec:
        raise UserError("runlib verify: give the spec (or set RUNLIB_SPEC)")
    graph = build_graph(load_spec(args.spec).spec)
    if not args.stage:
        nodes = list(graph.nodes)
    elif args.stage in STAGES:
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
    from runlib.graph.stages import run_stage

    if not args.spec:
        raise UserError(f"runlib {args.stage.replace('_', '-')}: give --spec (or set RUNLIB_SPEC)")
    run_stage(args.stage, args.spec, args.key)
    return 0


def _cmd_docs(args: argparse.Namespace) -> int:
    """The documents curation kept or dropped, as JSONL (runlib.report.curated_docs)."""
    from runlib.report.curated_docs import curated_docs

    if not args.spec:
        raise UserError("runlib docs: give the spec (or set RUNLIB_SPEC)")
    if args.limit is not None and args.limit < 0:
        raise UserError(f"--limit {args.limit}: give 0 or more documents")
    for n, line in enumerate(curated_docs(args.spec, args.source, args.split, args.dropped, args.reason)):
        if args.limit is not None and n >= args.limit:
            break
        sys.stdout.write(line)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from runlib.report.run_report import main_report

    if not args.spec:
        raise UserError("runlib report: give the spec (or set RUNLIB_SPEC)")
    return main_report(args.spec, args.out, track=args.track)


def _cmd_export(args: argparse.Namespace) -> int:
    from runlib.graph.export import export_phase

    if not args.spec:
        raise UserError("runlib export: give the spec (or set RUNLIB_SPEC)")
    out = export_phase(args.spec, args.phase, Path(args.out))
    print(f"exported phase {args.phase!r} of {args.spec} to {out} (AutoModelForCausalLM.from_pretrained({str(out)!r}))")
    return 0


def _cmd_track(args: argparse.Namespace) -> int:
    from runlib.track.resync import main_resync

    if not args.resync:
        raise UserError("runlib track: give --resync (rebuild the spec's MLflow records from the manifests)")
    if not args.spec:
        raise UserError("runlib track --resync: give the spec (or set RUNLIB_SPEC)")
    return main_resync(args.spec, stamp=args.stamp)


def _cmd_diff(args: argparse.Namespace) -> int:
    """Two specs compared: fields, plan, findings, the stages that rerun (runlib.review.diff)."""
    from runlib.review.diff import as_json, diff_files, render_markdown, render_text

    d = diff_files(args.a, args.b)
    if args.format == "json":
        import json

        print(json.dumps(as_json(d), indent=2))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(d))
    else:
        sys.stdout.write(render_text(d))
    return d.exit_code()


def _cmd_shrink(args: argparse.Namespace) -> int:
    """A spec with the run's structure, scaled down to run on this machine (runlib.review.shrink)."""
    from runlib.review.shrink import shrink_file

    text, summary = shrink_file(args.spec, minutes=args.minutes, out=args.out or "SHRUNK.yaml")
    if args.out:
        from runlib.util.atomic import write_output

        write_output(args.out, text)
        print(summary, file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _write_review_spec(text: str, out: str | None, audit_text: str, what: str) -> None:
    """The spec to OUT (the audit to stdout) or to stdout (the audit to stderr, so the spec pipes clean)."""
    if out:
        from runlib.util.atomic import write_output

        write_output(out, text)
        sys.stdout.write(audit_text)
        print(f"{what}: {out}")
    else:
        sys.stdout.write(text)
        sys.stderr.write(audit_text)


def _cmd_import(args: argparse.Namespace) -> int:
    """A spec from a nanoGPT / Hugging Face / torchtitan / Megatron-LM config, then its audit (runlib.review.importers)."""
    from runlib.audit import audit_loaded
    from runlib.audit.render.text import render
    from runlib.review.importers import HardwareChoice, import_file
    from runlib.spec import load_spec_text

    for option in ("devices", "nodes"):
        value = getattr(args, option)
        if value is not None and not 1 <= value <= 1_000_000:
            raise UserError(f"runlib import: --{option} {value}: give a whole number from 1 to 1,000,000")
    hardware = HardwareChoice(args.devices, args.nodes, args.accelerator)
    imported = import_file(
        args.file, args.format, args.training_args, out_name=args.out or "<imported>", hardware=hardware
    )
    result = audit_loaded(load_spec_text(imported.text, args.out or "<imported>"))
    _write_review_spec(imported.text, args.out, render(result), f"imported ({imported.format})")
    return result.exit_code()


def _cmd_sample_web(args: argparse.Namespace) -> int:
    """A sample crawl made from this machine's pydoc pages (runlib.curate.sample_web)."""
    from pathlib import Path

    from runlib.curate.sample_web import DEMO_TOPICS, sample_crawl

    if not 1 <= args.files <= 1000:
        raise UserError(f"--files {args.files}: give 1 to 1000 WARC files")
    paths = sample_crawl(Path(args.directory), args.files, topics=DEMO_TOPICS)
    print(f"sample crawl: {', '.join(str(p) for p in paths)} and {Path(args.directory) / 'blocklist'}")
    return 0


def _cmd_propose(args: argparse.Namespace) -> int:
    """A spec that spends a hardware budget by the compute-optimal fit, then its audit (runlib.review.propose)."""
    from runlib.audit import audit_loaded
    from runlib.audit.render.text import render
    from runlib.review.propose import propose

    proposal = propose(args.accelerator, args.devices, args.days, data=args.data, mfu=args.mfu, name=args.name)
    loaded = proposal.loaded if not args.out else proposal.reload(args.out)
    result = audit_loaded(loaded)
    _write_review_spec(proposal.text, args.out, proposal.summary + render(result), "proposal")
    return result.exit_code()


if TYPE_CHECKING:
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]  # what add_subparsers returns


def _add_spec_commands(sub: Subcommands) -> None:
    """audit, explain, plan, verify: read the spec and what is built; never torch, accelerate or mlflow."""
    p = sub.add_parser("audit", help="derive every quantity of a spec and check it for inconsistencies")
    p.add_argument("spec", help="run spec (YAML)")
    p.add_argument("--format", choices=["text", "json", "markdown", "html"], default="text")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument(
        "--out",
        help="report directory for markdown/html (default reports/<run>/audit for the spec file named after "
        "its run, reports/<run>/audit-<file stem> for another file)",
    )
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser(
        "explain", help="print a check's documentation (no code: list all checks; `hardware`: the accelerator catalog)"
    )
    p.add_argument("code", nargs="?", help="a check code such as MIX003, or `hardware`")
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
    p.add_argument(
        "--input-bytes",
        metavar="SOURCE=SIZE",
        action="append",
        default=[],
        help="plan this source's data jobs on paper as if its input held SIZE bytes (e.g. web=100T; its files "
        "need not exist): jobs, memory and CPU-hours per stage from measured rates; repeat for more sources",
    )
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser(
        "verify",
        help="check every built artifact of the spec against its manifest (MAC, sizes, digests) and its inputs",
    )
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument(
        "--stage",
        metavar="S",
        help="only this stage kind (e.g. tokenize), or one instance ('train_phase long', 'curate_shard code/0') or key",
    )
    p.set_defaults(func=_cmd_verify)


def _add_workflow_commands(sub: Subcommands) -> None:
    """One subcommand per stage kind (runlib.graph.registry), and what the workflow's last rules call."""
    for kind in STAGES.values():  # one subcommand per stage kind (runlib.graph.registry)
        p = sub.add_parser(kind.command, help=f"stage: {kind.help}")
        p.add_argument("--spec", default=os.environ.get("RUNLIB_SPEC"), help="run spec (YAML); default $RUNLIB_SPEC")
        p.add_argument("--key", required=True, help="the stage key (the artifact folder name)")
        # stages never record themselves in MLflow (the workflow's track rule does); kept for old scripts
        p.add_argument("--no-track", action="store_true", help=argparse.SUPPRESS)
        p.set_defaults(func=_cmd_stage, stage=kind.name)

    p = sub.add_parser("report", help="write the run report (loss, LR, eval tables, wall time per stage)")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument(
        "--out",
        help="report directory (default reports/<run>/run for the spec file named after its run, "
        "reports/<run>/run-<file stem> for another file)",
    )
    p.add_argument("--track", action="store_true", help="also log the report to the spec's MLflow parent run")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("docs", help="stream a source's curated documents (or a sample of those dropped) as JSONL")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument("--source", required=True, help="the data.sources entry")
    p.add_argument("--split", choices=("train", "heldout"), default="train", help="kept documents: which split")
    p.add_argument("--dropped", action="store_true", help="the sample of dropped documents (curate.keep_dropped)")
    p.add_argument("--reason", help="with --dropped: only this reason (too_short) or step:reason (length:too_short)")
    p.add_argument("--limit", type=int, help="at most this many documents")
    p.set_defaults(func=_cmd_docs)

    p = sub.add_parser("export", help="write a built phase's model as a Hugging Face checkpoint (safetensors, config)")
    p.add_argument("spec", nargs="?", default=os.environ.get("RUNLIB_SPEC"), help="run spec (default $RUNLIB_SPEC)")
    p.add_argument("--phase", required=True, help="name of the phase whose final model to export")
    p.add_argument("--out", required=True, help="folder to write (replaced only if it is an earlier export)")
    p.set_defaults(func=_cmd_export)

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


def _add_review_commands(sub: Subcommands) -> None:
    """diff, shrink, import, propose, schema: specs written or compared, never run."""
    p = sub.add_parser("diff", help="what changing spec A into B does: fields, plan, findings, stages that rerun")
    p.add_argument("a", help="the spec as it is (YAML)")
    p.add_argument("b", help="the spec as proposed (YAML)")
    p.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("shrink", help="the spec's run scaled down to run end to end on this machine in ~N minutes")
    p.add_argument("spec", help="run spec (YAML)")
    p.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="wall time to size the whole DAG for (default 10); -o prints the expected range and its basis",
    )
    p.add_argument("-o", "--out", help="write the shrunk spec here (default: stdout)")
    p.set_defaults(func=_cmd_shrink)

    p = sub.add_parser("import", help="a spec from a nanoGPT, Hugging Face, torchtitan or Megatron-LM config, audited")
    p.add_argument("file", help="the config: nanoGPT .py, HF config.json, torchtitan .toml, Megatron argument list")
    p.add_argument("--format", choices=["auto", "nanogpt", "hf", "torchtitan", "megatron"], default="auto")
    p.add_argument(
        "--training-args", metavar="JSON", help="with --format hf: a TrainingArguments JSON (training_args.json)"
    )
    p.add_argument(
        "--devices",
        type=int,
        help="accelerators in all, for a file that does not state them (hf, torchtitan, megatron)",
    )
    p.add_argument(
        "--nodes", type=int, help="nodes, for a file that does not state them (with --devices: devices per node follow)"
    )
    p.add_argument("--accelerator", help="catalog key (`runlib explain hardware`), for a file that does not state it")
    p.add_argument("-o", "--out", help="write the spec here (default: stdout, the audit on stderr)")
    p.set_defaults(func=_cmd_import)

    p = sub.add_parser("propose", help="a spec that spends a budget (devices x days) by the compute-optimal fit")
    p.add_argument("--accelerator", required=True, help="catalog key, e.g. h100-sxm (`runlib explain hardware`)")
    p.add_argument("--devices", type=int, required=True, help="accelerators in all (8 per node)")
    p.add_argument("--days", type=float, required=True, help="wall-clock days of training")
    p.add_argument("--data", help="a spec whose data.sources to train on, or NAME=GLOB:DOMAIN:TOKENS[,...]")
    p.add_argument("--mfu", type=float, help="planning MFU before recomputation (default 0.40)")
    p.add_argument("--name", default=None, help="spec name (default: proposal-<accelerator>-<devices>x<days>d)")
    p.add_argument("-o", "--out", help="write the spec here (default: stdout, the audit on stderr)")
    p.set_defaults(func=_cmd_propose)

    p = sub.add_parser(
        "sample-web",
        help="write a sample web crawl (WARC files of pydoc pages with planted cases, and a blocklist) into DIR",
    )
    p.add_argument(
        "directory",
        help="where to write crawl-*.warc.gz and blocklist/ (specs/variants/demo-web.yaml reads work/web-sample)",
    )
    p.add_argument("--files", type=int, default=2, help="WARC files to deal the records into (default 2)")
    p.set_defaults(func=_cmd_sample_web)

    p = sub.add_parser("schema", help="print the JSON schema of the run spec")
    p.add_argument("--out", help="write it to this file instead")
    p.set_defaults(func=_cmd_schema)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runlib", description="Audit and run LLM pre-training specs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_spec_commands(sub)
    _add_workflow_commands(sub)
    _add_review_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        status: int = args.func(args)
        return status
    except UserError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
