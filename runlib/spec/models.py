"""The run spec as pydantic models: one class per section, the contract of design/spec-reference.yaml.

The schema decides what can be parsed into typed values (types, enums, unknown keys); whether the
run makes sense is the auditor's job (runlib.audit), so out-of-range but meaningful numbers (a
warmup longer than the run, min_lr above the peak) load and are reported there with a code and a fix.

Every number is finite (no NaN or infinity anywhere: SpecModel's allow_inf_nan=False) and bounded on
both sides (ge/le on every numeric field, MAX_COUNT for counts), far outside any real run but small
enough that no arithmetic of the plan or the audit overflows, loops long or builds huge integers;
tests/spec/test_hostile.py checks that every numeric field of the schema has a maximum.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from runlib.spec.units import BatchSizeField, Count, Duration, DurationField
from runlib.util.keyed import omit_new_fields_at_default

# pydantic looks up its plugins (the entry points of every installed distribution: ~60 ms of the cold
# start in a venv of ~350 packages) when it builds the first validator. The spec models use none, so
# the lookup is switched off (pydantic's documented PYDANTIC_DISABLE_PLUGINS) while this module builds
# them, and the variable is restored at the end of the module.
_PLUGINS_ENV = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"
# names become folder, file and MLflow run names (reports/<name>/run/..., a Snakemake log path with the
# name inside another name): 100 characters keep the longest derived file name well under the 255
# bytes of a file name (NAME_MAX, Linux limits.h)
MAX_NAME_CHARS = 100
ONE_LINE_PATTERN = r"^[^\x00-\x1f\x7f]+$"  # printable text on one line: no control characters (NUL, newline, tab)
# on the Field of a spec field that no stage reads (the audit and the plan do): the schema carries it
# as "planning_only": true, the README lists these fields, and tests/spec/test_fields_enacted.py
# checks that every other field reaches a stage key
PLANNING_ONLY = {"planning_only": True}
# on the Field of a spec field that names a file or a folder: the schema carries it as "names_file": true,
# and tests/audit/test_gate_fields.py checks that each is checked at the workflow gate, at its line
# (runlib.audit.named_files.FILE_FIELDS)
NAMES_FILE = {"names_file": True}

# bounds of the spec's numbers: far beyond any real run, finite so that no arithmetic blows up
MAX_NODES = 100_000
MAX_DEVICES_PER_NODE = 1_024
MAX_WIDTH = 2**20  # d_model, heads, head_dim
MAX_SEQ_LEN = 2**24
MAX_VOCAB = 2**31  # token ids fit int32 (and uint32 on disk)
MAX_PARALLEL = 65_536  # tensor, pipeline, context degree
MAX_MICRO = 2**20  # micro_batch, grad_accum
MAX_ROPE_THETA = 1e12
MAX_WEIGHT = 1e6  # a mixture weight (the audit checks signs and sums: MIX001)
MAX_PHASES = 32  # a run has a few; the workflow graph grows with the square of their number
SEED_LIMIT = 2**63  # torch.manual_seed takes [-2^63, 2^64); numpy's SeedSequence needs >= 0

Weight = Annotated[float, Field(ge=-MAX_WEIGHT, le=MAX_WEIGHT)]
"""A sampling weight: finite; the audit reports negative weights and sums other than 1."""


def _divisors_near(n: int, target: int, count: int = 4) -> str:
    """The divisors of n closest to target, ascending, e.g. 16, 6 -> '2, 4, 8 or 16' (sqrt(n) steps)."""
    divisors = set()
    i = 1
    while i * i <= n:
        if n % i == 0:
            divisors.update((i, n // i))
        i += 1
    near = sorted(sorted(divisors, key=lambda d: (abs(d - target), d))[:count])
    words = [str(d) for d in near]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


class SpecModel(BaseModel):
    """Base of every spec section: unknown keys are errors, values are immutable.

    Field docstrings become the schema's descriptions, attached when a JSON schema is asked for
    (`_attach_field_docstrings`), not at import: pydantic's use_attribute_docstrings re-reads and
    re-parses this file's source once per class (inspect.getsource), about a third of the cold start
    of `runlib audit`, for text only the schema shows.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def model_json_schema(cls, *args, **kwargs):  # type: ignore[override]
        _attach_field_docstrings()
        return super().model_json_schema(*args, **kwargs)


class KeyedWhenSet(SpecModel):
    """A section with fields added after stage keys existed: each field named in KEYED_WHEN_SET is left
    out of the section's serialized form (model_dump, and so every stage config and key that holds the
    section) while it has its default, so adding the field changed no existing key; a value other than
    the default is serialized, and so reruns what reads it."""

    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_new_fields_at_default(self, handler: Any) -> Any:
        return omit_new_fields_at_default(self, self.KEYED_WHEN_SET, handler(self))


class HardwareSpec(SpecModel):
    accelerator: str
    """Catalog key (cpu, v100, a100-40gb, a100-80gb, h100-sxm, h100-pcie, h200, b200, mi300x); `runlib explain hardware` lists them."""

    nodes: int = Field(1, ge=1, le=MAX_NODES)
    """Number of machines."""

    devices_per_node: int = Field(1, ge=1, le=MAX_DEVICES_PER_NODE)
    """Accelerators per machine."""

    mfu: float = Field(0.4, ge=0.001, le=1, json_schema_extra=PLANNING_ONLY)
    """Model FLOPs utilization assumed for time estimates (planning only: read by the audit, not by any stage)."""

    node_mtbf_hours: float | None = Field(None, ge=0.001, le=1e7, json_schema_extra=PLANNING_ONLY)
    """Mean time between failures of one node, in hours, for checkpoint-interval advice; omitted on a GPU: Llama 3's published failure rate, one unexpected interruption per ~50,700 GPU-hours (419 in 54 days on 16,384 GPUs, Dubey et al. 2024 section 3.3.4) (planning only: read by the audit, not by any stage)."""

    memory_gib: float | None = Field(None, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Memory per device in GiB, overriding the catalog for hardware not in it (planning only: read by the audit, not by any stage). Unset on a `cpu` spec, a device's memory is this machine's memory (or its container's limit) divided by `hardware.devices_per_node`, so the memory check of a CPU run depends on the machine that audits it; set it to plan for another machine."""

    peak_tflops: dict[Literal["fp32", "fp16", "bf16", "fp8"], Annotated[float, Field(ge=0.001, le=1e7)]] | None = None
    """Dense peak TFLOP/s per dtype; overrides the catalog (the plan's times, and the MFU a training phase reports)."""

    checkpoint_write_gb_per_s: float = Field(2.0, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Checkpoint write bandwidth per node in GB/s, for the checkpoint write time (planning only: read by the audit, not by any stage)."""

    storage_write_gb_per_s: float = Field(0.5, ge=0.001, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Write bandwidth of the storage checkpoints go to, all nodes together, in GB/s as a blocking checkpoint sees it; the write time is the checkpoint's size over the smaller of this and nodes x checkpoint_write_gb_per_s. Default 0.5: a measured 7B checkpoint, ~84 GB (12 bytes per parameter) in 148.8 s (PyTorch blog 2024, "Reducing Model Checkpointing Times by Over 10x with PyTorch Distributed Asynchronous Checkpointing"); storage built for checkpoints sustains far more (Llama 3's: 2 TB/s, Dubey et al. 2024 section 3.3.1): give yours (planning only: read by the audit, not by any stage)."""


class BudgetSpec(SpecModel):
    gpu_hours: Count | None = Field(None, ge=0, json_schema_extra=PLANNING_ONLY)
    """Device-hours available, all devices together (planning only: read by the audit, not by any stage)."""

    days: float | None = Field(None, ge=0, le=1e6, json_schema_extra=PLANNING_ONLY)
    """Wall-clock days available (planning only: read by the audit, not by any stage)."""

    flops: float | None = Field(None, ge=0, le=1e40, json_schema_extra=PLANNING_ONLY)
    """Training FLOPs available (planning only: read by the audit, not by any stage)."""


class ModelSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"norm_bias", "parallel_block", "embedding_norm", "dropout"})

    layers: int = Field(ge=1, le=100_000)
    """Number of transformer blocks."""

    d_model: int = Field(ge=1, le=MAX_WIDTH)
    """Hidden size (residual stream width)."""

    heads: int = Field(ge=1, le=MAX_WIDTH)
    """Attention (query) heads."""

    kv_heads: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """Key/value heads (grouped-query attention): a divisor of heads; omitted or = heads for multi-head attention."""

    @field_validator("kv_heads")
    @classmethod
    def _kv_heads_divide_heads(cls, kv_heads: int | None, info: ValidationInfo) -> int | None:
        # grouped-query attention shares each key/value head among heads / kv_heads query heads
        # (Ainslie et al. 2023, GQA, section 2.2): any other count has no layout, and every parameter,
        # FLOP and memory figure computed from it would describe a model that cannot be built
        heads = info.data.get("heads")  # absent when heads itself was refused: that error is reported
        if kv_heads is None or heads is None or heads % kv_heads == 0:
            return kv_heads
        raise ValueError(
            f"kv_heads: {kv_heads} does not divide heads: {heads} (grouped-query attention shares each "
            f"key/value head among heads / kv_heads query heads); use a divisor of {heads}: "
            f"{_divisors_near(heads, kv_heads)}"
        )

    head_dim: int | None = Field(None, ge=1, le=MAX_WIDTH)
    """Per-head width; default d_model / heads."""

    d_ff: int = Field(ge=1, le=2**24)
    """Hidden size of the MLP."""

    activation: Literal["swiglu", "gelu", "relu", "relu2"] = "swiglu"
    """swiglu: gated MLP with three matrices, w2(silu(w1 x) * w3 x) (Shazeer 2020); gelu, relu (OPT, Zhang et al. 2022) and relu2, squared ReLU (Primer, So et al. 2021, arXiv 2109.08668, section 4): two matrices, w2(act(w1 x))."""

    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalization; layernorm carries a bias when `norm_bias` (default: `bias`) is true."""

    bias: bool = False
    """Biases in linear layers (and, unless `norm_bias` says otherwise, in layernorm)."""

    norm_bias: bool | None = None
    """LayerNorm bias, separately from the linear layers' (Falcon: biased LayerNorm, bias-free linear layers; MPT: neither); omitted: as `bias`. RMSNorm has none: true with rmsnorm is an error."""

    @field_validator("norm_bias")
    @classmethod
    def _norm_bias_needs_layernorm(cls, norm_bias: bool | None, info: ValidationInfo) -> bool | None:
        if norm_bias and info.data.get("norm") == "rmsnorm":
            raise ValueError(
                "norm_bias: true with norm: rmsnorm: RMSNorm has a scale and no bias; use norm: layernorm, "
                "or omit norm_bias"
            )
        return norm_bias

    position: Literal["rope", "learned", "alibi", "relative"] = "rope"
    """rope: rotary embedding (Su et al. 2021); learned: an absolute position table of max(seq_len) rows (GPT-2); alibi: no position parameters, each head's attention score minus slope_h x distance (Press et al. 2022, arXiv 2108.12409; BLOOM, MPT); relative: Transformer-XL relative encodings (Dai et al. 2019, arXiv 1901.02860, section 3.3; Gopher), one d_model x (heads x head_dim) projection of the sinusoidal encodings and two bias vectors of heads x head_dim per layer, and one more score matmul per layer in the FLOPs (planning only: the trainer refuses it, RUN008)."""

    parallel_block: bool = False
    """Attention and MLP read the same normed input and both add to the residual, x + attn(norm(x)) + mlp(norm(x)), with one norm per layer (GPT-J, Wang & Komatsuzaki 2021; PaLM, Chowdhery et al. 2022 section 2; Falcon)."""

    embedding_norm: bool = False
    """A norm (model.norm) right after the input embedding (BLOOM, Le Scao et al. 2022 section 3.2.1: "embedding LayerNorm")."""

    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout probability on the embedding output, the attention probabilities and each block's attention and MLP outputs (GPT-2/Megatron hidden and attention dropout; OPT: 0.1); 0: none, as most runs since."""

    rope_theta: float = Field(10000.0, gt=0, le=MAX_ROPE_THETA)
    """RoPE base of the first phase; a phase may change it."""

    qk_norm: bool = False
    """RMSNorm on queries and keys (OLMo 2 style: over the full q and k projections)."""

    tie_embeddings: bool = False
    """The output head shares the input embedding matrix."""

    vocab_size: int | None = Field(None, ge=1, le=MAX_VOCAB)
    """Embedding rows; omitted: the tokenizer's size padded to a multiple of 128."""

    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    """Context length of the first phase; a phase may change it."""


class TokenizerSpec(SpecModel):
    vocab_size: int | None = Field(None, ge=1, le=MAX_VOCAB)
    """Learned BPE vocabulary (byte-level) before reserved tokens; required unless `pretrained` is given."""

    reserved_tokens: int = Field(256, ge=0, le=2**20)
    """Special tokens kept for post-training (roles, tools, FIM, separators); the end-of-document token is one of them."""

    digits: Literal["single", "triplets", "none"] = "single"
    """How runs of digits are split before BPE."""

    domain_tokens: list[str] = []
    """Strings forced into the vocabulary whole."""

    drop_tokens: list[str] = []
    """Tokens that must never be produced (e.g. sensitive strings)."""

    train_on: dict[str, Annotated[float, Field(ge=0, le=MAX_WEIGHT)]] = {}
    """Sample mixture of sources for tokenizer training (source name -> weight)."""

    train_bytes: Count | None = Field(None, ge=1)
    """Bytes of text sampled for tokenizer training."""

    min_frequency: int = Field(2, ge=1, le=2**31)
    """Minimum pair frequency for a BPE merge."""

    pretrained: str | None = Field(None, json_schema_extra=NAMES_FILE)
    """Path of an existing tokenizer.json to use instead of training one."""


class InputSpec(SpecModel):
    format: Literal["jsonl", "parquet", "text", "warc", "builtin"]
    """jsonl (plain or .gz) | parquet | text (a directory of plain-text files) | warc | builtin (text already on the machine)."""

    path: str | None = Field(None, json_schema_extra=NAMES_FILE)
    """Glob of input files (all formats but builtin)."""

    name: str | None = None
    """Builtin source kind (format: builtin), e.g. python_docs, python_code, arithmetic."""

    text_field: str = "text"
    """Field holding the document text (jsonl, parquet)."""

    max_docs: int | None = Field(None, ge=1, le=10**15)
    """Read at most this many documents (a cap for small runs)."""

    shards: int | None = Field(None, ge=1, le=100_000)
    """Curation jobs for this source; default: one per input file (builtin sources: 2)."""


class MinhashSpec(SpecModel):
    """MinHash near-duplicate removal: bands * rows permutations, LSH candidates, exact verification.

    Defaults measured with `python -m runlib.bench.minhash_speed --grid` (the recall of each banding
    by Jaccard bucket): 20 x 5 = 100 permutations make a pair at Jaccard 0.72 a candidate with
    probability 1 - (1 - 0.72^5)^20 = 98.6% (99.6% at 0.75), where FineWeb's 14 x 8 gives 65% (77%);
    the verification then removes the candidates below `threshold`."""

    ngram: int = Field(5, ge=1, le=1_000)
    """Shingle size in words (FineWeb: 5-grams)."""
    bands: int = Field(20, ge=1, le=1_024)
    """LSH bands: documents whose `rows` signature values agree in any band are candidate pairs."""
    rows: int = Field(5, ge=1, le=1_024)
    """Rows per band (the signature has bands * rows permutations)."""
    threshold: float = Field(0.72, ge=0, le=1)
    """Candidate pairs are near-duplicates only if the exact Jaccard similarity of their shingle sets is
    at least this (0: every LSH candidate, as datatrove, which verifies none). 0.72 is (1/14)^(1/8), the
    threshold of FineWeb's 14-band x 8-row banding (Penedo et al. 2024, section 3.4 and appendix E.1:
    "targeting documents that are at least 75% similar", removed with probability 56% at 0.70 and 77% at
    0.75): the centre of its soft cut, made sharp. Lee et al. 2022 (section 4.2, NearDup) likewise confirm
    each LSH candidate pair by a second, exact similarity (edit similarity) before calling it a duplicate."""


class DedupSpec(SpecModel):
    exact: bool = True
    """Drop documents whose normalized text hashes equal (SHA-256)."""
    minhash: MinhashSpec | None = None
    """Near-duplicate removal by MinHash LSH."""


class CurateSpec(SpecModel):
    normalize: Literal["NFC", "NFKC", "none"] = "NFC"
    """Unicode normalization form."""
    languages: list[str] = []
    """Keep only these languages (ISO 639-1); empty: all."""
    min_chars: int = Field(0, ge=0, le=10**12)
    """Drop documents shorter than this many characters."""
    max_chars: Count | None = Field(None, ge=1)
    """Drop documents longer than this many characters."""
    quality: list[Literal["gopher", "c4", "fineweb"]] = []
    """Heuristic quality rule sets, published thresholds."""
    dedup: DedupSpec = DedupSpec()
    """Deduplication."""
    pii: Literal["mask", "drop", "keep"] = "keep"
    """Personal data: mask it, drop the document, or keep it."""


class FimSpec(SpecModel):
    rate: float = Field(ge=0, le=1)
    """Fraction of documents turned into fill-in-the-middle examples."""
    spm_rate: float = Field(0.5, ge=0, le=1)
    """Of those, the fraction in suffix-prefix-middle order (the rest prefix-suffix-middle)."""


Domain = Literal["web", "code", "math", "books", "wiki", "papers", "dialogue", "curated", "synthetic"]


class SourceSpec(SpecModel):
    domain: Domain = Field(json_schema_extra=PLANNING_ONLY)
    """What the text is; drives domain checks such as FIM only on code (planning only: read by the audit, not by any stage)."""
    input: InputSpec
    """Where the raw documents come from."""
    tokens: Count | None = Field(None, ge=0, json_schema_extra=PLANNING_ONLY)
    """Tokens available after curation: declared for planning, measured once curated (planning only: read by the audit, not by any stage)."""
    curate: CurateSpec = CurateSpec()
    """Curation steps for this source."""
    fim: FimSpec | None = None
    """Fill-in-the-middle on this source's documents."""


SourceName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)]
"""A source's name: it names MLflow metrics (heldout/<source>/loss: MLflow refuses '..', '.' and ''), report
rows and stage instances, as phase names do."""


class DataSpec(SpecModel):
    sources: dict[SourceName, SourceSpec]
    """Each source is a channel: its own mixture weight, loss curve and held-out set."""
    heldout_docs: int = Field(200, ge=0, le=1_000_000)
    """Documents per source kept out of training for per-channel perplexity (at most a million)."""
    packing: Literal["document", "stream", "none"] = "document"
    """document: attention never crosses documents; stream: plain concatenation; none: one document per sequence, padded."""
    boundary_targets: Literal["masked", "kept"] = "masked"
    """masked: the target after a document's EOS is ignored; kept: it is trained on."""
    loss_normalization: Literal["global_tokens", "micro_batch_mean"] = "global_tokens"
    """global_tokens: sum of token losses / scored tokens of the whole optimizer step; micro_batch_mean: mean per micro-batch."""
    token_dtype: Literal["auto", "uint16", "uint32"] = "auto"
    """Storage of token ids on disk; auto picks the smallest that holds the largest id."""
    mean_doc_tokens: Count | None = Field(None, ge=1, json_schema_extra=PLANNING_ONLY)
    """Typical document length in tokens (for packing occupancy); measured once tokenized (planning only: read by the audit, not by any stage)."""


Sharding = Literal["none", "zero1", "zero2", "fsdp", "hsdp"]
Recompute = Literal["none", "selective", "selective_op", "full"]


class ParallelismSpec(SpecModel):
    tensor: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Tensor-parallel degree (with sequence parallelism unless sequence_parallel is false)."""
    pipeline: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Pipeline-parallel degree."""
    context: int = Field(1, ge=1, le=MAX_PARALLEL)
    """Context-parallel degree (the sequence split across devices)."""
    sharding: Sharding = "none"
    """Sharding of model states over the data-parallel ranks (times the context-parallel degree, as torchtitan and Megatron-LM shard): none | zero1 | zero2 | fsdp (= zero3) | hsdp (fsdp within each node, replicated across nodes)."""
    activation_checkpointing: Recompute = "none"
    """Activation recomputation: none; selective (the attention core, Korthikanti et al. 2022 section 4.1: saves the s^2 scores of an eager kernel); selective_op (torchtitan's op-level policy: each layer keeps its input, the attention kernel's output and every other matmul's output, and recomputes norms, RoPE, activations and the other matmuls); full (each layer keeps only its input)."""
    offload: bool = False
    """Optimizer states and master weights kept in host memory."""
    sequence_parallel: bool = Field(True, json_schema_extra=PLANNING_ONLY)
    """With tensor > 1: norms and residuals split along the sequence over the tensor ranks (Korthikanti et al. 2022 section 4.2.2; runlib's trainer always does); false: replicated, as Megatron-LM without --sequence-parallel (BLOOM), for the memory model (planning only: read by the audit, not by any stage)."""
    attention_kernel: Literal["fused", "eager"] = Field("fused", json_schema_extra=PLANNING_ONLY)
    """fused: a Flash-style kernel that stores no s x s scores (runlib's trainer: scaled_dot_product_attention); eager: softmax scores kept for the backward, 2 bytes x heads x s^2 per sequence and layer (Megatron's fused softmax, as BLOOM trained), for the memory model (planning only: read by the audit, not by any stage)."""
    pipeline_first_stage_layers: int | None = Field(None, ge=1, le=100_000, json_schema_extra=PLANNING_ONLY)
    """Transformer layers on the first pipeline stage when the split is uneven (Megatron-LM --decoder-first-pipeline-num-layers; e.g. Llama 3.1 405B: 126 layers over 16 stages, 7 on the first and last); the other stages share the rest evenly (planning only: read by the audit, not by any stage)."""
    pipeline_last_stage_layers: int | None = Field(None, ge=1, le=100_000, json_schema_extra=PLANNING_ONLY)
    """Transformer layers on the last pipeline stage when the split is uneven (Megatron-LM --decoder-last-pipeline-num-layers) (planning only: read by the audit, not by any stage)."""
    sequence_parallel_saves: Literal["gathered", "sharded"] = Field("gathered", json_schema_extra=PLANNING_ONLY)
    """With sequence parallelism, what the attention and MLP blocks keep of their input for the backward: gathered (the all-gathered input, s x b x h on every tensor rank: DTensor's PrepareModuleInput + ColwiseParallel, as runlib's trainer and torchtitan apply them); sharded (the sequence-sharded input, all-gathered again in the backward: Megatron-LM, Korthikanti et al. 2022 section 4.2.2), for the memory model (planning only: read by the audit, not by any stage)."""
    grad_accumulation: Literal["in_place", "separate_buffer"] = Field("in_place", json_schema_extra=PLANNING_ONLY)
    """Where the micro-batches' gradients add up: in_place (the gradients are the accumulator, in precision.grads' dtype: runlib's trainer, FSDP, Megatron-LM's main_grad); separate_buffer (each backward leaves the gradients on the parameters in the compute dtype, and they are added into a separate buffer in precision.grads' dtype; both stay allocated, the compute-dtype copy not sharded: DeepSpeed's BF16_Optimizer for bf16 with ZeRO stage 0/1, as BLOOM trained, 2 bytes per parameter more), for the memory model (planning only: read by the audit, not by any stage)."""


class ParallelismOverride(SpecModel):
    tensor: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    """Tensor-parallel degree in this phase."""
    pipeline: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    """Pipeline-parallel degree in this phase."""
    context: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    """Context-parallel degree in this phase."""
    sharding: Sharding | None = None
    """Sharding in this phase."""
    activation_checkpointing: Recompute | None = None
    """Activation recomputation in this phase."""
    offload: bool | None = None
    """Offload in this phase."""
    sequence_parallel: bool | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """Sequence parallelism in this phase (planning only: read by the audit, not by any stage)."""
    attention_kernel: Literal["fused", "eager"] | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """Attention kernel in this phase (planning only: read by the audit, not by any stage)."""
    pipeline_first_stage_layers: int | None = Field(None, ge=1, le=100_000, json_schema_extra=PLANNING_ONLY)
    """Layers on the first pipeline stage in this phase (planning only: read by the audit, not by any stage)."""
    pipeline_last_stage_layers: int | None = Field(None, ge=1, le=100_000, json_schema_extra=PLANNING_ONLY)
    """Layers on the last pipeline stage in this phase (planning only: read by the audit, not by any stage)."""
    sequence_parallel_saves: Literal["gathered", "sharded"] | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """What the attention and MLP blocks keep of their sequence-parallel input in this phase (planning only: read by the audit, not by any stage)."""


class RampStage(SpecModel):
    after: DurationField
    """Tokens seen from which this global batch applies ('<count> tokens' or '<p>%')."""
    global_batch: BatchSizeField
    """Global batch from then on."""
    micro_batch: int | None = Field(None, ge=1, le=MAX_MICRO)
    """Sequences per data-parallel rank per micro-step from then on (default batch.micro_batch): a ramp that starts below micro_batch x dp sequences needs a smaller micro-batch early (GPT-3's 32K-token start, Brown et al. 2020 section 2.3). Read by the memory plan (the phase's estimate) and BATCH002; the trainer keeps batch.micro_batch throughout and refuses another value (RUN010)."""


class LinearRamp(SpecModel):
    """Megatron's --rampup-batch-size <start> <increment> <samples> (NVIDIA/Megatron-LM,
    megatron/core/num_microbatches_calculator.py, RampupBatchsizeNumMicroBatchesCalculator): the global
    batch starts at `start` and grows by `increment` in equal stretches of `over`, reaching the steady
    global batch (micro_batch x grad_accum x data parallel) at the end of `over`."""

    start: BatchSizeField
    """Global batch at the start of the run."""
    increment: BatchSizeField
    """Growth of the global batch at each step of the ramp."""
    over: DurationField
    """Tokens (or % of the run) over which the batch reaches the steady global batch."""

    @field_validator("over")
    @classmethod
    def _over_in_tokens(cls, over: Duration) -> Duration:
        if over.unit == "steps":
            raise ValueError(
                f"linear_ramp.over: {over} counts steps, whose size the ramp changes; give tokens "
                "(BLOOM's 9,765,625 samples x 2048: '20B tokens') or a % of the run"
            )
        return over


class BatchSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"linear_ramp"})

    micro_batch: int = Field(ge=1, le=MAX_MICRO)
    """Sequences per data-parallel rank per micro-step."""
    grad_accum: int = Field(1, ge=1, le=MAX_MICRO)
    """Micro-steps per optimizer step on each rank (steady state)."""
    global_batch: BatchSizeField | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """Optional declaration, checked against micro_batch * grad_accum * dp, times seq_len for a count in tokens (planning only: read by the audit, not by any stage)."""
    ramp: list[RampStage] | None = Field(None, max_length=256)
    """The global batch by tokens seen; grad_accum follows and must stay whole."""
    linear_ramp: LinearRamp | None = None
    """A ramp in equal increments without one `ramp` entry per step (BLOOM: 192 to 2048 sequences by 16 over 20B tokens); the plan expands it into the same timeline segments as `ramp`; not with `ramp`."""

    @field_validator("linear_ramp")
    @classmethod
    def _one_ramp(cls, linear_ramp: LinearRamp | None, info: ValidationInfo) -> LinearRamp | None:
        if linear_ramp is not None and info.data.get("ramp"):
            raise ValueError("batch.ramp and batch.linear_ramp both given: keep one (linear_ramp for equal increments)")
        return linear_ramp


class BatchOverride(SpecModel):
    micro_batch: int | None = Field(None, ge=1, le=MAX_MICRO)
    """Sequences per data-parallel rank per micro-step in this phase."""
    grad_accum: int | None = Field(None, ge=1, le=MAX_MICRO)
    """Micro-steps per optimizer step in this phase."""
    global_batch: BatchSizeField | None = Field(None, json_schema_extra=PLANNING_ONLY)
    """Declared global batch in this phase, checked like batch.global_batch (planning only: read by the audit, not by any stage)."""


class OptimizerSpec(SpecModel):
    kind: Literal["adamw", "adam", "adafactor", "muon", "lion"] = "adamw"
    """adamw: decoupled weight decay; adam: L2 penalty through the gradient; adafactor: factored second moments; muon: orthogonalized momentum on 2-D hidden matrices (AdamW for embeddings, head, norms); lion: sign momentum (Chen et al. 2023, via lion-pytorch)."""
    lr: float = Field(ge=-1e3, le=1e3)
    """Peak learning rate (the audit reports one that is not positive: SCHED003)."""
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    """Adam beta1, beta2, each in [0, 1) as torch.optim.Adam/AdamW require (they raise otherwise)."""
    eps: float = Field(1e-8, gt=0, le=1)
    """Adam epsilon."""
    weight_decay: float = Field(0.1, ge=0, le=100)
    """Weight decay (not applied to norms and biases)."""
    grad_clip: float | None = Field(1.0, ge=0, le=1e6)
    """Clip the global gradient norm to this value (default 1.0); 0 or null: no clipping."""
    z_loss: float = Field(0.0, ge=0, le=100)
    """Coefficient of the z-loss (log Z squared) on the output logits."""


class LRStep(SpecModel):
    after: DurationField
    """Tokens seen (or % of the run, or steps) from which this LR applies."""
    lr_ratio: float = Field(ge=0, le=1e3)
    """The LR from then on, as a fraction of the peak."""


class ScheduleSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"lr_steps"})

    kind: Literal["wsd", "cosine", "linear", "constant", "multistep"] = "cosine"
    """LR shape after warmup: warmup-stable-decay, cosine, linear, constant, or multistep (the peak, then the `lr_steps` levels: DeepSeek LLM, arXiv 2401.02954 section 2.3)."""
    warmup: DurationField
    """Linear warmup from 0 to the peak LR."""
    decay: DurationField | None = None
    """wsd: length of the final decay; cosine/linear: length of the decay after warmup (omitted: until the run's end)."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1e3)
    """Floor as a fraction of the peak (multistep: the last of `lr_steps` is the floor)."""
    lr_steps: list[LRStep] | None = Field(None, max_length=64)
    """multistep only: the LR levels after the peak, in order (DeepSeek LLM: after 80% of the tokens 0.316, after 90% 0.1)."""

    @model_validator(mode="after")
    def _steps_with_multistep(self) -> ScheduleSpec:
        if self.kind == "multistep" and not self.lr_steps:
            raise ValueError(
                "schedule.kind multistep needs schedule.lr_steps, e.g. [{after: 80%, lr_ratio: 0.316}, "
                "{after: 90%, lr_ratio: 0.1}]"
            )
        if self.kind != "multistep" and self.lr_steps:
            raise ValueError(f"schedule.lr_steps is read with kind: multistep only (kind is {self.kind})")
        if self.kind == "multistep" and (self.decay is not None or self.min_lr_ratio != 0):
            raise ValueError(
                "schedule.kind multistep reads neither decay nor min_lr_ratio (the levels are lr_steps, the last "
                "one the floor): remove them"
            )
        return self


class PrecisionSpec(SpecModel):
    compute: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    """Matmul/activation dtype."""
    master_weights: Literal["fp32", "none"] = "fp32"
    """fp32: an fp32 copy of the weights takes the updates; none: parameters stay in the compute dtype."""
    grads: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Gradient reduction/accumulation dtype (fp16: Megatron's fp16 runs without --accumulate-allreduce-grads-in-fp32, e.g. BLOOM's precursors; the trainer refuses it, RUN009)."""
    optimizer_states: Literal["fp32", "bf16"] = "fp32"
    """Adam moment dtype."""
    loss_scaling: Literal["none", "static", "dynamic"] = "none"
    """Loss scaling (needed with fp16)."""
    loss_scale: float | None = Field(None, gt=0, le=2.0**64)
    """Initial (dynamic) or fixed (static) loss scale."""


class PhaseOptimizer(SpecModel):
    """What a phase changes in the optimizer mid-run (OPT-175B's restarts lowered the LR and the clip:
    Zhang et al. 2022, arXiv 2205.01068, section 2.5, and its logbook)."""

    lr_scale: float | None = Field(None, gt=0, le=1e3)
    """The schedule's LR times this within the phase (OPT: the LR lowered after divergences)."""
    grad_clip: float | None = Field(None, ge=0, le=1e6)
    """Gradient-norm clip within the phase (OPT: 1.0 lowered to 0.3); 0: no clipping."""


MAX_BRANCHES = 16  # variants of one phase; each is a training stage and an evaluation of its own


class PhaseBranch(SpecModel):
    """A variant of the last phase, trained from the same checkpoint as the phase itself (the end of the
    phase before it): WSD anneals branched from one stable checkpoint (Hu et al. 2024, MiniCPM, arXiv
    2404.06395, section 4). It overrides only `mixture`, `tokens`, `decay` and `seq_len`; every other
    setting is the phase's."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Branch name; its stages are named '<phase>@<branch>' (train_phase anneal@code-heavy)."""
    mixture: dict[str, Weight] | None = None
    """Source name -> sampling weight in this branch (default: the phase's mixture)."""
    tokens: DurationField | None = None
    """Training tokens of this branch (default: the phase's); a % is of the run's `tokens`, as for phases."""
    decay: DurationField | None = None
    """schedule.decay in this branch: the LR decay that ends at the branch's end (default: schedule.decay as given); it must not reach back into an earlier phase."""
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    """Context length in this branch (default: the phase's seq_len)."""


class PhaseSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"optimizer", "branches"})

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)
    """Phase name; names its training stage and checkpoints."""
    kind: Literal["foundation", "enrichment", "long_context", "anneal"] = Field(json_schema_extra=PLANNING_ONLY)
    """What the phase is for; the audit checks that the anneal phase carries the schedule's decay (planning only: read by the audit, not by any stage)."""
    tokens: DurationField
    """Training tokens of the phase: '<count> tokens', '<count> steps' or '<p>%' of the run."""
    mixture: dict[str, Weight]
    """Source name -> sampling weight (weights sum to 1)."""
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    """Context length in this phase (default: model.seq_len); applies to this phase only."""
    rope_theta: float | None = Field(None, gt=0, le=MAX_ROPE_THETA)
    """RoPE base in this phase (default: model.rope_theta); applies to this phase only."""
    parallelism: ParallelismOverride | None = None
    """Parallelism overrides for this phase only."""
    batch: BatchOverride | None = None
    """Batch overrides for this phase (the batch ramp does not apply to a phase with a batch override)."""
    optimizer: PhaseOptimizer | None = None
    """Optimizer changes for this phase only (a mid-run LR or clip change)."""
    branches: list[PhaseBranch] | None = Field(None, max_length=MAX_BRANCHES)
    """Variants of this phase (the last phase only), each trained from the previous phase's checkpoint as a stage and an evaluation of its own, beside the phase itself; the earlier phases are trained once. A branch overrides mixture, tokens, decay and seq_len."""

    @field_validator("branches")
    @classmethod
    def _branch_names_unique(cls, branches: list[PhaseBranch] | None) -> list[PhaseBranch] | None:
        names = [b.name for b in branches or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"branch names must differ: {', '.join(twice)} given twice; rename one")
        return branches


class CheckpointSpec(SpecModel):
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


@cache
def _attach_field_docstrings() -> None:
    """Set each spec field's description from the string literal under it (as pydantic's
    use_attribute_docstrings does: inspect.cleandoc of the literal right after an annotated
    assignment), then rebuild the models' schemas, leaves first (classes are defined before use)."""
    import ast
    import inspect
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields = docs.setdefault(node.name, {})
        for stmt, after in zip(node.body, node.body[1:], strict=False):
            literal = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and literal:
                if isinstance(after.value.value, str):
                    fields[stmt.target.id] = inspect.cleandoc(after.value.value)
    for name, fields in docs.items():
        model = globals().get(name)
        if not (isinstance(model, type) and issubclass(model, SpecModel)):
            continue
        for field_name, info in model.model_fields.items():
            if info.description is None and field_name in fields:
                info.description = fields[field_name]
        model.model_rebuild(force=True)


if _PLUGINS_ENV is None:
    os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)
else:
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = _PLUGINS_ENV
