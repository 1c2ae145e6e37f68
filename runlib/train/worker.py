"""One training process: `accelerate launch -m runlib.train.worker --config C --input ROLE=DIR ... --out D --scratch S`.

runlib.train.phase starts it (one process per device, on every node); it reads its TrainPhaseConfig (the
stage's key covers exactly that file) and its inputs' artifact directories, builds the phase's loader and
runs the loop. It never reads the spec.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runlib.util.lifetime import die_with_parent

if TYPE_CHECKING:
    from accelerate.utils import KwargsHandler

    from runlib.spec.models import PrecisionSpec

SPIKE_STOP_EXIT = 2  # the spike bound stopped the phase (no traceback; runlib.train.phase reads spikes.json)


def scaler_kwargs(precision: PrecisionSpec) -> list[KwargsHandler]:
    """fp16 loss scaling as the spec says: dynamic from loss_scale (default 2^16), or static (the
    scale never grows; torch's GradScaler still halves it on an overflow, then skips that step)."""
    from accelerate.utils import GradScalerKwargs

    if precision.compute != "fp16" or precision.loss_scaling == "none":
        return []
    init = precision.loss_scale or 2.0**16
    if precision.loss_scaling == "static":
        return [GradScalerKwargs(init_scale=init, growth_interval=2**31 - 1)]
    return [GradScalerKwargs(init_scale=init)]


def parse_inputs(pairs: list[str]) -> dict[str, Path]:
    inputs: dict[str, Path] = {}
    for pair in pairs:
        role, _, directory = pair.partition("=")
        inputs[role] = Path(directory)
    return inputs


def special_token_ids(tokenizer_dir: Path) -> dict[str, int]:
    from runlib.store.manifest import read_manifest

    details = read_manifest(tokenizer_dir).details
    special = details["special_ids"]
    return {
        "eos": details["eos_id"],
        **{k: special[f"<|{k}|>"] for k in ("fim_prefix", "fim_middle", "fim_suffix") if f"<|{k}|>" in special},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--input", action="append", default=[])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--scratch", required=True, type=Path)
    parser.add_argument("--stop-after", type=int, default=None)
    args = parser.parse_args(argv)
    die_with_parent()  # torchrun starts workers in their own session: a killed launcher must take them along

    import torch
    from accelerate import Accelerator

    from runlib.data.loader import PhaseLoader
    from runlib.data.shards import token_inputs
    from runlib.train.config import TrainPhaseConfig
    from runlib.train.loop import PhaseRun, train_phase_loop
    from runlib.train.spikes import SpikeLimitExceeded

    config = TrainPhaseConfig.model_validate_json(args.config.read_text())
    inputs = parse_inputs(args.input)
    token_dirs = token_inputs(inputs)
    on_cpu = config.accelerator == "cpu" or not torch.cuda.is_available()
    # Accelerate's part in precision is the fp16 GradScaler; runlib.model.parallelize casts (FSDP2's
    # MixedPrecisionPolicy, or autocast where no FSDP2 policy applies)
    mixed = "fp16" if config.precision.compute == "fp16" else "no"
    accelerator = Accelerator(cpu=on_cpu, mixed_precision=mixed, kwargs_handlers=scaler_kwargs(config.precision))
    # the launcher's OMP_NUM_THREADS (cores / processes on this machine) when set: more threads than cores
    # makes every process spin-wait on the others
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or accelerator.num_processes)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 0) or max(1, (os.cpu_count() or 1) // local))
    # the tests read this line: the wrong launch flags silently give independent world-1 processes
    print(
        f"runlib worker: rank {accelerator.process_index} of {accelerator.num_processes}, "
        f"{accelerator.distributed_type.value}, {torch.get_num_threads()} threads",
        flush=True,
    )
    loader = PhaseLoader(config.loader, token_dirs, special_token_ids(inputs["tokenizer"]))
    previous = inputs.get("previous")
    run = PhaseRun(
        config=config,
        loader=loader,
        out_dir=args.out,
        scratch_dir=args.scratch,
        init_checkpoint=previous / "final.pt" if previous else None,
        heldout_dirs=token_dirs,
        stop_after_steps=args.stop_after,
    )
    try:
        train_phase_loop(run, accelerator)
    except SpikeLimitExceeded as exc:  # every rank stops at the same step; the evidence is on disk
        if accelerator.is_main_process:
            print(str(exc), file=sys.stderr, flush=True)
        sys.exit(SPIKE_STOP_EXIT)
    accelerator.end_training()
    print(json.dumps({"rank": accelerator.process_index, "done": True}), flush=True)


if __name__ == "__main__":
    main()
    # Leave without the interpreter's teardown: with the process groups destroyed and every output written
    # and closed, finalizing torch's distributed objects (gloo's threads) in arbitrary order at exit
    # aborted a finished worker now and then ("terminate called without an active exception", SIGABRT),
    # failing a phase that had trained to the end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
