"""The training loop of one phase, run under `accelerate launch` (one process per device).

Readable in one screen (nanoGPT style): one step's gradients in step.py (the arithmetic in accumulate.py),
the data in runlib.data.loader (a pure function of seed, phase and data step), the model, mesh, optimizer
and checkpoints in engine.py, spikes in spikes.py, what is logged in metrics.py, where the loop stands in
state.py. Optimizer steps and data steps differ only when monitor.spike skips a batch or rolls back: the
offending data steps are recorded and the data index steps over them. More skips than
monitor.spike.max_skips_per_window within any `window` data steps (or more rollbacks than max_retries)
stop the phase: SpikeLimitExceeded, with the evidence in the scratch directory's spikes.json.
"""

from __future__ import annotations

from accelerate import Accelerator

from runlib.train.engine import Engine
from runlib.train.metrics import IntervalMeans, PhaseLog, log_points_crossed
from runlib.train.spikes import SpikePolicy
from runlib.train.state import LoopState, PhaseRun, data_step
from runlib.train.step import train_step

__all__ = [
    "Engine",
    "IntervalMeans",
    "PhaseRun",
    "data_step",
    "log_points_crossed",
    "train_phase_loop",
]


def train_phase_loop(run: PhaseRun, accelerator: Accelerator) -> LoopState:
    cfg, span = run.config, run.config.span
    engine = Engine(cfg, accelerator)  # model, mesh, optimizer, checkpoints as the config says
    state = LoopState(step=span.start_step, tokens=span.start_tokens)
    state.update(engine.restore(run.init_checkpoint, run.scratch_dir))
    log = PhaseLog(run, engine, state)
    log.announce()
    spike = cfg.monitor.spike
    policy = SpikePolicy(spike, state.losses, cfg.phase_name, run.scratch_dir, engine.rank)
    while state.step < span.end_step:
        data = state.data_step(span.start_step)
        result = train_step(engine, run.loader, cfg, data, state.tokens)
        if spike is not None and policy.drops(state.step, data, result.loss, result.grad_norm):
            engine.skip()  # this batch makes no update
            state.skipped.append(data)
            policy.check_skips(state.step, data, state.skipped)
            if spike.action == "rollback":
                policy.check_rollbacks(state.step, state.rollbacks, state.skipped)
                state.update(engine.rollback(run.scratch_dir, state.saved(), spike.rollback_steps))
                policy.restart(state.losses)
            continue
        engine.step()
        if spike is not None:
            state.losses = policy.accept(result.loss)
        state.step += 1
        state.tokens += result.tokens
        done = state.step == span.end_step
        log.after_step(state, result, done)
        every = cfg.checkpoint.every_steps
        stop = run.stop_after_steps is not None and state.step - log.first_step >= run.stop_after_steps
        if (every and state.step % every == 0 and not done) or stop:
            with log.paused():
                engine.save_resumable(run.scratch_dir, state.saved())
        if stop:
            engine.finish_saves(run.scratch_dir)
            return state  # tests: stop here, with the state saved like a regular checkpoint
    seconds = log.seconds()
    engine.finish_saves(run.scratch_dir)  # a checkpoint written in the background, committed
    engine.save_final(run.out_dir / "final.pt", state.saved())
    measured = engine.measurements(seconds, state.tokens - log.first_tokens, cfg)
    log.write_outputs(policy.spikes, state, measured)
    return state
