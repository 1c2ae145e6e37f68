"""One training process: `accelerate launch -m runlib.train.worker --spec S --key K --out D --scratch C`.

runlib.train.phase starts it (one process per device); it builds the phase's loader and runs the loop.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}


def scaler_kwargs(spec) -> list:
    """fp16 loss scaling as the spec says: dynamic from loss_scale (default 2^16), or static (the
    scale never grows; torch's GradScaler still halves it on an overflow, then skips that step)."""
    from accelerate.utils import GradScalerKwargs

    precision = spec.precision
    if precision.compute != "fp16" or precision.loss_scaling == "none":
        return []
    init = precision.loss_scale or 2.0**16
    if precision.loss_scaling == "static":
        return [GradScalerKwargs(init_scale=init, growth_interval=2**31 - 1)]
    return [GradScalerKwargs(init_scale=init)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--scratch", required=True, type=Path)
    parser.add_argument("--stop-after", type=int, default=None)
    args = parser.parse_args(argv)

    import torch
    from accelerate import Accelerator

    from runlib.data.loader import PhaseLoader
    from runlib.plan import derive
    from runlib.spec import load_spec
    from runlib.train.loop import PhaseRun, train_phase_loop
    from runlib.workflow.graph import build_graph

    spec = load_spec(args.spec).spec
    plan = derive(spec)
    graph = build_graph(spec)
    node = graph.by_key("train_phase", args.key)
    inputs = graph.input_nodes(node)
    token_dirs = {role.removeprefix("tokens:"): n.dir for role, n in inputs.items() if role.startswith("tokens:")}
    tokenizer = json.loads((inputs["tokenizer"].dir / "manifest.json").read_text())["details"]
    special = tokenizer["special_ids"]
    special_ids = {
        "eos": tokenizer["eos_id"],
        **{k: special[f"<|{k}|>"] for k in ("fim_prefix", "fim_middle", "fim_suffix") if f"<|{k}|>" in special},
    }
    on_cpu = spec.hardware.accelerator == "cpu" or not torch.cuda.is_available()
    accelerator = Accelerator(
        cpu=on_cpu, mixed_precision=MIXED_PRECISION[spec.precision.compute], kwargs_handlers=scaler_kwargs(spec)
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // accelerator.num_processes))
    # the tests read this line: the wrong launch flags silently give independent world-1 processes
    print(
        f"runlib worker: rank {accelerator.process_index} of {accelerator.num_processes}, "
        f"{accelerator.distributed_type.value}, {torch.get_num_threads()} threads",
        flush=True,
    )
    i = node.params["phase"]
    loader = PhaseLoader(spec, plan, i, token_dirs, special_ids)
    previous = inputs.get("previous")
    run = PhaseRun(
        spec, plan, i, loader, args.out, args.scratch, previous.dir / "final.pt" if previous else None, args.stop_after
    )
    train_phase_loop(run, accelerator)
    accelerator.end_training()


if __name__ == "__main__":
    main()
