"""Check the plan's CPU memory estimate against the peak RSS the training processes really reach.

    python -m runlib.bench.memory_check [--spec specs/demo.yaml] [--steps 6] [--layouts spec,1proc,fsdp]

Measures, for every phase of the spec (one per phase kind) and every layout asked for, the peak RSS of
each training process (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, what the train_phase manifest
records as details.memory.measured_peak_bytes_per_rank) against the plan's memory_bytes_per_device
(runlib.plan.memory.phase_memory), and prints estimate, measured (both ranks), and estimate / measured
(of the larger rank): `plan` is the estimate the phase's config carries (what the manifest compares),
`cpu model` is phase_memory(..., accelerator="cpu") (the CPU model, runlib/plan/memory.py docstring),
the same figure once the plan passes the accelerator through. Peer: the measurement itself.
Goal: every ratio within 0.8-1.2.

How: the phase's real TrainPhaseConfig (runlib.graph.build.build_graph, as the train_phase stage
receives it) with its span cut to --steps optimizer steps, checkpoint.every and monitor.eval_every set
so one resumable checkpoint and one held-out evaluation fall inside the run (the real phase has them
too), launched the way the stage launches it (runlib.train.phase.launch_phase: `accelerate launch` of
runlib.train.worker, gloo). Phases run in order, each starting from the previous one's final.pt.
Data: seeded synthetic token shards of each source's declared size (document lengths drawn per domain:
prose ~600 tokens, code ~1500, synthetic ~16; EOS after every document), so every micro-batch holds
several documents and the document mask is materialised, as in the demo. No data stage runs, so the
check takes a few minutes from a clean clone.
Layouts: `spec` (the spec's own: the demo's 2-process DDP), `1proc` (the same config on one process:
data-parallel degree 1, more accumulation), `fsdp` (the spec with parallelism.sharding fsdp).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from runlib.data.shards import token_dtype, write_shard
from runlib.graph.build import build_graph
from runlib.plan import derive
from runlib.plan.memory import phase_memory
from runlib.spec import load_spec
from runlib.spec.models import RunSpec
from runlib.store.manifest import Manifest, Timings, write_manifest
from runlib.tokenizer.special import EOS_ID, special_ids
from runlib.train.config import TrainPhaseConfig
from runlib.train.phase import launch_phase

MIB = 2**20
DOC_TOKENS_MEAN = {"wiki": 600, "code": 1500, "synthetic": 16}  # typical document lengths by domain
HELDOUT_TOKENS = 40_000


def write_tokens(directory: Path, tokens: int, mean_len: int, vocab: int, reserved: int, seed: int) -> None:
    """Train and held-out shards of about `tokens` + HELDOUT_TOKENS synthetic tokens, EOS-terminated documents."""
    rng = np.random.default_rng(seed)
    dtype = token_dtype("auto", vocab - 1)
    for split, amount in (("train", tokens), ("heldout", HELDOUT_TOKENS)):
        docs, total = [], 0
        while total < amount:
            n = int(rng.geometric(1.0 / mean_len)) + 1
            doc = rng.integers(reserved, vocab, size=n).tolist() + [EOS_ID]
            docs.append(doc)
            total += len(doc)
        directory.mkdir(parents=True, exist_ok=True)
        write_shard(directory, split, docs, dtype)


def write_tokenizer_manifest(directory: Path, reserved: int) -> None:
    """The tokenizer artifact's manifest as far as the worker reads it (eos_id, special_ids)."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(
        stage="train_tokenizer",
        instance="train_tokenizer (memory_check synthetic)",
        key="synthetic",
        config={},
        inputs={},
        counts={},
        details={"eos_id": EOS_ID, "special_ids": special_ids(reserved)},
        timings=Timings(started_at=time.time(), wall_seconds=0.0),
        libraries={},
        outputs={},
        content_hash="",
    )
    write_manifest(directory, manifest)


def synthetic_inputs(spec: RunSpec, root: Path) -> dict[str, Path]:
    """Role -> directory: the tokenizer and one token artifact per source."""
    reserved = spec.tokenizer.reserved_tokens
    vocab = spec.model.vocab_size
    if vocab is None:
        raise SystemExit("memory_check: give the spec a model.vocab_size (the synthetic tokens are drawn below it)")
    write_tokenizer_manifest(root / "tokenizer", reserved)
    dirs = {"tokenizer": root / "tokenizer"}
    for i, (name, source) in enumerate(sorted(spec.data.sources.items())):
        mean = DOC_TOKENS_MEAN.get(source.domain, 600)
        tokens = int(source.tokens or 200_000)
        write_tokens(root / f"tokens-{name}", tokens, mean, vocab, reserved, spec.seed + i)
        dirs[f"tokens:{name}"] = root / f"tokens-{name}"
    return dirs


def part_input(data: dict[str, Path], role: str, root: Path) -> Path:
    """The directory of an input role: a source's synthetic tokens are its first part ("tokens:NAME/0"), and
    its other parts are empty (a source is read as its parts in order, runlib.data.shards.SourceShard)."""
    name, _, part = role.partition("/")
    if not part or part == "0":
        return data[name]
    empty = root / f"empty-{name.removeprefix('tokens:')}-{part}"
    if not empty.exists():
        for split in ("train", "heldout"):
            write_shard(empty, split, [], np.uint16)
    return empty


def short_config(config: TrainPhaseConfig, steps: int) -> TrainPhaseConfig:
    """The phase's config cut to `steps` optimizer steps, with one resumable checkpoint and one evaluation inside."""
    span = config.span
    per_step = (span.end_tokens - span.start_tokens) / max(1, span.end_step - span.start_step)
    end = min(span.end_step, span.start_step + steps)
    cut = span.model_copy(
        update={"end_step": end, "end_tokens": int(span.start_tokens + per_step * (end - span.start_step))}
    )
    middle = max(1, steps // 2)
    return config.model_copy(
        update={
            "span": cut,
            "checkpoint": config.checkpoint.model_copy(update={"every_steps": middle}),
            "monitor": config.monitor.model_copy(update={"eval_every_steps": middle}),
        }
    )


def layout_spec(spec: RunSpec, layout: str) -> RunSpec:
    if layout == "fsdp":
        return spec.model_copy(update={"parallelism": spec.parallelism.model_copy(update={"sharding": "fsdp"})})
    return spec


def run_layout(spec: RunSpec, layout: str, steps: int, data: dict[str, Path], root: Path) -> list[dict[str, Any]]:
    """Every phase of the spec in order under one layout: estimate, measured peak RSS per rank, ratio."""
    spec = layout_spec(spec, layout)
    graph = build_graph(spec)
    plan = derive(spec)
    processes = 1 if layout == "1proc" else None
    rows, previous = [], None
    phases = [(node, node.config_as(TrainPhaseConfig)) for node in graph.of("train_phase")]
    for node, phase_config in sorted(phases, key=lambda pair: pair[1].phase_index):
        config = short_config(phase_config, steps)
        inputs = {role: part_input(data, role, root) for role in graph.input_nodes(node) if role != "previous"}
        if previous is not None:
            inputs["previous"] = previous
        out = root / f"{layout}-{config.phase_name}"
        out.mkdir(parents=True)
        started = time.time()
        status = launch_phase(config, inputs, out, root / f"{layout}-{config.phase_name}-scratch", processes=processes)
        if status != 0:
            raise SystemExit(f"memory_check: phase {config.phase_name} ({layout}) failed with exit {status}")
        measured = json.loads((out / "run.json").read_text())
        peak = max(measured["peak_memory_bytes"])
        estimate = config.estimates.memory_bytes_per_device
        settings = plan.phases[config.phase_index].settings
        if processes == 1:  # one process: data-parallel degree 1, the step's sequences accumulated
            accum = settings.grad_accum * settings.data_parallel
            settings = replace(settings, data_parallel=1, devices=1, grad_accum=accum)
        model = phase_memory(
            spec.model,
            spec.precision,
            plan.params,
            plan.vocab_rows,
            settings,
            plan.accelerator.runtime_overhead_gib,
            spec.hardware.nodes,
            accelerator=spec.hardware.accelerator,
        ).total
        rows.append(
            {
                "layout": layout,
                "phase": config.phase_name,
                "processes": measured["world"],
                "seq_len": config.seq_len,
                "micro_batch": config.micro_batch,
                "plan_mib": estimate / MIB,
                "model_mib": model / MIB,
                "measured_mib": [p / MIB for p in measured["peak_memory_bytes"]],
                "plan_ratio": estimate / peak,
                "model_ratio": model / peak,
                "seconds": time.time() - started,
            }
        )
        previous = out
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default="specs/demo.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--layouts", default="spec,1proc")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    spec = load_spec(args.spec).spec
    rows = []
    with tempfile.TemporaryDirectory(prefix="memory_check-") as tmp:
        root = Path(tmp)
        data = synthetic_inputs(spec, root / "data")
        for layout in args.layouts.split(","):
            rows += run_layout(spec, layout, args.steps, data, root)
    print(f"spec {args.spec}, {args.steps} steps per phase; MiB per process; ratio = estimate / larger rank")
    print(
        f"{'layout':7} {'phase':12} {'proc':>4} {'seq':>4} {'mb':>3} {'measured':>11} "
        f"{'plan':>6} {'ratio':>6} {'cpu model':>9} {'ratio':>6}"
    )
    for r in rows:
        measured = "/".join(f"{m:.0f}" for m in r["measured_mib"])
        print(
            f"{r['layout']:7} {r['phase']:12} {r['processes']:>4} {r['seq_len']:>4} {r['micro_batch']:>3} "
            f"{measured:>11} {r['plan_mib']:>6.0f} {r['plan_ratio']:>6.2f} {r['model_mib']:>9.0f} {r['model_ratio']:>6.2f}"
        )
    for name in ("plan", "model"):
        ratios = [r[f"{name}_ratio"] for r in rows]
        print(
            f"{name:5} ratio: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f} "
            "(goal 0.80-1.20)"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
