import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runlib.train.loop import data_step
from runlib.train.spikes import MIN_HISTORY, SPIKES_EVIDENCE, SpikeDetector, most_skips_in_a_window
from tests.limits import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]


def test_detector_needs_history_then_flags_outliers():
    d = SpikeDetector(zscore=3.0, window=50)
    assert not d.is_spike(100.0)  # no history yet: nothing is a spike
    for i in range(MIN_HISTORY):
        d.accept(2.0 + 0.01 * (i % 3))
    assert not d.is_spike(2.02)
    assert d.is_spike(3.0)
    assert d.is_spike(math.nan) and d.is_spike(math.inf)


def test_detector_window_is_bounded_and_restorable():
    d = SpikeDetector(zscore=3.0, window=5)
    for x in range(20):
        d.accept(float(x))
    assert list(d.losses) == [15.0, 16.0, 17.0, 18.0, 19.0]
    again = SpikeDetector(3.0, 5, list(d.losses))
    assert again.score(25.0) == d.score(25.0)


def test_data_step_steps_over_skipped_batches():
    assert [data_step(u, []) for u in range(4)] == [0, 1, 2, 3]
    assert [data_step(u, [1]) for u in range(4)] == [0, 2, 3, 4]
    assert [data_step(u, [0, 1, 3]) for u in range(3)] == [2, 4, 5]


def test_skips_are_counted_in_any_window_that_holds_the_newest():
    assert most_skips_in_a_window([5], 5, 10) == (1, 5)
    assert most_skips_in_a_window([1, 2, 3, 20], 20, 10) == (1, 20)  # the old ones are out of the window
    assert most_skips_in_a_window([11, 12, 13, 20], 20, 10) == (4, 11)
    # a rollback replays data: the newest skip may lie before earlier ones; windows after it count too
    assert most_skips_in_a_window([30, 31, 32, 25], 25, 10) == (4, 25)
    assert most_skips_in_a_window([30, 31, 32, 40, 25], 25, 10) == (4, 25)
    assert most_skips_in_a_window([7, 7, 7], 7, 10) == (1, 7)  # one data step is one skip


# ---------------------------------------------------------------------- the bound, in the real training loop

SHIFT_AT = 30  # data steps before this draw tokens 1..8; from it on, tokens the model has never seen
BOUND, WINDOW, EVERY = 3, 10, 10


class ShiftedLoader:
    """runlib.data.loader.PhaseLoader's interface with a persistent loss shift at data step SHIFT_AT."""

    source_names = ["docs"]
    eos_id = 0

    def __init__(self, config, token_dirs, special_ids):
        self.micro = None

    def batch_size(self, data: int) -> int:
        return 4

    def micro_batch(self, data: int, micro_index: int, rank: int, world: int, micro_size: int):
        import torch

        from runlib.data.loader import Batch

        g = torch.Generator().manual_seed(data)
        low, high = (1, 9) if data < SHIFT_AT else (500, 1000)
        ids = torch.randint(low, high, (micro_size, 129), generator=g)
        zeros = torch.zeros(micro_size, dtype=torch.long)
        return Batch(
            input_ids=ids[:, :-1],
            targets=ids[:, 1:].clone(),
            position_ids=torch.arange(128).expand(micro_size, 128).clone(),
            doc_ids=torch.zeros(micro_size, 128, dtype=torch.long),
            source_index=zeros,
            stream_start=zeros,
        )


def run_worker(config_file: str, out: str, scratch: str) -> None:
    """The subprocess: runlib's worker as train_phase launches it, on ShiftedLoader's data."""
    import runlib.data.loader
    import runlib.train.worker as worker

    runlib.data.loader.PhaseLoader = ShiftedLoader
    worker.special_token_ids = lambda tokenizer_dir: {"eos": 0}
    worker.main(["--config", config_file, "--out", out, "--scratch", scratch, "--input", "tokenizer=unused"])


def shifted_phase_config(action: str):
    from runlib.plan import derive
    from runlib.spec import load_spec
    from runlib.train.config import SpikeConfig, build_train_phase_configs
    from tests.workflow.conftest import TINY

    spec = load_spec(TINY).spec
    cfg = build_train_phase_configs(spec, derive(spec))[0]
    spike = SpikeConfig(
        zscore=5.0, window=WINDOW, action=action, rollback_steps=None, max_retries=100, max_skips_per_window=BOUND
    )
    monitor = cfg.monitor.model_copy(
        update={"spike": spike, "eval_every_steps": None, "log_every_tokens": EVERY * 1024}
    )
    checkpoint = cfg.checkpoint.model_copy(update={"every_steps": EVERY, "keep": 2})
    assert cfg.span.end_step - cfg.span.start_step > SHIFT_AT + 10  # the shift comes inside the phase
    return cfg.model_copy(update={"monitor": monitor, "checkpoint": checkpoint, "micro_batch": 4})


@pytest.mark.parametrize("action", ["skip", "rollback"])
def test_a_persistent_loss_shift_stops_the_phase_after_the_bound(tmp_path, action):
    """Issue 8, problem 2: every batch after the shift is a spike. Without the bound this never ends
    (the hang guard's timeout fails the test); with it, the phase stops with the evidence, exit 2."""
    from runlib.train import dist_checkpoint as dcp_ckpt
    from runlib.train.phase import spike_stop

    config_file, out, scratch = tmp_path / "config.json", tmp_path / "out", tmp_path / "scratch"
    config_file.write_text(shifted_phase_config(action).model_dump_json())
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.train.test_spikes", str(config_file), str(out), str(scratch)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)

    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    first = SHIFT_AT
    assert (
        f"stopped: {BOUND + 1} batches skipped within the {WINDOW} data steps from {first} "
        f"(monitor.spike.window), more than monitor.spike.max_skips_per_window = {BOUND}"
    ) in proc.stderr
    assert f"step {SHIFT_AT} (data step {SHIFT_AT + BOUND}): loss " in proc.stderr  # the evidence
    assert "recent mean" in proc.stderr and str(scratch / SPIKES_EVIDENCE) in proc.stderr

    evidence = json.loads((scratch / SPIKES_EVIDENCE).read_text())
    spikes = evidence["spikes"]
    assert [s["data_step"] for s in spikes] == list(range(SHIFT_AT, SHIFT_AT + BOUND + 1))
    assert all(s["action"] == action and s["loss"] > s["recent_mean"] for s in spikes)
    assert evidence["skipped_data_steps"] == list(range(SHIFT_AT, SHIFT_AT + BOUND + 1))
    assert spike_stop(scratch) == evidence["stopped"]["message"]  # what the train_phase stage raises
    # the checkpoints stay for a later attempt; no artifact was written
    assert dcp_ckpt.latest_checkpoint(scratch) == scratch / f"step-{SHIFT_AT}"
    assert not (out / "final.pt").exists()


if __name__ == "__main__":
    run_worker(*sys.argv[1:4])
