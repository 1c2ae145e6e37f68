"""Run under `accelerate launch` (tests of runlib.train.launch): checks the process group, then trains
a tiny model with DDP for a few SGD steps on rank-dependent data; rank 0 writes the result as JSON.

Usage: accelerate launch ... tests/train/dist_probe.py OUT.json
The result does not depend on how the world is split into machines, so two machines of one process
and one machine of two processes must write the same weights.
"""

import json
import os
import resource
import sys

import torch
import torch.distributed as dist
from accelerate import Accelerator

STEPS = 5


def main(out: str) -> None:
    acc = Accelerator()
    rank, world = acc.process_index, acc.num_processes
    assert dist.is_initialized() and dist.get_world_size() == world, (dist.is_initialized(), world)
    # every process contributes rank + 1: the sum is world * (world + 1) / 2 only if all ranks are distinct
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    ranks = acc.gather(torch.tensor([rank])).tolist()
    machines = acc.gather(torch.tensor([int(os.environ.get("GROUP_RANK", "0"))])).tolist()  # torchrun's node rank

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batch
    for _ in range(STEPS):
        x, y = torch.randn(8, 4, generator=data), torch.randn(8, 1, generator=data)
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    peak_rss_bytes = acc.gather(torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024])).tolist()
    weights = [p.detach().flatten().tolist() for p in acc.unwrap_model(model).parameters()]
    if rank == 0:
        result = {"world": world, "allreduce": total.item(), "ranks": ranks, "machines": machines, "weights": weights}
        result["peak_rss_bytes"] = peak_rss_bytes
        with open(out, "w") as f:
            json.dump(result, f)
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
