"""The data side: the tokenizer, the sources, their curation and packing."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from runlib.spec.models.base import (
    MAX_NAME_CHARS,
    MAX_VOCAB,
    MAX_WEIGHT,
    NAME_PATTERN,
    NAMES_FILE,
    PLANNING_ONLY,
    KeyedWhenSet,
    SpecModel,
)
from runlib.spec.units import Count


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


class InputSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"extract", "shard_bytes"})

    format: Literal["jsonl", "parquet", "text", "warc", "builtin"]
    """jsonl (plain or .gz) | parquet | text (a directory of plain-text files) | warc (.warc or .warc.gz: the
    HTML of the crawl's response records with status 200, text extracted) | builtin (text already on the machine)."""

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

    shard_bytes: Count | None = Field(None, ge=1)
    """Curation jobs of about this many bytes of input each, instead of a count: the files, in order, are
    grouped into shards of at most this size (a larger file is a shard of its own: files are not split), so
    a source 4x larger makes 4x the shards and the same memory per job. Not with shards, nor builtin."""

    extract: Literal["resiliparse", "trafilatura"] | None = None
    """How a warc source's pages become text (warc only): resiliparse's main-content extraction (the
    default, as DCLM) or trafilatura's (as FineWeb). Navigation, headers, footers and sidebars go;
    paragraphs, lists, code blocks and tables stay."""

    @model_validator(mode="after")
    def _one_shard_rule(self) -> InputSpec:
        if self.shards is not None and self.shard_bytes is not None:
            raise ValueError("give one of shards and shard_bytes; fix: remove one")
        if self.shard_bytes is not None and self.format == "builtin":
            raise ValueError("shard_bytes groups input files, and a builtin source has none; fix: use shards")
        return self


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


class SubstringSpec(SpecModel):
    """Exact substring dedup (Lee et al. 2022, arXiv 2107.06499, ExactSubstr: a suffix array over the data,
    runs of at least 50 tokens that occur twice removed), within each curate_shard: a repeat whose copies lie in
    different shards stays (at most input.shards copies of a span survive)."""

    min_tokens: int = Field(50, ge=5, le=100_000)
    """Shortest repeated run removed, in tokens: runs of word characters and single punctuation marks (Lee et
    al. count GPT-2 BPE tokens); the first copy in input order is kept."""


class DedupSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"substring"})

    exact: bool = True
    """Drop documents whose normalized text hashes equal (SHA-256)."""
    minhash: MinhashSpec | None = None
    """Near-duplicate removal by MinHash LSH."""
    substring: SubstringSpec | None = None
    """Repeated spans cut out of the documents (after exact dedup, before the MinHash signatures)."""


class UrlFilterSpec(SpecModel):
    """URL and domain filtering before extraction (FineWeb's URL filter, Penedo et al. 2024, section 3.2)."""

    blocklist: str | None = Field(None, json_schema_extra=NAMES_FILE)
    """A file or folder of blocked domains, one per line (the UT1 lists' layout: a folder per category with
    `domains` and `urls` files); a listed domain blocks its subdomains too. Its content is in the key."""
    banned_words: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field([], max_length=100_000)
    """Words that drop a page when one is a whole word of its URL (the URL split on non-alphanumerics)."""


AnchorName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME_CHARS)]


class ClassifierSpec(SpecModel):
    """A fastText quality classifier trained inside the workflow: this source's curated documents are the
    negatives, the anchors' curated documents the positives (DCLM, Li et al. 2024, arXiv 2406.11794,
    section 4.4: fastText on OpenHermes 2.5 and ELI5 against RefinedWeb, keeping the top 10%)."""

    positives: list[AnchorName] = Field(min_length=1, max_length=64)
    """Sources of this spec whose curated train split holds the kind of text to keep (each itself without a
    classifier or perplexity filter)."""
    negatives_docs: int = Field(5000, ge=20, le=10_000_000)
    """Documents of this source (after its other curation steps) sampled as negatives, and as many positives at
    most (the smallest SHA-256 first: a choice of the texts, stable across reruns)."""
    keep_top_fraction: float | None = Field(None, gt=0, le=1)
    """Keep this fraction of the source's documents, the highest scores first (DCLM: 0.1). Exactly one of
    keep_top_fraction and keep_threshold; neither: 0.1."""
    keep_threshold: float | None = Field(None, ge=0, le=1)
    """Keep the documents whose probability of the positive label is at least this."""
    seed: int = Field(0, ge=0, le=2**31 - 1)
    """fastText's seed and the held-out split's (10% of each class, for precision and recall)."""
    epoch: int = Field(5, ge=1, le=1000)
    """fastText epochs (DCLM: 5)."""
    lr: float = Field(0.1, gt=0, le=10)
    """fastText learning rate (DCLM: 0.1; a few thousand documents separate better at 0.5 over 10 epochs)."""
    dim: int = Field(100, ge=2, le=1000)
    """fastText embedding dimension (DCLM: 100)."""
    bucket: int = Field(200_000, ge=1000, le=10_000_000)
    """Rows of the hashed bigram table (fastText's default is 2,000,000, DCLM's too: its model file holds
    bucket x dim x 4 bytes, 800 MB at dim 100; 200,000 makes it 80 MB)."""

    @model_validator(mode="after")
    def _one_rule(self) -> ClassifierSpec:
        if self.keep_top_fraction is not None and self.keep_threshold is not None:
            raise ValueError("give one of keep_top_fraction and keep_threshold; fix: remove one")
        return self


Percentile = Annotated[float, Field(ge=0, le=100)]
Perplexity = Annotated[float, Field(ge=1, le=1e12)]


class PerplexitySpec(SpecModel):
    """An n-gram language model trained inside the workflow on reference sources, scoring this source's
    documents by perplexity (CCNet, Wenzek et al. 2020, arXiv 1911.00359, section 3.3: a 5-gram KenLM model
    on Wikipedia; head, middle and tail thirds by perplexity)."""

    reference: list[AnchorName] = Field(min_length=1, max_length=64)
    """Sources of this spec whose curated train split the model is trained on (each itself without a
    classifier or perplexity filter)."""
    order: int = Field(3, ge=2, le=5)
    """n of the n-gram model (CCNet: 5)."""
    keep_percentiles: tuple[Percentile, Percentile] | None = None
    """Keep the documents whose perplexity lies within these percentiles of this source's perplexities, both
    included: [0, 66.7] keeps CCNet's head and middle. Exactly one of keep_percentiles and keep_range;
    neither: [0, 66.7]."""
    keep_range: tuple[Perplexity, Perplexity] | None = None
    """Keep the documents whose perplexity lies within [low, high]."""

    @model_validator(mode="after")
    def _one_rule(self) -> PerplexitySpec:
        if self.keep_percentiles is not None and self.keep_range is not None:
            raise ValueError("give one of keep_percentiles and keep_range; fix: remove one")
        low, high = self.keep_percentiles or (0.0, 100.0)
        if not 0 <= low <= high <= 100:
            raise ValueError(f"keep_percentiles [{low}, {high}]: give 0 <= low <= high <= 100, e.g. [0, 66.7]")
        low, high = self.keep_range or (1.0, 1.0)
        if not 1 <= low <= high:  # a perplexity is at least 1
            raise ValueError(f"keep_range [{low}, {high}]: give 1 <= low <= high (perplexities are at least 1)")
        return self


EntityLabel = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=64)]


class NerSpec(SpecModel):
    """The named-entity model of curate.pii: ner (names, places, organisations)."""

    model: str = Field(json_schema_extra=NAMES_FILE)
    """A spaCy pipeline folder with an ner or entity_ruler component: what spaCy's `nlp.to_disk` writes, or
    the data folder of an installed model package (en_core_web_sm/en_core_web_sm-3.8.0). runlib ships and
    downloads none. Its files' content, and the spaCy release that runs it, are in the key."""
    labels: list[EntityLabel] = Field(["PERSON"], min_length=1, max_length=100)
    """The entity labels masked (spaCy's English models: PERSON, NORP, ORG, GPE, LOC, ...)."""


class CurateSpec(KeyedWhenSet):
    KEYED_WHEN_SET: ClassVar[frozenset[str]] = frozenset(
        {"url_filter", "keep_dropped", "classifier", "perplexity", "ner"}
    )

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
    pii: Literal["mask", "drop", "keep", "ner"] = "keep"
    """Personal data (e-mail addresses, public IPv4 and IPv6 addresses, phone numbers, Luhn-valid payment
    card numbers): mask it, drop the document, or keep it. ner masks it and, besides, the entities that the
    model of curate.ner finds; refused without one (RUN013): none ships with runlib or can be downloaded."""
    ner: NerSpec | None = None
    """The named-entity model of pii: ner (refused with any other pii value: it would run for nothing)."""
    url_filter: UrlFilterSpec | None = None
    """URL and domain filtering (warc sources: their documents carry URLs)."""
    classifier: ClassifierSpec | None = None
    """A quality classifier trained on anchor sources; documents kept by score (after dedup, in the
    source's filter_quality stage)."""
    perplexity: PerplexitySpec | None = None
    """An n-gram language model trained on reference sources; documents kept by perplexity (after dedup, in
    the source's filter_quality stage)."""
    keep_dropped: int = Field(0, ge=0, le=10_000)
    """Documents kept per step and reason among those curation drops (the first in input order, per shard
    and in the join), for `runlib docs --dropped`; 0 keeps none."""


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
