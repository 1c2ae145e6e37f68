"""The rest of a run (checkpoints, monitoring, evaluation, tracking, audit, a scaling ladder) and the
whole run spec."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from runlib.spec.models.architecture import ModelSpec
from runlib.spec.models.base import (
    MAX_NAME_CHARS,
    MAX_PHASES,
    MAX_WIDTH,
    NAME_PATTERN,
    NAMES_FILE,
    ONE_LINE_PATTERN,
    PLANNING_ONLY,
    SEED_LIMIT,
    KeyedWhenSet,
    SpecModel,
)
from runlib.spec.models.data import DataSpec, TokenizerSpec
from runlib.spec.models.machine import BudgetSpec, HardwareSpec
from runlib.spec.models.phases import PhaseSpec
from runlib.spec.models.training import BatchSpec, OptimizerSpec, ParallelismSpec, PrecisionSpec, ScheduleSpec
from runlib.spec.units import Count, Duration, DurationField


class CheckpointSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"async_save"})

    every: DurationField | None = None
    """Interval between checkpoints, more than 0 (a checkpoint is always written at the end of each phase as well)."""
    keep: int = Field(3, ge=1, le=10_000)
    """Checkpoints retained."""
    state: list[Literal["model", "optimizer", "scheduler", "rng", "data", "scaler"]] = [
        "model",
        "optimizer",
        "scheduler",
        "rng",
        "data",
    ]
    """What a checkpoint holds; resuming exactly needs all of model, optimizer, scheduler, rng, data (+ scaler with fp16)."""
    async_save: bool = False
    """true: training stops only to copy the state in memory, and the shards are written in the background while it goes on (one save in flight: the next save, a rollback or the phase's end waits for it), as OLMo 2 trained (OLMo-core's save_async; torch.distributed.checkpoint.async_save); the audit then counts the copy, not the write, as the checkpoint's cost to training."""

    @field_validator("every")
    @classmethod
    def _every_positive(cls, every: Duration | None) -> Duration | None:
        # 0 would checkpoint every step: train/config.py rounds the interval up to max(1, steps)
        if every is not None and not every.amount > 0:
            raise ValueError(
                f"checkpoint.every must be more than 0 (got {every}); omit it to checkpoint at phase ends only"
            )
        return every


class SpikeSpec(SpecModel):
    zscore: float = Field(5.0, gt=0, le=1e6)
    """A loss this many standard deviations above the recent mean is a spike."""
    window: int = Field(200, ge=2, le=1_000_000)
    """Steps in the running statistics."""
    action: Literal["log", "skip", "rollback"] = "log"
    """log it, skip the batch, or roll back to the last checkpoint and skip the offending data."""
    rollback: DurationField | None = None
    """How far before the spike to roll back."""
    max_retries: int = Field(3, ge=0, le=1000)
    """Rollbacks allowed before the run stops."""
    max_skips_per_window: int = Field(10, ge=1, le=1_000_000)
    """Batches skipped (by skip or rollback) allowed within any `window` consecutive data steps; one more
    stops the phase with the evidence (spikes.json in the scratch directory), keeping its checkpoints. A
    persistent loss shift makes every batch a spike: without this bound skipping never ends."""


class MonitorSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"eval_tokens"})

    eval_every: DurationField | None = None
    """Held-out loss per source at this interval, inside the training phase."""
    eval_tokens: Count | None = Field(None, ge=1)
    """Held-out tokens per source in each of those evaluations during training (default: 32Ki). Read by the
    training phases, so editing it retrains; eval.heldout_tokens is the evaluation after each phase, and
    editing it reruns only the evaluations and the report."""
    log_every: DurationField | None = None
    """Training metrics (loss as the mean over the interval, LR, throughput) at this interval of the run's
    tokens, the same in every phase ('<n> steps' and '<p>%' are converted to tokens on the run's timeline);
    default: about 200 records over the run."""
    spike: SpikeSpec | None = None
    """Loss-spike policy."""


class EvalTaskSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"task", "download"})

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Task name."""
    kind: Literal["multiple_choice", "answer_loglik", "lm_eval"]
    """multiple_choice: options scored by log-likelihood (acc, acc_norm); answer_loglik: log-likelihood of the gold answer; lm_eval: the lm-evaluation-harness task `task`, run by lm-eval on the phase exported as a Hugging Face checkpoint."""
    path: str | None = Field(None, json_schema_extra=NAMES_FILE)
    """multiple_choice, answer_loglik: a JSONL file of examples (format in the README); or use from_heldout. lm_eval: a task file in lm-eval's YAML format, or a folder of them (lm-eval's --include_path), that defines `task`."""
    from_heldout: str | None = None
    """Build the task from this source's held-out documents (continuation of a document's first half). lm_eval: with task runlib_heldout_mc or runlib_heldout_loglik, the same items written as an lm-eval task."""
    task: str | None = Field(None, min_length=1, max_length=200)
    """lm_eval only: the lm-eval task (or group) name: runlib_arith_mc or runlib_arith_loglik (synthetic two-digit additions shipped with runlib), runlib_heldout_mc or runlib_heldout_loglik (with from_heldout), one defined in `path`, or a standard lm-eval task (hellaswag, arc_easy, ...: with download: true)."""
    examples: int = Field(100, ge=1, le=1_000_000)
    """Examples built with from_heldout; for lm_eval, the items scored at most (lm-eval's --limit: the first ones)."""
    download: bool = False
    """lm_eval only: the task's data is downloaded from the Hugging Face Hub when the eval stage runs (that machine needs network access); a task that runlib does not ship and no `path` defines is refused without it."""

    RUNLIB_LM_EVAL_TASKS: ClassVar[dict[str, str]] = {
        "runlib_arith_mc": "arithmetic",
        "runlib_arith_loglik": "arithmetic",
        "runlib_heldout_mc": "heldout",
        "runlib_heldout_loglik": "heldout",
    }
    """lm-eval tasks runlib writes itself (runlib.eval.harness.taskfiles) -> where their items come from."""

    @model_validator(mode="after")
    def _lm_eval_fields(self) -> EvalTaskSpec:
        if self.kind != "lm_eval":
            extra = [f for f in ("task", "download") if getattr(self, f) not in (None, False)]
            if extra:
                raise ValueError(
                    f"{' and '.join(extra)} {'belongs' if len(extra) == 1 else 'belong'} to kind: lm_eval tasks (this one is kind: {self.kind}); "
                    f"fix: remove {' and '.join(extra)}, or set kind: lm_eval"
                )
            return self
        own = self.RUNLIB_LM_EVAL_TASKS.get(self.task or "")
        if self.task is None:
            raise ValueError(
                "a kind: lm_eval task needs `task`, the lm-eval task name; fix: e.g. task: runlib_arith_mc "
                "(shipped with runlib), or a standard one such as task: hellaswag with download: true"
            )
        if own == "heldout":
            if self.from_heldout is None or self.path is not None:
                raise ValueError(
                    f"task {self.task} is built from a source's held-out documents; fix: give from_heldout: "
                    "<source> (and no path)"
                )
        elif self.from_heldout is not None:
            raise ValueError(
                f"from_heldout is read by the lm-eval tasks runlib_heldout_mc and runlib_heldout_loglik only "
                f"(task is {self.task}); fix: task: runlib_heldout_mc, or remove from_heldout"
            )
        elif own == "arithmetic" and (self.path is not None or self.download):
            raise ValueError(f"task {self.task} ships with runlib; fix: remove path and download")
        elif own is None and self.path is None and not self.download:
            raise ValueError(
                f"lm-eval task {self.task!r} is not one runlib ships and no path defines it: lm-eval would "
                "download its data from the Hugging Face Hub, which an offline machine cannot; fix: give "
                "path: a local task file in lm-eval's YAML format (or a folder of them) that defines it, or "
                "set download: true if the machine that runs the eval stage has network access"
            )
        return self


class EvalSpec(SpecModel):
    after_each_phase: bool = True
    """Evaluate after every phase (else after the last only)."""
    tasks: list[EvalTaskSpec] = []
    """Downstream tasks."""
    heldout_tokens: Count | None = Field(None, ge=1)
    """Evaluate at most this many held-out tokens per source after each phase (default: all of them); read by
    the eval stage only (the evaluations during training read monitor.eval_tokens)."""


class TrackingSpec(SpecModel):
    # MLflow refuses an experiment name over 500 characters (mlflow/utils/validation.py,
    # MAX_EXPERIMENT_NAME_LENGTH) in the track job, and the SQLite store's artifact folder is named after
    # it (NAME_MAX 255 bytes): bounded and printable here, at the gate
    experiment: str | None = Field(None, min_length=1, max_length=MAX_NAME_CHARS, pattern=ONE_LINE_PATTERN)
    """MLflow experiment (default: the run name); the tracking URI is machine-local, not part of the spec."""


class AuditSpec(SpecModel):
    ignore: dict[str, str] = Field({}, json_schema_extra=PLANNING_ONLY)
    """CODE: reason. A finding may be silenced only with a written reason (planning only: read by the audit, not by any stage)."""


class LadderSpec(SpecModel):
    """A scaling ladder: smaller runs of this spec whose losses fit L(N, D) = E + A/N^alpha + B/D^beta
    (Hoffmann et al. 2022, Approach 3) and predict this run's held-out loss (runlib.ladder).

    Each rung is the target with another width: d_model from `widths`, the target's aspect ratio
    d_model / layers, head_dim, heads / kv_heads and d_ff / d_model kept (Kaplan et al. 2020, section
    3.1 and figure 5: at a fixed parameter count the loss changes by a few percent over a 40x range of
    aspect ratios, so keeping the target's shape varies N alone). A rung keeps the target's data,
    tokenizer, batch, optimizer, mixtures and phase fractions, schedule shape and evaluation of
    held-out loss: its curation, tokenizer and tokenization stages are the target's (same keys)."""

    widths: list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]] = Field(min_length=2, max_length=16)
    """d_model of each rung size (multiples of the target's head_dim); layers = round(width / aspect ratio)."""
    tokens_per_param: list[Annotated[float, Field(gt=0, le=1e6)]] | None = Field(None, min_length=1, max_length=8)
    """Train each width at each of these tokens per (non-embedding) parameter, like OLMo's ladder at 1, 2,
    5 and 10 times Chinchilla's 20 (Bhagia et al. 2024, arXiv 2412.04403, section 2). Give this or
    compute_flops; a fit needs two or more values (at one value N and D are proportional)."""
    compute_flops: list[Annotated[float, Field(gt=0, le=1e30)]] | None = Field(None, min_length=1, max_length=8)
    """IsoFLOP budgets: each width trained for C / (FLOPs per token) tokens at each budget C (Hoffmann et
    al. 2022, Approach 2; Llama 3, Dubey et al. 2024, section 3.2.1). Give this or tokens_per_param."""
    min_steps: int = Field(20, ge=1, le=1_000_000)
    """Rungs shorter than this many optimizer steps are left out (their loss measures the warmup, not the law)."""
    holdout: int = Field(1, ge=0, le=16)
    """The largest-compute rungs kept out of the fit: their predicted and measured losses test the extrapolation."""
    bootstrap: int = Field(200, ge=0, le=10_000)
    """Bootstrap resamples of the rungs for the prediction interval (0: no interval)."""
    train_target: bool = False
    """Train and evaluate the target itself as well (its measured loss then sits beside the prediction)."""


class RunSpec(SpecModel):
    """A whole pre-training run: hardware, model, tokenizer, data, batch, schedule, phases."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Names artifacts, reports and MLflow runs."""
    description: str = Field("", json_schema_extra=PLANNING_ONLY)
    """Free text, shown in the reports (planning only: read by the audit, not by any stage)."""
    seed: int = Field(0, ge=0, lt=SEED_LIMIT)
    """Seed of data order and initialization, in [0, 2^63) (torch.manual_seed and numpy take it)."""
    hardware: HardwareSpec
    """Where it runs."""
    budget: BudgetSpec = BudgetSpec()
    """Limits the plan must fit."""
    model: ModelSpec
    """Model shape."""
    tokenizer: TokenizerSpec
    """Tokenizer to train or use."""
    data: DataSpec
    """Sources, curation, packing and loss."""
    parallelism: ParallelismSpec = ParallelismSpec()
    """Parallel layout; the data-parallel degree is derived."""
    batch: BatchSpec
    """Batch arithmetic."""
    optimizer: OptimizerSpec
    """Optimizer."""
    schedule: ScheduleSpec
    """Learning-rate schedule, on one token timeline across all phases."""
    precision: PrecisionSpec = PrecisionSpec()
    """Numeric formats."""
    tokens: Count = Field(ge=1)
    """Total training tokens; phases may be given in % of it."""
    phases: list[PhaseSpec] = Field(max_length=MAX_PHASES)
    """Run in order; the LR schedule and the token count run across all of them."""
    checkpoint: CheckpointSpec = CheckpointSpec()
    """Checkpointing."""
    monitor: MonitorSpec = MonitorSpec()
    """Monitoring during training."""
    eval: EvalSpec = EvalSpec()
    """Evaluation after phases."""
    tracking: TrackingSpec = TrackingSpec()
    """MLflow tracking."""
    audit: AuditSpec = AuditSpec()
    """Audit settings."""
    ladder: LadderSpec | None = None
    """A scaling ladder of smaller runs that predicts this run's held-out loss (runlib.ladder)."""
