"""The corpus job's configuration (the mechanism, shared with the linker and the trainer, is :mod:`wikiedm.config`).

    wikiedm corpus --config configs/pipeline/enwiki.yaml \
        --input DUMP --output OUT --labels.min_prior 0.05 --runner Direct

Precedence: defaults < YAML file (``--config``) < command-line flags. Nested
dataclasses become dotted flags (``--labels.min_prior``). Arguments the
config does not know are Beam pipeline options (``--runner``, ``--project``,
``--direct_num_workers`` ...) and are passed through to Beam untouched.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipelines.corpus.labels import LabelConfig
from wikiedm.config import ConfigError, ConfigParser, convert, parse_bool, parse_config  # noqa: F401 - re-exported
from wikiedm.fields import option

JOBS = ("twopass", "shuffle")


@dataclass
class WikiMentionsConfig:
    """Everything that decides the corpus job's output (recorded in manifest.json)."""

    input: str = option("", "the dump: .xml, .xml.bz2 (multistream too), .xml.gz, .xml.xz, .xml.zst; local or gs://, s3://")
    output: str = option("", "output folder (local or gs://...); a finished run has OUT/manifest.json")
    index: str = option("", "multistream index (...-multistream-index.txt.bz2); default: the one beside the dump if present; 'none' reads the dump as one stream")
    read_range_mb: int = option(64, "compressed MB of whole bz2 streams per parallel read task (multistream dumps)")
    max_page_mb: int = option(64, "pages larger than this (XML, MB) are skipped and dead-lettered")
    max_wikitext_chars: int = option(4_000_000, "wikitext longer than this is not parsed (dead-lettered)")
    disambiguation_templates: list = option([], "template names marking disambiguation pages; empty: the built-in list for the dump's language")
    max_redirect_hops: int = option(5, "redirect chains longer than this are counted and left unresolved")
    keep_red_links: bool = option(False, "keep links to pages absent from the dump as entities (use for a partial dump)")
    entity_vocab_size: int = option(1_000_000, "the N most-linked entities form the vocabulary (ids 3..N+2; 0-2 are [PAD],[UNK],[MASK])")
    labels: LabelConfig = option(LabelConfig(), "missing-mention labelling (EDMem 3.3.1)")
    blink_model: str = option("", "BLINK-compatible bi-encoder folder (linker/): adds source='blink' labels for unlinked spans; '' = off")
    blink_corpus: str = option("", "a finished corpus output (an earlier run) whose entities, descriptions and aliases the BLINK index covers")
    blink_threshold: float = option(0.5, "least final linker probability (model + alias prior) of an added BLINK label: the linker's --threshold")
    blink_kb: str = option("", "the linker's knowledge base: '' = the --blink_corpus entities; blink:DIR = BLINK's entity.jsonl + .t7, mapped onto --blink_corpus")
    blink_config: str = option("", "linker YAML (configs/linker/*.yaml) for the BLINK labels: top_k, fast, alias_top_k, ...; '' = the linker's defaults")
    tokenizer: str = option("gpt2-bpe", "Hugging Face fast tokenizer name or local path; 'gpt2-bpe' = the offline GPT-2/BART byte-level BPE")
    window: int = option(128, "tokens per passage window")
    overlap: int = option(10, "tokens shared by consecutive windows")
    passage_text: bool = option(True, "write each passage's text (column 'text': its tokens decoded; mention char offsets index it); false leaves the column out, the offsets stay passage-relative")
    validation_fraction: float = option(0.005, "fraction of pages held out (by a hash of the page id)")
    split_salt: str = option("", "salt of the split hash; change it to draw another validation set")
    num_shards: int = option(0, "--job shuffle only (the two-pass job writes one passages file per read range and split: see --read_range_mb): Parquet shards per split; 0 = ceil(passages / passages_per_shard)")
    passages_per_shard: int = option(250_000, "--job shuffle only: target passages per shard when --num_shards is 0")
    alias_shards: int = option(0, "Parquet shards of the alias table; 0 = ceil(rows / alias_rows_per_shard)")
    alias_rows_per_shard: int = option(2_000_000, "target alias-table rows per shard when --alias_shards is 0")
    description_shards: int = option(0, "--job shuffle only (the two-pass job writes one descriptions file per read range): Parquet shards of the entity descriptions; 0 = ceil(rows / descriptions_per_shard)")
    descriptions_per_shard: int = option(100_000, "--job shuffle only: target description rows per shard when --description_shards is 0")
    max_join_group: int = option(10_000, "most requests one join group may hold: keys with more (hub entities, popular link targets) are split into salted sub-groups")
    sort_buffer_rows: int = option(100_000, "rows a shard writer sorts in memory before spilling a sorted run to local disk")
    description_max_chars: int = option(2000, "longest entity description kept, in characters")
    row_group_rows: int = option(1000, "rows per Parquet row group (streaming reads)")
    progress_every_s: float = option(10.0, "seconds between progress lines (a local run prints pages and bytes read, pages/s and an ETA; readers log theirs)")
    job: str = option("twopass", "'twopass' (pass 1: tables from small records; pass 2: passages per read range, no text shuffled) or 'shuffle' (the earlier job, kept as the test oracle)")
    lookup_shards: int = option(8, "SQLite shard files of pass 1's lookup store (OUT/lookup/, removed at the end); more shards build in parallel on more workers")

    def validate(self) -> None:
        if not self.input:
            raise ValueError("--input is required (a MediaWiki XML dump)")
        if not self.output:
            raise ValueError("--output is required (a folder)")
        if self.window < 2 or not (0 <= self.overlap < self.window):
            raise ValueError(f"need window >= 2 and 0 <= overlap < window (got {self.window}, {self.overlap})")
        if self.blink_model and self.labels.hyperlinks_only:
            raise ValueError("--labels.hyperlinks_only true keeps the hyperlinks alone: it excludes --blink_model")
        if self.blink_model and not self.blink_corpus:
            raise ValueError("--blink_model needs --blink_corpus (the corpus output its entity index covers)")
        if not (0.0 <= self.validation_fraction <= 1.0):
            raise ValueError("--validation_fraction must be within [0, 1]")
        if self.job not in JOBS:
            raise ValueError(f"--job must be one of {', '.join(JOBS)} (got {self.job!r})")
        if self.progress_every_s <= 0:
            raise ValueError("--progress_every_s must be > 0")
        for name in ("row_group_rows", "entity_vocab_size", "max_redirect_hops", "passages_per_shard", "lookup_shards",
                     "alias_rows_per_shard", "descriptions_per_shard", "max_join_group", "sort_buffer_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        for name in ("num_shards", "alias_shards", "description_shards"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0 (0 = derived from the data)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
