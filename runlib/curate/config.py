"""The configs of the curation stages: exactly what each reads besides its inputs' artifacts.

A source's name is not part of either: it only labels error messages (passed beside the config), so
two specs that curate the same input the same way share the artifacts whatever they call the source.
"""

from __future__ import annotations

from runlib.spec.models import ClassifierSpec, CurateSpec, DedupSpec, InputSpec, PerplexitySpec
from runlib.store.stageconfig import StageConfig


class InputFile(StageConfig):
    """One input file of a file source as its stage key sees it: a change of content changes the key."""

    path: str
    """The path as the source's glob matched it (relative to the working directory, like the glob)."""

    bytes: int
    """Size of the file."""

    digest: str
    """'xxh3_128:<hex>' of the file's bytes (runlib.util.hashing.file_digest), cached per file version."""


class CurateShardConfig(StageConfig):
    """One shard of one source: where its documents come from and every curation step applied to them."""

    KEYED_WHEN_SET = frozenset(
        {"python", "extractor", "url_blocklist", "pii_kinds", "quality_rules", "ner_model", "ner_runtime"}
    )

    input: InputSpec
    """The source's input (format, path glob, builtin name, text field, max_docs, shards)."""

    curate: CurateSpec
    """The curation steps (normalize, length, language, quality rules, PII, exact dedup, MinHash)."""

    shard: int
    """This shard's index, 0 .. shards - 1."""

    shards: int
    """Number of shards of the source (a builtin source's shard takes documents shard::shards)."""

    files: list[InputFile]
    """The input files this shard reads, in order, each with its size and content digest ([] for a builtin
    source); built by runlib.curate.inputs (the glob walk and the digest cache)."""

    python: str | None = None
    """A builtin source that reads Python's own files (python_docs, python_code): the Python whose standard
    library it reads, 'cpython 3.11.9' (runlib.curate.builtin.builtin_python): another Python has other
    documentation and code, so another key. None (and left out of the key) for every other source."""

    extractor: str | None = None
    """A warc source's text extractor and its version, 'resiliparse 2.0.1' (runlib.curate.extract): another
    version extracts other text, so another key. None (and left out of the key) for every other source."""

    url_blocklist: list[InputFile] = []
    """The files of curate.url_filter.blocklist, each with its size and content digest (an edited list is
    another key); [] (and left out of the key) without one."""

    pii_kinds: list[str] = []
    """The kinds of personal data that curate.pii masks or drops (runlib.curate.rules.PII_KINDS): a shard
    curated when fewer kinds were found is another artifact; [] (and left out of the key) for pii: keep."""

    ner_model: list[InputFile] = []
    """The files of curate.ner.model (a spaCy pipeline folder), each with its size and content digest: an
    edited model is another key; [] (and left out of the key) without pii: ner."""

    ner_runtime: str | None = None
    """The spaCy release that runs curate.ner.model, 'spacy 3.8.18': another release may find other
    entities. None (and left out of the key) without pii: ner."""

    quality_rules: dict[str, str] = {}
    """How a rule set of curate.quality counts, where it changed since its first version (gopher, c4, fineweb:
    their words and sentences, and the spaCy release that makes them, runlib.curate.words): a shard curated
    under the old counting is another artifact; {} (and left out of the key) when no such rule set is used."""


class DedupPartitionConfig(StageConfig):
    """One slice of a source's hash space (runlib.curate.partition): the exact duplicates and the MinHash
    candidate pairs among the documents whose hash (or band mix) falls in it, over all the source's shards."""

    dedup: DedupSpec
    """The source's curate.dedup (exact across shards; minhash: ngram, bands, rows)."""

    partition: int
    """This slice's index, 0 .. partitions - 1."""

    partitions: int
    """Slices of the source (its shard count: each job holds about one shard's tables)."""


class CurateSourceConfig(StageConfig):
    """The join of a source's shards: dedup across shards, near-duplicates, the held-out split."""

    dedup: DedupSpec
    """Exact dedup across shards and MinHash near-duplicate removal (the shards computed the signatures; the
    LSH candidates' texts are read again from the shards for the exact Jaccard check against threshold)."""

    heldout_docs: int
    """Documents kept out of training (the ones with the smallest SHA-256)."""


class TrainClassifierConfig(StageConfig):
    """A fastText quality classifier (runlib.curate.classifier): positives from the anchors' documents after
    their join (input roles positive0, positive1, ... in curate.classifier.positives' order: each its
    curate_source, with its shards as positive0/shard0, ...), negatives from the filtered source's own
    (role negatives, its shards negatives/shard0, ...)."""

    sample_docs: int
    """curate.classifier.negatives_docs: negatives sampled (the smallest SHA-256 first), and positives at most."""

    seed: int
    """fastText's seed and the held-out split's."""

    heldout_fraction: float
    """Share of each class held out for the precision and recall in the artifact."""

    epoch: int
    """fastText epochs."""

    lr: float
    """fastText learning rate."""

    dim: int
    """fastText embedding dimension."""

    word_ngrams: int
    """fastText wordNgrams (2: unigrams and bigrams, as DCLM)."""

    bucket: int
    """Rows of fastText's hashed n-gram table (the model file holds bucket x dim float32)."""

    fasttext: str
    """The fastText library and version, 'fasttext-wheel 0.9.2': another version trains another model."""


class TrainNgramLmConfig(StageConfig):
    """An n-gram language model (runlib.curate.ngram_lm) on the reference sources' documents after their join
    (input roles reference0, reference1, ... in curate.perplexity.reference's order, each its curate_source,
    with its shards as reference0/shard0, ...)."""

    order: int
    """n of the n-gram model."""


class ScoreQualityConfig(StageConfig):
    """One curate shard's documents after the source's join scored by its quality models (input roles shard,
    source, classifier, ngram_lm): what they keep is filter_quality's, so a changed keep rule rescores none."""

    classifier: bool
    """Score with the source's classifier (curate.classifier is set)."""

    perplexity: bool
    """Score with its reference sources' n-gram model (curate.perplexity is set)."""

    shard: int
    """Which shard this job scores, 0 .. the source's shards - 1 (its documents' ids in the join's fates)."""


class FilterQualityConfig(StageConfig):
    """Which of a source's curated documents the spec's rules keep, from the scores of its score_quality
    shards (input roles source, scores0, scores1, ...); filter_shard writes them."""

    classifier: ClassifierSpec | None
    """curate.classifier: which documents to keep by score (keep_top_fraction or keep_threshold)."""

    perplexity: PerplexitySpec | None
    """curate.perplexity: which documents to keep by perplexity (keep_percentiles or keep_range)."""


class FilterShardConfig(StageConfig):
    """One curate shard's documents as the source trains on them (input roles shard, source; with quality
    filters also scores and quality): the join's verdicts and the quality filters' applied."""

    shard: int
    """Which shard, 0 .. the source's shards - 1 (its documents' ids in the join's fates)."""

    perplexity: bool
    """The source has a perplexity filter: each document kept carries its "perplexity"."""

    classifier: bool
    """The source has a classifier: each document kept carries its "quality_score"."""

    keep_dropped: int
    """curate.keep_dropped: documents kept per step and reason among those this shard's join and quality
    filters drop (0: none)."""
