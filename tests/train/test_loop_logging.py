"""Training metrics at one token interval across phases, each record the mean over its interval."""

from __future__ import annotations

import pytest
import torch

from runlib.plan import derive
from runlib.spec import load_spec
from runlib.train.config import build_train_phase_configs
from runlib.train.loop import IntervalMeans, log_points_crossed
from tests.workflow.conftest import TINY


def logged_steps(start_tokens: int, steps: int, tokens_per_step: int, every: int) -> list[int]:
    """The steps of a phase that write a record (the loop's rule: a crossed multiple, or the phase's end)."""
    out, tokens = [], start_tokens
    for step in range(1, steps + 1):
        if log_points_crossed(tokens, tokens + tokens_per_step, every) or step == steps:
            out.append(step)
        tokens += tokens_per_step
    return out


def test_one_token_interval_for_every_phase_of_the_demo() -> None:
    """The demo logged every 20 steps, then every step, then every 2: now one interval in tokens."""
    spec = load_spec("specs/demo.yaml").spec
    configs = build_train_phase_configs(spec, derive(spec))
    assert len({c.monitor.log_every_tokens for c in configs}) == 1
    every = configs[0].monitor.log_every_tokens
    step_tokens = 4096
    assert every % step_tokens == 0 and 100 <= spec.tokens // every <= 200
    gaps = set()
    for c in configs:
        steps = logged_steps(c.span.start_tokens, c.span.end_step - c.span.start_step, step_tokens, every)
        gaps |= {b - a for a, b in zip(steps, steps[1:], strict=False)}
    assert max(gaps) == every // step_tokens  # no phase logs sparser than the interval, none denser but its end


def test_log_every_in_steps_is_converted_to_tokens(tmp_path) -> None:
    text = TINY.read_text().replace(
        "monitor: {eval_every: 25 steps,", "monitor: {eval_every: 25 steps, log_every: 7 steps,"
    )
    assert text != TINY.read_text()
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    spec = load_spec(path).spec
    configs = build_train_phase_configs(spec, derive(spec))
    assert {c.monitor.log_every_tokens for c in configs} == {7 * 1024}


def test_crossing_points_hold_under_a_batch_ramp() -> None:
    # 3000 tokens per step, interval 4096: a record at each step that crosses a multiple of 4096
    assert logged_steps(0, 6, 3000, 4096) == [2, 3, 5, 6]
    assert not log_points_crossed(4096, 8191, 4096) and log_points_crossed(4095, 4096, 4096)


def test_interval_mean_weights_steps_by_scored_tokens_and_resets() -> None:
    means = IntervalMeans(2)
    means.add(2.0, 100, torch.tensor([[200.0, 0.0], [100.0, 0.0]]), 1024)
    means.add(5.0, 300, torch.tensor([[0.0, 1500.0], [0.0, 300.0]]), 1024)
    assert means.loss() == pytest.approx((2.0 * 100 + 5.0 * 300) / 400)
    assert means.loss_by_source(["a", "b"]) == {"a": pytest.approx(2.0), "b": pytest.approx(5.0)}
    assert (means.steps, means.tokens) == (2, 2048)
    means.reset()
    assert means.steps == 0 and means.loss_by_source(["a", "b"]) == {}
