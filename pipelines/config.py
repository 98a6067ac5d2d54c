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
from typing import ClassVar

from pipelines.corpus.labels import LabelConfig
from wikiedm.config import ConfigError, ConfigParser, convert, parse_bool, parse_config  # noqa: F401 - re-exported
from wikiedm.fields import option

_ONE_FILE_PER_UNIT = ("the job writes one {what} for each unit of pass 2 (a chunk of --cache_chunk_articles cached "
                      "articles; with --article_cache false, a read range of --read_range_mb): drop the option, or "
                      "set --cache_chunk_articles")


@dataclass
class WikiMentionsConfig:
    """Everything that decides the corpus job's output (recorded in manifest.json)."""

    # Options of earlier versions (the shuffle job's), each with what replaced it: given on the command line or in
    # a YAML file, one is a one-line error (wikiedm.config); in the run record or manifest of an earlier run it is
    # left out of the comparison (pipelines.output_guard).
    REMOVED_OPTIONS: ClassVar[dict[str, str]] = {
        "num_shards": _ONE_FILE_PER_UNIT.format(what="passages file per split"),
        "passages_per_shard": _ONE_FILE_PER_UNIT.format(what="passages file per split"),
        "description_shards": _ONE_FILE_PER_UNIT.format(what="entity_descriptions file"),
        "descriptions_per_shard": _ONE_FILE_PER_UNIT.format(what="entity_descriptions file"),
        "alias_rows_per_shard": "the alias table is written one file per alias shard: set --alias_shards "
                                "(0 = as many as --lookup_shards), or drop the option",
        "max_join_group": "pass 1 streams each key's records from sorted run files and holds no join group "
                          "(--sort_buffer_rows bounds a writer's memory, --lookup_shards sets pass 1's parallelism); "
                          "drop the option",
        "job": "the corpus job has one design, the two-pass job (the shuffle job it chose between made the same "
               "rows and is gone): drop the option",
    }

    input: str = option("", "the dump: .xml, .xml.bz2 (multistream too), .xml.gz, .xml.xz, .xml.zst; local or gs://, s3://",
                        path="file", required=True)
    output: str = option("", "output folder (local or gs://...); a finished run has OUT/manifest.json", required=True,
                         metavar="DIR")
    index: str = option("", "multistream index (...-multistream-index.txt.bz2); default: the one beside the dump if present; 'none' reads the dump as one stream")
    read_range_mb: int = option(64, "compressed MB of whole bz2 streams per parallel read task (multistream dumps)")
    max_page_mb: int = option(64, "pages larger than this (XML, MB) are skipped and dead-lettered")
    max_wikitext_chars: int = option(4_000_000, "wikitext longer than this is not parsed (dead-lettered)")
    disambiguation_templates: list = option([], "template names marking disambiguation pages; empty: the built-in list for the dump's language")
    max_redirect_hops: int = option(5, "redirect chains longer than this are counted and left unresolved")
    keep_red_links: bool = option(False, "keep links to pages absent from the dump as entities (use for a partial dump)")
    entity_vocab_size: int = option(1_000_000, "the N most-linked entities form the vocabulary (ids 3..N+2; 0-2 are [PAD],[UNK],[MASK])")
    labels: LabelConfig = option(LabelConfig(), "missing-mention labelling (EDMem 3.3.1)")
    blink_model: str = option("", "BLINK-compatible bi-encoder folder (linker/): adds source='blink' labels for unlinked spans; '' = off",
                              path="dir")
    blink_corpus: str = option("", "a finished corpus output (an earlier run) whose entities, descriptions and aliases the BLINK index covers",
                               path="corpus")
    blink_threshold: float = option(0.5, "least final linker probability (model + alias prior) of an added BLINK label: the linker's --threshold")
    blink_kb: str = option("", "the linker's knowledge base: '' = the --blink_corpus entities; blink:DIR = BLINK's entity.jsonl + .t7, mapped onto --blink_corpus")
    blink_config: str = option("", "linker YAML (configs/linker/*.yaml) for the BLINK labels: top_k, fast, alias_top_k, ...; '' = the linker's defaults",
                               path="file")
    tokenizer: str = option("gpt2-bpe", "Hugging Face fast tokenizer name or local path; 'gpt2-bpe' = the offline GPT-2/BART byte-level BPE")
    window: int = option(128, "tokens per passage window")
    overlap: int = option(10, "tokens shared by consecutive windows")
    passage_text: bool = option(True, "write each passage's text (column 'text': its tokens decoded; mention char offsets index it); false leaves the column out, the offsets stay passage-relative")
    validation_fraction: float = option(0.005, "fraction of pages held out (by a hash of the page id)")
    split_salt: str = option("", "salt of the split hash; change it to draw another validation set")
    alias_shards: int = option(0, "Parquet shards of the alias table (by a hash of the alias; each built by one worker); 0 = as many as --lookup_shards")
    sort_buffer_rows: int = option(100_000, "records a writer sorts in memory before spilling a sorted run to disk (pass 1's run files under OUT/tables/, the shard writers' local runs)")
    description_max_chars: int = option(2000, "longest entity description kept, in characters")
    row_group_rows: int = option(1000, "rows per Parquet row group (streaming reads)")
    progress_every_s: float = option(10.0, "seconds between progress lines (a local run prints pages and bytes read, pages/s and an ETA; readers log theirs)")
    article_cache: bool = option(True, "pass 1 caches the extracted articles (zstd, OUT/article_cache/, removed at the end; ~0.9 bytes per compressed dump byte) and pass 2 reads them: ~1/10 of the CPU of extracting again (benchmarks/results/pass2_source.json); false: pass 2 reads and extracts each range again")
    cache_chunk_articles: int = option(10_000, "articles per chunk of the article cache: a unit of pass 2's work (and one passages file per split), so a dump that is one compressed stream is still written by many workers")
    lookup_shards: int = option(8, "shards of pass 1's tables: its sorted runs (OUT/tables/) and lookup store's SQLite files (OUT/lookup/), both removed at the end; each shard's steps run on one worker, so more shards build in parallel on more workers")

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
        if self.progress_every_s <= 0:
            raise ValueError("--progress_every_s must be > 0")
        for name in ("row_group_rows", "entity_vocab_size", "max_redirect_hops", "lookup_shards",
                     "cache_chunk_articles", "sort_buffer_rows", "read_range_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        if self.alias_shards < 0:
            raise ValueError("--alias_shards must be >= 0 (0 = as many as --lookup_shards)")
        from wikiedm.tokenizer import tokenizer_source_problem

        problem = tokenizer_source_problem(self.tokenizer)
        if problem:
            raise ValueError(f"--tokenizer {problem}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- the command lines (no Beam import)

# The runner options a user of `wikiedm corpus` / `wikiedm link` most often needs (--help's epilog); any other
# Beam pipeline option is accepted too. tests/test_cli_config.py checks that each is one of Beam's.
RUNNER_OPTIONS = (
    ("--runner NAME", "Direct (this machine; the default), Dataflow, Flink, Spark, Prism, Portable, or a module.Class"),
    ("--dry_run true", "build and validate the job graph (Dataflow: the job), submit nothing"),
    ("--direct_num_workers N", "Direct: parallel workers (0: one per CPU core; the default is 1)"),
    ("--direct_running_mode MODE", "Direct: in_memory (the default), multi_threading or multi_processing"),
    ("--setup_file FILE", "Dataflow and other remote workers: the setup.py that installs this package on them"),
    ("--project ID", "Dataflow: the Google Cloud project"),
    ("--region REGION", "Dataflow: the region (europe-west4 ...)"),
    ("--temp_location gs://...", "Dataflow: where the job keeps temporary files"),
    ("--num_workers N", "Dataflow: initial number of workers (--max_num_workers bounds autoscaling)"),
)
# The keys `wikiedm corpus --help` shows (--help-config: all of them).
CORPUS_COMMON = ("input", "output", "index", "keep_red_links", "entity_vocab_size", "tokenizer", "window", "overlap",
                 "validation_fraction", "read_range_mb", "blink_model", "blink_kb", "blink_config")


def runner_help() -> str:
    """The epilog of a Beam job's --help: the main runner options."""
    width = max(len(flag) for flag, _ in RUNNER_OPTIONS)
    return ("runner options (Beam's; any other Beam pipeline option is passed on too):\n"
            + "\n".join(f"  {flag:<{width}}  {text}" for flag, text in RUNNER_OPTIONS))


def corpus_parser(prog: str = "wikiedm corpus") -> ConfigParser:
    """``wikiedm corpus``'s command line: the config, --overwrite, and Beam's options passed on."""
    parser = ConfigParser(WikiMentionsConfig, prog=prog, description="The corpus job: a Wikipedia XML dump -> "
                          "entity-annotated 128-token passages.", hidden_aliases={"corpus": "blink_corpus"},
                          common=CORPUS_COMMON, epilog=runner_help())
    parser.add_bool("--overwrite", default=False,
                    help="replace a corpus of another dump or config in --output (its files are removed first); "
                         "a rerun of the same dump and config needs no --overwrite")
    return parser


def check_beam_options(flags: list[str], config_flags: list[str]) -> None:
    """The arguments a Beam job passes on are Beam's options, else a ConfigError that suggests the nearest
    option, the job's own or Beam's (``--windw``: did you mean --window?)."""
    names = [a.split("=", 1)[0] for a in flags if a.startswith("--")]
    if not names:
        return
    from apache_beam.options.pipeline_options import PipelineOptions

    from wikiedm.config import unknown_option

    beam_knows = {f"--{name}" for name in PipelineOptions([]).get_all_options(drop_default=False)}
    for name in names:
        if name not in beam_knows:
            raise unknown_option(name, [*config_flags, *sorted(beam_knows)])


def check_corpus_command(prog: str, argv: list[str]) -> None:
    parser = corpus_parser(prog)
    _, _, rest = parser.check(argv)
    check_beam_options(rest, parser.option_strings())


# ----------------------------------------------------------------------------- the corpus folder's tools


@dataclass
class ReportConfig:
    corpus: str = option("", "a finished corpus folder", path="corpus", required=True)
    output: str = option("", "where to write the picture (.png); '': CORPUS/label_coverage.png", metavar="FILE")


def report_parser(prog: str = "wikiedm report") -> ConfigParser:
    parser = ConfigParser(ReportConfig, prog=prog, description="label coverage plot and summary of a corpus folder",
                          hidden_aliases={"png": "output"}, positional="corpus", pass_unknown=False)
    return parser


@dataclass
class CardConfig:
    corpus: str = option("", "corpus folder (local or gs://) with manifest.json; the card is written there as README.md",
                         path="corpus", required=True)
    date: str = option("", "the dump's run date, YYYYMMDD, when the input's file name lacks it")


def card_parser(prog: str = "wikiedm card") -> ConfigParser:
    return ConfigParser(CardConfig, prog=prog, description="(re)write a corpus folder's dataset card README.md",
                        hidden_aliases={"dump_date": "date"}, positional="corpus", pass_unknown=False)


DEFAULT_MIRROR = "https://dumps.wikimedia.org"


@dataclass
class FetchConfig:
    wiki: str = option("", "database name: enwiki, dewiki, simplewiki ...", required=True, metavar="NAME")
    date: str = option("", "the dump's run date, YYYYMMDD", required=True, metavar="YYYYMMDD")
    output: str = option("", "folder to write to (local, gs://, s3://)", required=True, metavar="DIR")
    mirror: str = option(DEFAULT_MIRROR, "mirror base URL")
    timeout: float = option(60.0, "seconds without data before a retry")
    retries: int = option(3, "retries of a failed or corrupt download")

    def validate(self) -> None:
        if self.retries < 0:
            raise ValueError(f"--retries must be >= 0, got {self.retries}")
        if self.timeout <= 0:
            raise ValueError(f"--timeout must be > 0, got {self.timeout}")


def fetch_parser(prog: str = "wikiedm fetch") -> ConfigParser:
    return ConfigParser(FetchConfig, prog=prog, pass_unknown=False, hidden_aliases={"dest": "output"},
                        description="download a dump and verify it against Wikimedia's checksums")


@dataclass
class SampleConfig:
    output: str = option("", "the dump file to write (…xml or …xml.bz2)", required=True, metavar="FILE")
    per_kind: int = option(60, "entities per kind (5 kinds; at least 2: the sample's pages link the second of some)")
    paragraphs: int = option(4, "paragraphs of text per article")
    seed: int = option(7, "seed of the generated names, links and text")

    def validate(self) -> None:
        if self.per_kind < 2:
            raise ValueError(f"--per_kind must be >= 2, got {self.per_kind}")
        if self.paragraphs < 0:
            raise ValueError(f"--paragraphs must be >= 0, got {self.paragraphs}")


def sample_parser(prog: str = "wikiedm sample") -> ConfigParser:
    return ConfigParser(SampleConfig, prog=prog, positional="output", pass_unknown=False,
                        description="write the project's own small sample dump")
