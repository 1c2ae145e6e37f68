"""Each phase's effective settings: the phase's overrides on top of the global ones.

A phase override (seq_len, rope_theta, parallelism, batch) applies to that phase only; a phase
without one uses the global value. Every check runs on these effective settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from runlib.spec.models import ParallelismSpec, PhaseSpec, RunSpec
from runlib.spec.units import BatchSize


@dataclass(frozen=True, slots=True)
class PhaseSettings:
    index: int
    phase: PhaseSpec
    seq_len: int
    rope_theta: float
    parallelism: ParallelismSpec
    micro_batch: int
    grad_accum: int
    global_batch: BatchSize | None  # declared, if any
    batch_overridden: bool  # the batch ramp applies only to phases without a batch override
    devices: int
    data_parallel: int  # floor of devices / (tensor*pipeline*context); PAR001 reports a remainder
    model_parallel: int  # tensor * pipeline * context

    @property
    def path(self) -> str:
        return f"phases[{self.index}]"

    @property
    def steady_tokens_per_step(self) -> int:
        return self.micro_batch * self.grad_accum * self.data_parallel * self.seq_len


def devices(spec: RunSpec) -> int:
    return spec.hardware.nodes * spec.hardware.devices_per_node


def phase_settings(spec: RunSpec, index: int) -> PhaseSettings:
    phase = spec.phases[index]
    parallelism = spec.parallelism
    if phase.parallelism is not None:
        parallelism = parallelism.model_copy(update=phase.parallelism.model_dump(exclude_none=True))
    batch = phase.batch
    overrides = batch.model_dump(exclude_none=True) if batch is not None else {}
    model_parallel = parallelism.tensor * parallelism.pipeline * parallelism.context
    n_devices = devices(spec)
    return PhaseSettings(
        index=index,
        phase=phase,
        seq_len=phase.seq_len or spec.model.seq_len,
        rope_theta=phase.rope_theta or spec.model.rope_theta,
        parallelism=parallelism,
        micro_batch=overrides.get("micro_batch", spec.batch.micro_batch),
        grad_accum=overrides.get("grad_accum", spec.batch.grad_accum),
        global_batch=batch.global_batch if batch is not None and batch.global_batch else spec.batch.global_batch,
        batch_overridden=bool(overrides),
        devices=n_devices,
        data_parallel=max(1, n_devices // model_parallel),
        model_parallel=model_parallel,
    )


def all_phase_settings(spec: RunSpec) -> list[PhaseSettings]:
    return [phase_settings(spec, i) for i in range(len(spec.phases))]
