"""Benchmark checkpoint.async_save: how long training stops for a save, blocking against in the background.

    python -m runlib.bench.async_checkpoint [--params-m 200] [--rounds 5]

One process, a model of about --params-m million fp32 parameters with its AdamW state (3x the weights on
disk), saved by runlib.train.dist_checkpoint.save_checkpoint into a temporary directory, interleaved:
each round saves once blocking and once in the background. The blocking save's stall is the whole
write (DCP's shards, the digests, the rename); the background save's stall is the copy to host memory,
and its write then overlaps what comes next, until commit() (timed apart: the write's own length). The
peer is the same save blocking, in the same process, on the same files, so the ratio is the stall saved.
Medians over --rounds; the page cache makes both writes faster than a cluster's storage would be.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from runlib.train import dist_checkpoint as dcp_ckpt


def model_of(params_m: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Square layers of width 2048 (4.2M parameters each) up to about params_m million, one AdamW step taken
    so that the optimizer state exists."""
    layers = max(1, round(params_m * 1e6 / (2048 * 2048)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(2048, 2048, bias=False) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, 2048)).square().mean().backward()
    optimizer.step()
    return model, optimizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params-m", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, optimizer = model_of(args.params_m)
    params = sum(p.numel() for p in model.parameters())
    writer = dcp_ckpt.BackgroundWriter.start()
    blocking, stalls, writes = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            start = time.perf_counter()
            dcp_ckpt.save_checkpoint(Path(tmp) / f"sync-{i}", model, optimizer, {"round": i})
            blocking.append(time.perf_counter() - start)
            start = time.perf_counter()
            pending = dcp_ckpt.save_checkpoint(
                Path(tmp) / f"async-{i}", model, optimizer, {"round": i}, background=writer
            )
            stalls.append(time.perf_counter() - start)
            assert pending is not None
            pending.commit()
            writes.append(time.perf_counter() - start)
            assert dcp_ckpt.verify_checkpoint(Path(tmp) / f"async-{i}") is None
    writer.executor.shutdown()
    med = {
        k: statistics.median(v)
        for k, v in (("blocking_s", blocking), ("async_stall_s", stalls), ("async_total_s", writes))
    }
    result = {"params": params, "rounds": args.rounds, **{k: round(v, 4) for k, v in med.items()}}
    result["stall_ratio"] = round(med["async_stall_s"] / med["blocking_s"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
