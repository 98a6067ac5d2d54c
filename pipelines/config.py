"""The corpus job's configuration: dataclasses with help text, YAML, CLI overrides.

    python -m pipelines.wiki_mentions --config configs/pipeline/enwiki.yaml \
        --input DUMP --output OUT --labels.min_prior 0.05 --runner=Direct

Precedence: defaults < YAML file (``--config``) < command-line flags. Nested
dataclasses become dotted flags (``--labels.min_prior``). Arguments the
config does not know are Beam pipeline options (``--runner``, ``--project``,
``--direct_num_workers`` ...) and are passed through to Beam untouched.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from pipelines.corpus.labels import LabelConfig


def _help(text: str, **kw) -> Any:
    return field(metadata={"help": text}, **kw)


@dataclass
class WikiMentionsConfig:
    """Everything that decides the corpus job's output (recorded in manifest.json)."""

    input: str = _help("the dump: .xml, .xml.bz2 (multistream too), .xml.gz, .xml.xz, .xml.zst; local or gs://, s3://", default="")
    output: str = _help("output folder (local or gs://...); a finished run has OUT/manifest.json", default="")
    index: str = _help("multistream index (...-multistream-index.txt.bz2); default: the one beside the dump if present; 'none' reads the dump as one stream", default="")
    read_range_mb: int = _help("compressed MB of whole bz2 streams per parallel read task (multistream dumps)", default=64)
    max_page_mb: int = _help("pages larger than this (XML, MB) are skipped and dead-lettered", default=64)
    max_wikitext_chars: int = _help("wikitext longer than this is not parsed (dead-lettered)", default=4_000_000)
    disambiguation_templates: list = _help("template names marking disambiguation pages; empty: the built-in list for the dump's language", default_factory=list)
    max_redirect_hops: int = _help("redirect chains longer than this are counted and left unresolved", default=5)
    keep_red_links: bool = _help("keep links to pages absent from the dump as entities (use for a partial dump)", default=False)
    entity_vocab_size: int = _help("the N most-linked entities form the vocabulary (ids 3..N+2; 0-2 are [PAD],[UNK],[MASK])", default=1_000_000)
    labels: LabelConfig = field(default_factory=LabelConfig, metadata={"help": "missing-mention labelling (EDMem 3.3.1)"})
    blink_model: str = _help("BLINK-compatible bi-encoder folder (linker/): adds source='blink' labels for unlinked spans; '' = off", default="")
    blink_corpus: str = _help("a finished corpus output (an earlier run) whose entities, descriptions and aliases the BLINK index covers", default="")
    blink_threshold: float = _help("least final linker probability (model + alias prior) of an added BLINK label: the linker's --threshold", default=0.5)
    blink_kb: str = _help("the linker's knowledge base: '' = the --blink_corpus entities; blink:DIR = BLINK's entity.jsonl + .t7, mapped onto --blink_corpus", default="")
    blink_config: str = _help("linker YAML (configs/linker/*.yaml) for the BLINK labels: top_k, fast, alias_top_k, ...; '' = the linker's defaults", default="")
    tokenizer: str = _help("Hugging Face fast tokenizer name or local path; 'gpt2-bpe' = the offline GPT-2/BART byte-level BPE", default="gpt2-bpe")
    window: int = _help("tokens per passage window", default=128)
    overlap: int = _help("tokens shared by consecutive windows", default=10)
    validation_fraction: float = _help("fraction of pages held out (by a hash of the page id)", default=0.005)
    split_salt: str = _help("salt of the split hash; change it to draw another validation set", default="")
    num_shards: int = _help("Parquet shards per split; 0 = derived from the data, ceil(passages / passages_per_shard) per split", default=0)
    passages_per_shard: int = _help("target passages per shard when --num_shards is 0 (250k passages ~ 110 MB of Parquet)", default=250_000)
    alias_shards: int = _help("Parquet shards of the alias table; 0 = ceil(rows / alias_rows_per_shard)", default=0)
    alias_rows_per_shard: int = _help("target alias-table rows per shard when --alias_shards is 0", default=2_000_000)
    description_shards: int = _help("Parquet shards of the entity descriptions (first paragraph of each vocabulary entity's article); 0 = ceil(rows / descriptions_per_shard)", default=0)
    descriptions_per_shard: int = _help("target description rows per shard when --description_shards is 0", default=100_000)
    max_join_group: int = _help("most requests one join group may hold: keys with more (hub entities, popular link targets) are split into salted sub-groups", default=10_000)
    sort_buffer_rows: int = _help("rows a shard writer sorts in memory before spilling a sorted run to local disk", default=100_000)
    description_max_chars: int = _help("longest entity description kept, in characters", default=2000)
    row_group_rows: int = _help("rows per Parquet row group (streaming reads)", default=1000)
    progress_every_s: float = _help("seconds between progress lines of a reader", default=10.0)

    def validate(self) -> None:
        if not self.input:
            raise ValueError("--input is required (a MediaWiki XML dump)")
        if not self.output:
            raise ValueError("--output is required (a folder)")
        if self.window < 2 or not (0 <= self.overlap < self.window):
            raise ValueError(f"need window >= 2 and 0 <= overlap < window (got {self.window}, {self.overlap})")
        if self.blink_model and not self.blink_corpus:
            raise ValueError("--blink_model needs --blink_corpus (the corpus output its entity index covers)")
        if not (0.0 <= self.validation_fraction <= 1.0):
            raise ValueError("--validation_fraction must be within [0, 1]")
        for name in ("row_group_rows", "entity_vocab_size", "max_redirect_hops", "passages_per_shard",
                     "alias_rows_per_shard", "descriptions_per_shard", "max_join_group", "sort_buffer_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        for name in ("num_shards", "alias_shards", "description_shards"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0 (0 = derived from the data)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- generic part


def _flag_items(cls, prefix: str = ""):
    """(dotted name, field, type) of every leaf field of a dataclass tree."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _flag_items(tp, prefix + f.name + ".")
        else:
            yield prefix + f.name, f, tp


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def _parse_list(text: str) -> list:
    text = text.strip()
    if text.startswith("["):
        return list(json.loads(text))
    return [t.strip() for t in text.split(",") if t.strip()]


def _converter(tp):
    origin = typing.get_origin(tp) or tp
    if tp is bool:
        return _parse_bool
    if origin in (list, tuple, frozenset):
        return _parse_list
    if tp in (int, float, str):
        return tp
    return str


def _set_dotted(target: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        target = target.setdefault(p, {})
    target[leaf] = value


def _build(cls, values: dict):
    hints = typing.get_type_hints(cls)
    kwargs = {}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown config keys for {cls.__name__}: {sorted(unknown)}")
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        tp = hints[f.name]
        v = values[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = _build(tp, v or {})
        elif typing.get_origin(tp) is tuple or tp is tuple:
            kwargs[f.name] = tuple(v)
        elif typing.get_origin(tp) is frozenset or tp is frozenset:
            kwargs[f.name] = frozenset(v)
        else:
            kwargs[f.name] = v
    return cls(**kwargs)


def parse_config(cls, argv: list[str], *, prog: str = "", description: str = ""):
    """Parse ``argv`` into (config, remaining args for Beam)."""
    parser = argparse.ArgumentParser(prog=prog or None, description=description, add_help=True, allow_abbrev=False)
    parser.add_argument("--config", default="", help="YAML file of config values (flags override it)")
    for name, f, tp in _flag_items(cls):
        helptext = f.metadata.get("help", "")
        parser.add_argument(f"--{name}", dest=name, type=_converter(tp), default=argparse.SUPPRESS, help=helptext)
    ns, rest = parser.parse_known_args(argv)
    values: dict = {}
    given = vars(ns)
    path = given.pop("config", "")
    if path:
        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of config keys")
        values.update(loaded)
    for dotted, value in given.items():
        _set_dotted(values, dotted, value)
    return _build(cls, values), rest
