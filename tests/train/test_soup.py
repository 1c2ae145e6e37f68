"""soup_phase (PhaseSpec.soup): the weighted mean of the ingredients' weights, tensor by tensor, in their dtype;
ingredients that are not the same model are refused before anything is written."""

from __future__ import annotations

import pytest
import torch

from runlib.train import checkpoint as ckpt
from runlib.train.soup import soup_phase, soup_state
from runlib.train.soup_config import SoupConfig


def _state(seed: int, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(4, 3, generator=g).to(dtype), "b": torch.randn(5, generator=g).to(dtype)}


def test_uniform_soup_is_the_mean_in_the_ingredients_dtype():
    states = [_state(1), _state(2), _state(3)]
    souped = soup_state(states, [1 / 3] * 3)
    for name in ("w", "b"):
        expected = sum(s[name].double() for s in states) / 3
        assert souped[name].dtype == torch.float32
        assert torch.allclose(souped[name].double(), expected, atol=1e-7)
    halves = soup_state([_state(1, torch.bfloat16), _state(2, torch.bfloat16)], [0.5, 0.5])
    assert halves["w"].dtype == torch.bfloat16
    weighted = soup_state([_state(1), _state(2)], [0.25, 0.75])["b"]
    assert torch.allclose(weighted, 0.25 * _state(1)["b"] + 0.75 * _state(2)["b"], atol=1e-6)


@pytest.mark.parametrize(
    ("other", "needle"),
    [
        ({"w": torch.zeros(4, 3)}, "other tensors"),
        ({"w": torch.zeros(3, 4), "b": torch.zeros(5)}, r"w is \(3, 4\)"),
        ({"w": torch.zeros(4, 3, dtype=torch.float64), "b": torch.zeros(5)}, "float64"),
    ],
)
def test_ingredients_of_another_model_are_refused(other, needle):
    with pytest.raises(ValueError, match=needle):
        soup_state([_state(1), other], [0.5, 0.5])


def test_soup_phase_writes_a_final_pt_any_phase_reader_loads(tmp_path):
    dirs = []
    for i in (1, 2):
        d = tmp_path / f"ingredient{i}"
        d.mkdir()
        ckpt.save(d / "final.pt", {"model": _state(i), "optimizer": {"state": {}}})
        dirs.append(d)
    out = tmp_path / "soup"
    out.mkdir()
    counts = soup_phase(SoupConfig(phase_index=3, weights=[0.5, 0.5]), dirs, out)
    saved = ckpt.load(out / "final.pt")
    assert set(saved) == {"model"}  # weights only: a soup is evaluated and exported, not trained on
    assert torch.allclose(saved["model"]["w"], (_state(1)["w"] + _state(2)["w"]) / 2)
    assert counts["ingredients"] == 2 and counts["params"] == 17
    assert 0 < counts["max_distance_from_soup"] < 2
