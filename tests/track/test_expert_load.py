"""An MoE run's expert_load records become MLflow metrics per layer and expert, with the imbalance."""

from runlib.track.metrics import train_history


def test_expert_load_per_layer_and_expert_with_its_imbalance() -> None:
    records = [
        {"step": 4, "loss": 2.5, "expert_load": {"layers.1.mlp": [0.5, 0.25, 0.25, 0.0], "mtp.layers.0.block.mlp": []}},
        {"step": 8, "expert_load": {"layers.1.mlp": [0.25, 0.25, 0.25, 0.25]}},
        {"step": 9, "expert_load": "not a mapping"},
    ]
    points = {(name, step): value for name, value, step in train_history(records)}
    assert points[("train/expert_load/layers.1.mlp/0", 4)] == 0.5
    assert points[("train/expert_load/layers.1.mlp/3", 4)] == 0.0
    assert points[("train/expert_load/layers.1.mlp/max_over_mean", 4)] == 2.0  # 0.5 against a mean of 0.25
    assert points[("train/expert_load/layers.1.mlp/max_over_mean", 8)] == 1.0  # balanced
    assert not any("mtp.layers" in name for name, _ in points)  # an empty layer gives nothing
    assert not any(step == 9 for _, step in points)
