"""GPU check, prepared for a session with a device: document-masked attention correctness and speed.

    python -m runlib.bench.gpu_check [--steps 20] [--out DIR]

On CUDA: (1) parity of the flex_attention document-mask path against SDPA with a boolean mask, in
fp32, for logits and gradients; (2) training tokens/s and MFU (PaLM FLOPs / dense bf16 peak) of a
GPT-2-small-shaped Llama model at seq 2048 under bf16 autocast, for causal SDPA (no documents), SDPA
with a document mask, and flex with a document mask; medians after warm-up, in one run.
Without CUDA it runs the same code at toy size on the CPU (SDPA only) so CI keeps it working.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def _model(layers: int, d_model: int, heads: int, seq_len: int, vocab: int):
    from runlib.model.transformer import Transformer
    from runlib.spec.models import ModelSpec

    spec = ModelSpec(
        layers=layers,
        d_model=d_model,
        heads=heads,
        kv_heads=heads // 3 or 1,
        d_ff=d_model * 8 // 3 // 64 * 64 or 64,
        seq_len=seq_len,
    )
    return spec, Transformer(spec, vocab, seq_len)


def _doc_ids(n: int, length: int, mean_doc: int, device):
    import torch

    g = torch.Generator().manual_seed(0)
    starts = (torch.rand(n, length, generator=g) < 1.0 / mean_doc).long()
    starts[:, 0] = 0
    return starts.cumsum(1).to(device)


def parity(device, length: int, grads: bool = True) -> dict:
    """Max |difference| of logits (and of a gradient) between flex and SDPA-mask backends, in fp32.
    flex_attention has no backward on CPU (torch 2.13), so the CPU smoke compares logits only."""
    import contextlib

    import torch

    torch.manual_seed(0)
    _, model = _model(2, 192, 6, length, 512)
    model = model.to(device)
    ids = torch.randint(0, 512, (2, length), device=device)
    docs = _doc_ids(2, length, length // 4, device)
    out = {}
    for backend in ("sdpa", "flex"):
        model.zero_grad(set_to_none=True)
        model.attention_backend = backend
        with contextlib.nullcontext() if grads else torch.no_grad():
            logits = model(ids, None, docs)
            if grads:
                logits.float().square().mean().backward()
        grad = model.layers[0].attention.wq.weight.grad
        out[backend] = (logits.detach(), grad.detach().clone() if grad is not None else None)
    result = {"logits_max_abs_diff": float((out["flex"][0] - out["sdpa"][0]).abs().max())}
    if grads:
        result["grad_max_abs_diff"] = float((out["flex"][1] - out["sdpa"][1]).abs().max())
    return result


def throughput(device, backend: str, docs: bool, steps: int, size: dict) -> dict:
    import torch

    from runlib.plan.flops import flops_per_token
    from runlib.plan.params import count_params

    torch.manual_seed(0)
    spec, model = _model(size["layers"], size["d_model"], size["heads"], size["seq_len"], size["vocab"])
    model = model.to(device)
    model.attention_backend = backend
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n, length = size["batch"], size["seq_len"]
    ids = torch.randint(0, size["vocab"], (n, length), device=device)
    doc_ids = _doc_ids(n, length, 512, device) if docs else None
    amp = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if device.type == "cuda"
        else torch.autocast("cpu", enabled=False)
    )
    times = []
    for step in range(steps + 3):  # 3 warm-up steps (compilation, allocator)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with amp:
            logits = model(ids, None, doc_ids)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), ids.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= 3:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    tokens_per_s = n * length / seconds
    params = count_params(spec, size["vocab"], length)
    per_token = flops_per_token(params.matmul, spec.layers, spec.heads * (spec.d_model // spec.heads), length)
    peak = size["peak_tflops"] * 1e12
    return {
        "backend": backend,
        "documents": docs,
        "tokens_per_s": tokens_per_s,
        "step_ms": seconds * 1000,
        "mfu": tokens_per_s * per_token / peak if peak else None,
    }


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        size = {
            "layers": 12,
            "d_model": 768,
            "heads": 12,
            "seq_len": 2048,
            "vocab": 32768,
            "batch": 8,
            "peak_tflops": 989.0,
        }
        runs = [("sdpa", False), ("sdpa", True), ("flex", True)]
        results = {"device": torch.cuda.get_device_name(), "parity": parity(device, 512)}
    else:
        print("no CUDA device: toy-sized CPU smoke run of the same code (SDPA only)")
        size = {"layers": 2, "d_model": 64, "heads": 4, "seq_len": 64, "vocab": 256, "batch": 2, "peak_tflops": 0.15}
        runs = [("sdpa", False), ("sdpa", True)]
        results = {"device": "cpu", "parity": parity(device, 64, grads=False)}
    results["throughput"] = [throughput(device, b, d, args.steps, size) for b, d in runs]
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
