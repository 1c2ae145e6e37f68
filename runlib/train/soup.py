"""`soup_phase`: the weights of several trained branches of the last phase averaged into one model
(PhaseSpec.soup), written as a phase's final.pt so that evaluation and export read it as any phase's.

    soup_phase(config, ingredient_dirs, out_dir) -> counts for the manifest; writes out_dir/final.pt

Each parameter is sum_i w_i * theta_i, accumulated in float64 and stored in the ingredients' dtype: the
uniform soup of Wortsman et al. 2022 (arXiv 2203.05482, section 2; OLMo 2 souped its anneals the same
way, arXiv 2501.00656). The ingredients must hold the same tensors (names, shapes, dtypes): branches of
one phase always do; anything else is refused before a byte is written. Only the weights are kept: a soup
is evaluated and exported, never trained on (it is the end of the run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from runlib.train import checkpoint as ckpt
from runlib.train.soup_config import SoupConfig


def soup_state(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """The weighted mean of the state dicts, tensor by tensor (pure); a ValueError names the first tensor
    that differs in name, shape or dtype between the ingredients."""
    if len(states) != len(weights) or len(states) < 2:
        raise ValueError(f"a soup needs 2 or more ingredients and one weight each ({len(states)}, {len(weights)})")
    first = states[0]
    for i, state in enumerate(states[1:], start=1):
        if state.keys() != first.keys():
            extra = sorted(set(state) ^ set(first))[:3]
            raise ValueError(f"ingredient {i} holds other tensors than ingredient 0 ({', '.join(extra)})")
        for name, tensor in state.items():
            if tensor.shape != first[name].shape or tensor.dtype != first[name].dtype:
                raise ValueError(
                    f"ingredient {i}: {name} is {tuple(tensor.shape)} {tensor.dtype}, ingredient 0's "
                    f"{tuple(first[name].shape)} {first[name].dtype}"
                )
    out = {}
    for name, tensor in first.items():
        total = torch.zeros(tensor.shape, dtype=torch.float64)
        for state, weight in zip(states, weights, strict=True):
            total += weight * state[name].to(torch.float64)
        out[name] = total.to(tensor.dtype)
    return out


def _l2(tensors: list[torch.Tensor]) -> float:
    """The L2 norm of the tensors taken as one vector."""
    return float(torch.stack([(t**2).sum() for t in tensors]).sum().sqrt())


def soup_phase(config: SoupConfig, ingredient_dirs: list[Path], out_dir: Path) -> dict[str, Any]:
    if len(ingredient_dirs) != len(config.weights):
        raise ValueError(f"{len(ingredient_dirs)} ingredients for {len(config.weights)} weights")
    torch.set_num_threads(1)
    states = [ckpt.load(Path(d) / "final.pt")["model"] for d in ingredient_dirs]
    souped = soup_state(states, config.weights)
    # how far apart the ingredients are: the largest distance of one from the soup, relative to the soup's norm
    norm = _l2([t.double() for t in souped.values()])
    spread = max(_l2([s[n].double() - t.double() for n, t in souped.items()]) / norm for s in states)
    ckpt.save(Path(out_dir) / "final.pt", {"model": souped})
    params = sum(t.numel() for t in souped.values())
    return {"ingredients": len(states), "params": int(params), "max_distance_from_soup": spread}
