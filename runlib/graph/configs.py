"""The one place stage configs are built: one function per stage kind, from the spec and its plan.

Each function returns the configs of every instance of its stage kind; `runlib.graph.build` keys
the nodes by them and the stage code receives them, so what a stage reads and what its key covers
are the same by construction. Nothing machine-local and not the run's name goes into a config.

Pure but for one thing: every file a stage reads is in its config with its content digest (runlib.curate.
inputs: hashed once per file version, cached under <work>/cache), so replacing a file changes the keys of
the stages that read it: a file-based source's shards (the files its glob matches now), a pretrained
tokenizer (tokenizer.pretrained) and an eval task's file or folder (eval.tasks[].path). A builtin source
that reads Python's own files has that Python's version in its config.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from runlib.curate.builtin import builtin_python
from runlib.curate.config import (
    CurateShardConfig,
    CurateSourceConfig,
    DedupPartitionConfig,
    FilterQualityConfig,
    FilterShardConfig,
    InputFile,
    TrainClassifierConfig,
    TrainNgramLmConfig,
)
from runlib.curate.extract import extractor_version
from runlib.curate.filters import C4_RULES, FINEWEB_RULES
from runlib.curate.inputs import source_inputs
from runlib.curate.rules import GOPHER_RULES, PII_KINDS
from runlib.curate.versions import CLASSIFIER_HELDOUT_FRACTION, CLASSIFIER_WORD_NGRAMS, fasttext_version
from runlib.curate.words import SPACY_VERSION
from runlib.data.config import TokenizeConfig
from runlib.errors import UserError
from runlib.eval.config import EvalConfig, EvalModelConfig
from runlib.ladder.config import FitLadderConfig, LadderPoint
from runlib.ladder.rungs import Ladder
from runlib.plan import Plan, derive
from runlib.spec.branches import branch_run, without_branches
from runlib.spec.models import RunSpec, SourceSpec
from runlib.spec.units import Duration
from runlib.tokenizer.config import TokenizerConfig
from runlib.train.config import TrainPhaseConfig, build_train_phase_configs, log_every_tokens

BUILTIN_DEFAULT_SHARDS = 2
# how each rule set of curate.quality counts its words and sentences, in the curate_shard key
QUALITY_COUNTING = {"gopher": GOPHER_RULES, "c4": C4_RULES, "fineweb": FINEWEB_RULES}


# ----------------------------------------------------------------------------------------- curation


def source_files(name: str, source: SourceSpec) -> list[InputFile]:
    """The files a file-based source reads, sorted by path, each with its size and content digest (so a
    stage key changes with the content; runlib.curate.inputs); an error names the source when there are
    none, when the glob is too broad or walks into a symbolic link loop."""
    pattern = source.input.path
    field = f"data.sources.{name}.input.path"
    if not pattern:
        raise UserError(f"{field}: format {source.input.format} needs a path (a glob of input files)")
    directory = source.input.format == "text" and Path(pattern).is_dir()  # a directory of plain-text files
    files = source_inputs(pattern, field, directory=directory)
    if not files:
        raise UserError(f"{field}: {pattern!r} matches no file; check the path (relative to {Path.cwd()})")
    return files


_placeholders: ContextVar[list[str] | None] = ContextVar("placeholder_files", default=None)
PLACEHOLDER_DIGEST = "missing"


@contextmanager
def placeholder_files() -> Iterator[list[str]]:
    """Within it, a file that named_files does not find gets a placeholder fingerprint (0 bytes, digest
    'missing') instead of an error, and its field joins the list yielded: `runlib diff` compares the keys of
    specs whose files are on another machine (the same placeholder on both sides keeps keys comparable)."""
    missing: list[str] = []
    token = _placeholders.set(missing)
    try:
        yield missing
    finally:
        _placeholders.reset(token)


def named_files(path: str, field: str) -> list[InputFile]:
    """The files behind a spec field that names one file or a folder (every file under it), each with its
    size and content digest; an error names the field when there is none."""
    folder = Path(path).is_dir()
    files = source_inputs(path if folder else glob.escape(path), field, directory=folder)
    placeholders = _placeholders.get()
    if not files and placeholders is not None:
        placeholders.append(field)
        return [InputFile(path=path, bytes=0, digest=PLACEHOLDER_DIGEST)]
    if not files:
        what = "an empty folder" if folder else "not a file"
        raise UserError(f"{field}: {path!r} is {what} here (relative paths start at {Path.cwd()}); correct the path")
    return files


def ner_files(path: str, field: str) -> list[InputFile]:
    """The files of a spaCy pipeline folder (named_files), refused unless it is one: a folder with the
    config.cfg that spacy.load reads first."""
    if not Path(path).is_dir() and _placeholders.get() is None:
        raise UserError(
            f"{field}: {path!r} is not a folder here (relative paths start at {Path.cwd()}); give the "
            "spaCy pipeline folder"
        )
    files = named_files(path, field)
    if files and files[0].digest != PLACEHOLDER_DIGEST:
        if not Path(path).is_dir() or not (Path(path) / "config.cfg").is_file():
            raise UserError(
                f"{field}: {path!r} is not a spaCy pipeline folder (no config.cfg in it); give the folder "
                "that spaCy's nlp.to_disk wrote, or an installed model's data folder (en_core_web_sm/"
                "en_core_web_sm-3.8.0)"
            )
    return files


def shard_plan(name: str, source: SourceSpec) -> list[list[InputFile]]:
    """Each curation shard's input files ([] for builtin sources, which split their documents)."""
    if source.input.format == "builtin":
        return [[] for _ in range(source.input.shards or BUILTIN_DEFAULT_SHARDS)]
    files = source_files(name, source)
    if source.input.shard_bytes is not None:
        return shards_by_bytes(files, source.input.shard_bytes)
    n = min(source.input.shards or len(files), len(files))
    return [files[i::n] for i in range(n)]


def shards_by_bytes(files: list[InputFile], shard_bytes: int) -> list[list[InputFile]]:
    """The files, in order, in consecutive groups of at most shard_bytes (a larger file alone)."""
    shards: list[list[InputFile]] = []
    size = 0
    for file in files:
        if not shards or size + file.bytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(file)
        size += file.bytes
    return shards


def curate_shard_configs(spec: RunSpec, plan: Plan | None = None) -> dict[str, list[CurateShardConfig]]:
    """Source name -> the config of each of its curation shards, in shard order."""
    out = {}
    for name, source in spec.data.sources.items():
        shards = shard_plan(name, source)
        warc = source.input.format == "warc"
        url_filter = source.curate.url_filter
        ner = source.curate.ner
        ner_model = ner_files(ner.model, f"data.sources.{name}.curate.ner.model") if ner is not None else []
        blocklist = (
            named_files(url_filter.blocklist, f"data.sources.{name}.curate.url_filter.blocklist")
            if url_filter is not None and url_filter.blocklist
            else []
        )
        out[name] = [
            CurateShardConfig(
                input=source.input,
                curate=source.curate,
                shard=i,
                shards=len(shards),
                files=files,
                python=builtin_python(source.input.name) if source.input.format == "builtin" else None,
                extractor=extractor_version(source.input.extract or "resiliparse") if warc else None,
                url_blocklist=blocklist,
                pii_kinds=list(PII_KINDS) if source.curate.pii != "keep" else [],
                ner_model=ner_model,
                ner_runtime=f"spacy {SPACY_VERSION}" if ner is not None else None,
                quality_rules={
                    rule: QUALITY_COUNTING[rule] for rule in source.curate.quality if rule in QUALITY_COUNTING
                },
            )
            for i, files in enumerate(shards)
        ]
    return out


def dedup_partition_configs(spec: RunSpec, shards: dict[str, int]) -> dict[str, list[DedupPartitionConfig]]:
    """Source name -> the config of each slice of its dedup across shards (runlib.curate.partition), one per
    shard (`shards`: the source's shard count); [] for a source with neither exact nor MinHash dedup."""
    out: dict[str, list[DedupPartitionConfig]] = {}
    for name, source in spec.data.sources.items():
        dedup = source.curate.dedup
        wanted = dedup.exact or dedup.minhash is not None
        n = shards[name] if wanted else 0
        out[name] = [DedupPartitionConfig(dedup=dedup, partition=q, partitions=n) for q in range(n)]
    return out


def curate_source_configs(spec: RunSpec, plan: Plan | None = None) -> dict[str, CurateSourceConfig]:
    """Source name -> the config of the stage that joins its shards."""
    return {
        name: CurateSourceConfig(dedup=source.curate.dedup, heldout_docs=spec.data.heldout_docs)
        for name, source in spec.data.sources.items()
    }


def train_classifier_configs(spec: RunSpec) -> dict[str, TrainClassifierConfig]:
    """Source name -> its quality classifier's config, for the sources with curate.classifier."""
    out = {}
    for name, source in spec.data.sources.items():
        c = source.curate.classifier
        if c is not None:
            out[name] = TrainClassifierConfig(
                sample_docs=c.negatives_docs,
                seed=c.seed,
                heldout_fraction=CLASSIFIER_HELDOUT_FRACTION,
                epoch=c.epoch,
                lr=c.lr,
                dim=c.dim,
                word_ngrams=CLASSIFIER_WORD_NGRAMS,
                bucket=c.bucket,
                fasttext=fasttext_version(),
            )
    return out


def train_ngram_lm_configs(spec: RunSpec) -> dict[str, TrainNgramLmConfig]:
    """Source name -> its n-gram model's config, for the sources with curate.perplexity."""
    return {
        name: TrainNgramLmConfig(order=source.curate.perplexity.order)
        for name, source in spec.data.sources.items()
        if source.curate.perplexity is not None
    }


def filter_quality_configs(spec: RunSpec) -> dict[str, FilterQualityConfig]:
    """Source name -> its filter_quality config, for the sources with a classifier or a perplexity filter."""
    return {
        name: FilterQualityConfig(classifier=source.curate.classifier, perplexity=source.curate.perplexity)
        for name, source in spec.data.sources.items()
        if source.curate.classifier is not None or source.curate.perplexity is not None
    }


def filter_shard_configs(spec: RunSpec, shards: dict[str, int]) -> dict[str, list[FilterShardConfig]]:
    """Source name -> the configs of its filter_shard jobs, one per curate shard (`shards`: their count)."""
    return {
        name: [
            FilterShardConfig(
                shard=i,
                perplexity=source.curate.perplexity is not None,
                classifier=source.curate.classifier is not None,
                keep_dropped=source.curate.keep_dropped,
            )
            for i in range(shards[name])
        ]
        for name, source in spec.data.sources.items()
    }


# ------------------------------------------------------------------------------------ tokenization


def tokenizer_config(spec: RunSpec, plan: Plan | None = None) -> TokenizerConfig:
    tok = spec.tokenizer
    if tok.pretrained is None:
        return TokenizerConfig(**tok.model_dump())
    path = Path(tok.pretrained).expanduser()
    if path.is_dir():
        raise UserError(
            f"tokenizer.pretrained: {tok.pretrained!r} is a folder; give the tokenizer.json file in it "
            f"(e.g. {str(Path(tok.pretrained) / 'tokenizer.json')!r})"
        )
    file = named_files(str(path), "tokenizer.pretrained")[0]
    # the path as the spec writes it (a '~' unexpanded: nothing machine-local in a key), the digest of the file
    return TokenizerConfig(**tok.model_dump(), pretrained_file=file.model_copy(update={"path": tok.pretrained}))


def tokenize_configs(spec: RunSpec, plan: Plan | None = None) -> dict[str, TokenizeConfig]:
    """Source name -> the config of its tokenize jobs (runlib.graph.nodes makes one per curated shard)."""
    return {name: TokenizeConfig(token_dtype=spec.data.token_dtype) for name in spec.data.sources}


# ------------------------------------------------------------------------------------ training, eval


def train_phase_configs(spec: RunSpec, plan: Plan) -> list[TrainPhaseConfig]:
    """One config per phase, in order (runlib.train.config owns what a training phase reads)."""
    return list(build_train_phase_configs(spec, plan))


def evaluated_phases(spec: RunSpec, plan: Plan) -> list[int]:
    """Indices of the phases evaluated: all with eval.after_each_phase, else the last."""
    n = len(plan.phases)
    if spec.eval.after_each_phase:
        return list(range(n))
    return [n - 1] if n else []


def eval_configs(spec: RunSpec, plan: Plan) -> dict[int, EvalConfig]:
    """Phase index -> the config of its evaluation, for the phases evaluated."""
    train = train_phase_configs(spec, plan)
    task_files = {
        task.name: named_files(task.path, f"eval.tasks[{j}].path")
        for j, task in enumerate(spec.eval.tasks)
        if task.path is not None
    }
    out = {}
    for i in evaluated_phases(spec, plan):
        phase, trained = plan.phases[i], train[i]
        # the model exactly as the phase trained it (a learned position table's rows included)
        model = EvalModelConfig(spec=trained.model, vocab_rows=trained.vocab_rows, position_rows=trained.position_rows)
        out[i] = EvalConfig(
            phase=phase.name,
            phase_index=i,
            end_tokens=phase.span.end_tokens,
            seq_len=phase.settings.seq_len,
            rope_theta=phase.settings.rope_theta if spec.model.position == "rope" else None,
            rope_scaling=phase.settings.rope_scaling if spec.model.position == "rope" else None,
            model=model,
            heldout_tokens=spec.eval.heldout_tokens,
            tasks=spec.eval.tasks,
            task_files=task_files,
        )
    return out


# ------------------------------------------------------------------------------------------ ladder


def fit_ladder_config(spec: RunSpec, plan: Plan, ladder: Ladder) -> FitLadderConfig:
    """The fit_ladder stage's config: each rung's N, D and compute (runlib.ladder.rungs), the target's."""

    def point(name: str, width: int, layers: int, p: Plan, held_out: bool = False) -> LadderPoint:
        n = p.params
        return LadderPoint(
            name=name,
            width=width,
            layers=layers,
            params=n.non_embedding,
            params_total=n.total,
            tokens=p.tokens_total,
            flops=p.flops_total,
            held_out=held_out,
        )

    assert spec.ladder is not None
    return FitLadderConfig(
        rungs=[point(r.name, r.width, r.layers, r.plan, r.held_out) for r in ladder.rungs],
        skipped=list(ladder.skipped),
        target=point(spec.name, spec.model.d_model, spec.model.layers, plan),
        sources=sorted(spec.data.sources),
        bootstrap=spec.ladder.bootstrap,
        seed=spec.seed,
    )


# ---------------------------------------------------------------------------------------- branches


def branch_specs(spec: RunSpec, plan: Plan) -> dict[str, RunSpec]:
    """Branch name -> the run of that branch: the spec with its last phase's mixture, tokens and seq_len and
    the schedule's decay replaced by the branch's (runlib.spec.branches.branch_run, the run the audit checks
    too). `plan` is the plan of the spec without branches. Monitoring intervals are pinned to the base run's,
    so that the branch's earlier phases are the base run's exactly; an error names the branch whose settings
    would change an earlier phase (a decay reaching back before the branched phase, a learned position table
    resized)."""
    for i, phase in enumerate(spec.phases[:-1]):
        if phase.branches:
            raise UserError(
                f"phases[{i}].branches ({phase.name}): only the last phase can branch; move the branches to "
                f"phases[{len(spec.phases) - 1}] ({spec.phases[-1].name}) or make {phase.name} the last phase"
            )
    if not spec.phases or not spec.phases[-1].branches:
        return {}
    base = without_branches(spec)
    last = len(spec.phases) - 1
    phase = spec.phases[last]
    monitor = spec.monitor
    if monitor.log_every is None:  # the default follows the run's length: keep the base run's
        monitor = monitor.model_copy(update={"log_every": Duration(log_every_tokens(plan, None), "tokens")})
    base_train = train_phase_configs(base, plan)
    out: dict[str, RunSpec] = {}
    for b in phase.branches or []:
        unknown = sorted(set(b.mixture or {}) - set(spec.data.sources))
        if unknown:
            raise UserError(
                f"phases[{last}].branches ({b.name}).mixture: no source named {', '.join(unknown)}; the sources "
                f"are {', '.join(spec.data.sources)} (data.sources)"
            )
        branch = branch_run(spec, b).model_copy(update={"monitor": monitor})
        train = train_phase_configs(branch, derive(branch))
        for j in range(last):
            mine, theirs = train[j].model_dump(mode="json"), base_train[j].model_dump(mode="json")
            if mine != theirs:
                fields = sorted(k for k in mine if mine[k] != theirs.get(k))
                raise UserError(
                    f"phases[{last}].branches ({b.name}): the branch changes the training of the earlier phase "
                    f"{base.phases[j].name} ({', '.join(fields)}), so it cannot start from its checkpoint; "
                    "keep the decay within the branch (decay at most the branch's tokens) and the seq_len at "
                    "most the longest of the earlier phases with learned positions"
                )
        out[b.name] = branch
    return out
