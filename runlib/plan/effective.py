"""Each phase's effective settings: the phase's overrides on top of the global ones.

A phase override (seq_len, rope_theta, hardware, parallelism, batch, optimizer) applies to that phase only; a
phase without one uses the global value. This module is the one place that merges them (the plan, the
audit and the training stage configs read PhaseSettings); every check runs on these effective settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from runlib.plan.layout import planned_degrees
from runlib.spec.models import (
    OptimizerSpec,
    ParallelismSpec,
    PhaseOverride,
    PhaseSpec,
    RopeScalingSpec,
    RunSpec,
    SpecModel,
)
from runlib.spec.units import BatchSize

_Section = TypeVar("_Section", bound=SpecModel)


@dataclass(frozen=True, slots=True)
class PhaseSettings:
    index: int
    phase: PhaseSpec
    seq_len: int
    rope_theta: float
    rope_scaling: RopeScalingSpec | None  # phases[].rope_scaling: this phase only
    parallelism: ParallelismSpec
    micro_batch: int
    grad_accum: int
    global_batch: BatchSize | None  # declared, if any
    batch_overridden: bool  # the batch ramp applies only to phases without a batch override
    devices: int  # nodes x devices_per_node of this phase
    data_parallel: int  # floor of devices / (tensor*pipeline*context); PAR001 reports a remainder
    model_parallel: int  # tensor * pipeline * context
    optimizer: OptimizerSpec  # the run's with the phase's optimizer overrides (grad_clip)
    lr_scale: float  # phases[].optimizer.lr_scale: the schedule's LR times this within the phase (1: none)
    nodes: int = 1  # the phase's machines (phases[].hardware, else hardware.nodes)
    devices_per_node: int = 1  # (phases[].hardware, else hardware.devices_per_node)

    @property
    def path(self) -> str:
        return f"phases[{self.index}]"

    @property
    def steady_tokens_per_step(self) -> int:
        return self.micro_batch * self.grad_accum * self.data_parallel * self.seq_len


def devices(spec: RunSpec) -> int:
    """The run's devices (hardware): a phase may train on others (phases[].hardware, PhaseSettings.devices)."""
    return spec.hardware.nodes * spec.hardware.devices_per_node


def phase_machines(spec: RunSpec, phase: PhaseSpec) -> tuple[int, int]:
    """(nodes, devices_per_node) the phase trains on: its hardware override, else the run's."""
    hardware = merged(spec.hardware, phase.hardware)
    return hardware.nodes, hardware.devices_per_node


def merged(section: _Section, override: PhaseOverride | None) -> _Section:
    """`section` with the fields `override` sets (runlib.spec.models.PhaseOverride.overrides), unchanged
    (the same object) when it sets none."""
    update = override.overrides() if override is not None else {}
    return section.model_copy(update=update) if update else section


def phase_settings(spec: RunSpec, index: int) -> PhaseSettings:
    phase = spec.phases[index]
    parallelism = merged(spec.parallelism, phase.parallelism)
    batch = merged(spec.batch, phase.batch)
    nodes, per_node = phase_machines(spec, phase)
    n_devices = nodes * per_node
    data_parallel, model_parallel = planned_degrees(parallelism, n_devices)
    lr_scale = phase.optimizer.lr_scale if phase.optimizer is not None else None
    return PhaseSettings(
        index=index,
        phase=phase,
        seq_len=phase.seq_len or spec.model.seq_len,
        rope_theta=phase.rope_theta or spec.model.rope_theta,
        rope_scaling=phase.rope_scaling,
        parallelism=parallelism,
        micro_batch=batch.micro_batch,
        grad_accum=batch.grad_accum,
        global_batch=batch.global_batch,
        batch_overridden=phase.batch is not None and bool(phase.batch.overrides()),
        devices=n_devices,
        data_parallel=data_parallel,
        model_parallel=model_parallel,
        optimizer=merged(spec.optimizer, phase.optimizer),
        lr_scale=float(lr_scale) if lr_scale is not None else 1.0,
        nodes=nodes,
        devices_per_node=per_node,
    )


def all_phase_settings(spec: RunSpec) -> list[PhaseSettings]:
    return [phase_settings(spec, i) for i in range(len(spec.phases))]
