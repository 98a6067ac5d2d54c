"""The dataset card of a corpus folder: ``OUT/README.md`` with Hugging Face YAML front matter.

    wikiedm card --corpus OUT        # (re)write OUT/README.md from OUT/manifest.json
    python -m pipelines.dataset_card ...   (the same command line)

The front matter makes the folder loadable as it is with ``datasets.load_dataset(OUT)``
(``configs`` -> ``data_files``: the passages' train and validation splits, and the entity
vocabulary, alias table and entity descriptions as further configs) and describes it on
the Hub (license, language, tags, task categories, size). The body says where the data
comes from (the dump, its wiki and date), how it was made (the job's config), what is in it
(every counter, the mentions per label source and their ratio to hyperlinks, the schema
of a passage) and how to load it.

``write_dataset_card`` only reads the manifest (when not given) and writes README.md
atomically; README.md is not part of the manifest, so writing it never invalidates a run.
"""
from __future__ import annotations

import fnmatch
import re
import sys

import yaml

from schemas import PASSAGE_SCHEMA, SPECIAL_ENTITIES, passage_schema
from schemas.corpus import MENTION_SOURCES
from wikiedm import storage
from wikiedm.config import ConfigError, command_error

CARD = "README.md"
LICENSE = "cc-by-sa-4.0"  # Wikipedia's text is CC BY-SA; a derived corpus carries the same licence

# Hugging Face's size buckets, by number of examples (passages).
_SIZE_BUCKETS = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                 (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                 (10_000_000_000, "1B<n<10B")]

# The further tables of a corpus folder, each loadable as its own config: (config, glob, what).
_TABLES = [
    ("entity_vocab", "entity_vocab/entity_vocab.parquet", "`entity_id`, `entity`, `count`: the entity vocabulary; ids 0/1/2 are " + "/".join(SPECIAL_ENTITIES)),
    ("alias_table", "alias_table/alias_table-*.parquet", "`alias`, `entity`, `count`, `prior`, `sources`: anchor texts, titles and redirects with their hyperlink counts and p(entity | alias)"),
    ("entity_descriptions", "entity_descriptions/entity_descriptions-*.parquet", "`entity_id`, `entity`, `description`: the first paragraph of each vocabulary entity's article"),
    ("dead_letters", "dead_letters/dead_letters.parquet", "every page or input unit that could not be used, with stage, reason and detail"),
]

_PASSAGE_COLUMNS = {
    "passage_id": '"{page_id}:{window_index}", unique',
    "page_id": "the article's page id in the dump",
    "title": "the article's title",
    "window_index": "position of the window in its article, from 0",
    "char_offset": "where the window's text starts in the article's plain text (`char_offset + char_start` is a mention's article offset)",
    "text": "the window's text: its tokens decoded (a character split by the window's edge left out); mention offsets index it",
    "token_ids": "the window's token ids (the saved `tokenizer/`), at most `window` tokens",
    "mentions": "entity mentions inside the window, sorted by position",
}
_MENTION_FIELDS = {
    "token_start": "first token of the mention in `token_ids`",
    "token_end": "one past its last token",
    "entity_id": "id in `entity_vocab` (1 = [UNK]: an entity outside the vocabulary)",
    "entity": "the resolved entity: its article title after redirects",
    "source": "how the mention was found: " + ", ".join(f"`{s}`" for s in MENTION_SOURCES),
    "surface": "the mention's text",
    "char_start": "offset in the passage's text (`text[char_start:char_end] == surface`)",
    "char_end": "end offset (exclusive) in the passage's text",
}
_SOURCE_MEANING = {
    "hyperlink": "a link an editor wrote (`[[target\\|anchor]]`)",
    "same_page_alias": "unlinked text equal to an anchor or title of an entity linked elsewhere on the same page (EDMem §3.3.1)",
    "title_alias": "unlinked text naming the page's own entity (its title or a redirect to it)",
    "same_page_number": "unlinked number (no letter, e.g. a year) that the same page links as anchor text, labelled with that link's entity",
    "blink": "labelled by an entity linker",
}


def dump_date(manifest: dict) -> str:
    """The dump's date (YYYYMMDD): ``card.dump_date`` when the caller knew it, else from the
    input's file name (``{wiki}-{date}-pages-...``), else ''."""
    if manifest.get("card", {}).get("dump_date"):
        return manifest["card"]["dump_date"]
    name = (manifest.get("job", {}).get("input") or manifest.get("config", {}).get("input") or "").rsplit("/", 1)[-1]
    match = re.search(r"-(\d{8})-", name)
    return match.group(1) if match else ""


def size_category(n: int) -> str:
    for limit, label in _SIZE_BUCKETS:
        if n < limit:
            return label
    return "n>10B"


def hub_language(code: str) -> str:
    """A wiki's language code as the Hub wants it (``simple`` English is ``en``)."""
    return {"simple": "en", "": "und"}.get(code or "", code)


def data_files(manifest: dict, pattern: str) -> str | list[str] | None:
    """What the card lists for one split: ``pattern`` when every matching file has rows, else the
    non-empty files by name, or None when all are empty. (``datasets`` cannot read a Parquet file
    with no rows, and rejects a split with no data, which a small dump gives: a 0-row shard.)"""
    matching = [f for f in manifest.get("files", []) if fnmatch.fnmatchcase(f["path"], pattern)]
    non_empty = sorted(f["path"] for f in matching if f.get("rows"))
    if not non_empty:
        return None
    return pattern if len(non_empty) == len(matching) else non_empty


def front_matter(manifest: dict) -> dict:
    site, summary = manifest.get("site", {}), manifest.get("summary", {})
    passages = sum((summary.get("passages") or {}).values())
    splits = [{"split": split, "path": files} for split in ("train", "validation")
              if (files := data_files(manifest, f"passages/{split}-*.parquet")) is not None]
    configs = [{"config_name": "default", "default": True, "data_files": splits}] if splits else []
    configs += [{"config_name": name, "data_files": [{"split": "train", "path": files}]}
                for name, glob, _ in _TABLES if (files := data_files(manifest, glob)) is not None]
    wiki, date = site.get("dbname") or "wiki", dump_date(manifest)
    return {
        "license": LICENSE,
        "language": [hub_language(site.get("language", ""))],
        "pretty_name": f"{wiki} {date} entity-annotated passages".replace("  ", " "),
        "tags": ["wikipedia", "entity-linking", "entity-memory", "edmem", "pretraining", wiki],
        "task_categories": ["fill-mask", "token-classification", "text-generation"],
        "task_ids": ["entity-linking-classification", "masked-language-modeling"],
        "size_categories": [size_category(passages)],
        "source_datasets": ["original"],
        "multilinguality": ["monolingual"],
        "configs": configs,
    }


def _n(x) -> str:
    return f"{x:,}" if isinstance(x, int) else ("" if x is None else str(x))


def _counters_table(counters: dict) -> list[str]:
    lines = ["| counter | value |", "|---|---:|"]
    lines += [f"| `{k}` | {_n(v)} |" for k, v in sorted(counters.items())]
    return lines


def _mentions_table(counters: dict) -> list[str]:
    hyperlinks = counters.get("mentions/hyperlink", 0)
    sources = [s for s in MENTION_SOURCES if f"mentions/{s}" in counters or f"passage_mentions/{s}" in counters]
    lines = ["| source | what it is | mentions in articles | per hyperlink | mentions in passages |",
             "|---|---|---:|---:|---:|"]
    for s in sources:
        n = counters.get(f"mentions/{s}", 0)
        ratio = f"{n / hyperlinks:.3f}" if hyperlinks else ""
        lines.append(f"| `{s}` | {_SOURCE_MEANING.get(s, '')} | {_n(n)} | {ratio} | {_n(counters.get(f'passage_mentions/{s}', 0))} |")
    total = sum(counters.get(f"mentions/{s}", 0) for s in sources)
    in_passages = sum(counters.get(f"passage_mentions/{s}", 0) for s in sources)
    lines.append(f"| **all** | | {_n(total)} | {f'{total / hyperlinks:.3f}' if hyperlinks else ''} | {_n(in_passages)} |")
    return lines


def files_per_split(manifest: dict) -> str:
    """How many passages files each split has, as the manifest lists them, and what one file holds: the job
    writes one per split for each unit of pass 2 (empty or not)."""
    counts = {split: sum(fnmatch.fnmatchcase(f.get("path", ""), f"passages/{split}-*.parquet")
                         for f in manifest.get("files", [])) for split in ("train", "validation")}
    text = ", ".join(f"{split} {n:,}" for split, n in counts.items())
    cfg = manifest.get("config", {})
    if "cache_chunk_articles" not in cfg:  # a corpus of an earlier version: its files were cut another way
        return text
    unit = (f"a chunk of {cfg['cache_chunk_articles']:,} cached articles" if cfg.get("article_cache", True)
            else "a read range")
    return f"{text} (one per unit of pass 2: {unit}; every unit writes both splits' files, empty or not)"


def _files_table(manifest: dict) -> list[str]:
    by_kind: dict[str, dict] = {}
    for f in manifest.get("files", []):
        k = by_kind.setdefault(f.get("kind", "?"), {"files": 0, "rows": None, "bytes": 0})
        k["files"] += 1
        if f.get("rows") is not None:  # None: not a table (the tokenizer's files)
            k["rows"] = (k["rows"] or 0) + f["rows"]
        k["bytes"] += f.get("bytes") or 0
    lines = ["| folder | files | rows | MB |", "|---|---:|---:|---:|"]
    lines += [f"| `{kind}/` | {v['files']} | {_n(v['rows'])} | {v['bytes'] / 1e6:,.2f} |"
              for kind, v in sorted(by_kind.items())]
    return lines


def _short_type(tp) -> str:
    """``list<item: int32>`` -> ``list<int32>``; a list of structs -> ``list<struct>`` (its fields follow)."""
    import pyarrow as pa

    if pa.types.is_list(tp):
        inner = tp.value_type
        return f"list<{'struct' if pa.types.is_struct(inner) else inner}>"
    return str(tp)


def _schema_lines(with_text: bool = True) -> list[str]:
    lines = ["| column | Arrow type | meaning |", "|---|---|---|"]
    for field in passage_schema(with_text):
        lines.append(f"| `{field.name}` | `{_short_type(field.type)}` | {_PASSAGE_COLUMNS.get(field.name, '')} |")
    lines += ["", "Each element of `mentions`:", "", "| field | type | meaning |", "|---|---|---|"]
    for field in PASSAGE_SCHEMA.field("mentions").type.value_type:
        lines.append(f"| `{field.name}` | `{field.type}` | {_MENTION_FIELDS.get(field.name, '')} |")
    return lines


def render_card(manifest: dict) -> str:
    """The whole README.md text for a manifest (deterministic: same manifest, same card)."""
    site, job, cfg = manifest.get("site", {}), manifest.get("job", {}), manifest.get("config", {})
    counters, summary = manifest.get("counters", {}), manifest.get("summary", {})
    wiki, date = site.get("dbname") or "unknown wiki", dump_date(manifest)
    passages = summary.get("passages") or {}
    labels = cfg.get("labels") or {}
    front = yaml.safe_dump(front_matter(manifest), sort_keys=False, allow_unicode=True, width=1000)
    body = [
        f"# {site.get('sitename') or 'Wikipedia'} ({wiki}{', ' + date if date else ''}): entity-annotated passages",
        "",
        f"{_n(sum(passages.values()))} passages of at most {cfg.get('window', 128)} tokens "
        f"({cfg.get('overlap', 10)} shared by consecutive passages) cut from the articles of the "
        f"`{wiki}` dump{' of ' + date if date else ''}, each with its entity mentions: the hyperlinks "
        "editors wrote and the mentions they left unlinked, labelled as in EDMem (Zhang et al., 2022, §3.3.1). "
        "Made by the `wikiedm` corpus job (`pipelines/wiki_mentions.py`) for entity-memory pre-training.",
        "",
        "## Source",
        "",
        "| | |",
        "|---|---|",
        f"| wiki | `{wiki}` ({site.get('sitename') or ''}, language `{site.get('language') or '?'}`) |",
        f"| dump date | {date or 'unknown (not in the file name)'} |",
        f"| input | `{job.get('input') or cfg.get('input', '')}` |",
        f"| MediaWiki | {site.get('generator') or '?'}, export schema {site.get('schema_version') or '?'} |",
        f"| site | {site.get('base') or ''} |",
        f"| built | {manifest.get('created', '')} with {job.get('runner', '?')}, {job.get('read_ranges', '?')} read range(s) |",
        "",
        "## License",
        "",
        f"The text is Wikipedia's, by its contributors, under the Creative Commons Attribution-ShareAlike 4.0 "
        f"licence (`{LICENSE}`); this corpus is a derived work under the same licence. Each article's authors are "
        "listed in its history on the wiki (`…/wiki/TITLE?action=history`).",
        "",
        "## Contents",
        "",
        *_files_table(manifest),
        "",
        f"Splits (by a hash of the page id, validation fraction {cfg.get('validation_fraction', '?')}): "
        + ", ".join(f"{k} {_n(v)} passages" for k, v in sorted(passages.items())) + "."
        + (" An empty split or table is left out of the `configs` above (`datasets` cannot load it)."
           if any(not v for v in passages.values()) else ""),
        f"Pages read {_n(summary.get('pages_read'))}: articles {_n(summary.get('articles'))}, "
        f"redirects {_n(summary.get('redirects'))}, disambiguation pages {_n(summary.get('disambiguation_pages'))}; "
        f"dead letters {_n(summary.get('dead_letters'))} (`dead_letters/`).",
        "",
        "## Mentions by label source",
        "",
        *_mentions_table(counters),
        "",
        (f"All mentions / hyperlinks: x{summary['mention_ratio_to_hyperlinks']:.2f} (EDMem reports x1.88 on full "
         "English Wikipedia). " if summary.get("mention_ratio_to_hyperlinks") else "")
        + "\"In passages\" counts a mention once per window it falls in (windows overlap).",
        "",
        "## How it was made",
        "",
        "| setting | value |",
        "|---|---|",
        f"| tokenizer | `{cfg.get('tokenizer', '')}` (saved in `tokenizer/`) |",
        f"| window / overlap | {cfg.get('window')} / {cfg.get('overlap')} tokens |",
        f"| entity vocabulary | the {_n(cfg.get('entity_vocab_size'))} most-linked entities (ids from 3) |",
        f"| keep red links | {cfg.get('keep_red_links')} |",
        f"| labels | min prior {labels.get('min_prior')}, ambiguity `{labels.get('ambiguity')}`, stopwords `{labels.get('stopwords')}` |",
        f"| files per split | {files_per_split(manifest)} |",
        "",
        "<details><summary>the job's full configuration</summary>",
        "",
        "```yaml",
        # without `output`: it names where the job wrote (a staging folder), not where the card lives
        yaml.safe_dump({k: v for k, v in cfg.items() if k != "output"}, sort_keys=True, allow_unicode=True).rstrip(),
        "```",
        "",
        "</details>",
        "",
        "## Schema of a passage",
        "",
        *_schema_lines(cfg.get("passage_text", True)),
        "",
        "Further configs of this folder: " + "; ".join(f"`{name}` ({what})" for name, _, what in _TABLES) + ".",
        "",
        "## How to load it",
        "",
        "```python",
        "import datasets",
        "corpus = datasets.load_dataset(\"path/to/this/folder\")              # train and validation passages",
        "vocab = datasets.load_dataset(\"path/to/this/folder\", \"entity_vocab\", split=\"train\")",
        "",
        "import glob, pyarrow.parquet as pq                                   # or straight from Parquet",
        "train = pq.read_table(sorted(glob.glob(\"path/to/this/folder/passages/train-*.parquet\")))",
        "```",
        "",
        "Decode `token_ids` with the tokenizer saved beside the data "
        "(`transformers.AutoTokenizer.from_pretrained(\"path/to/this/folder/tokenizer\")`). "
        "Pre-train on it: `wikiedm pretrain --config configs/pretrain/base.yaml --corpus path/to/this/folder --output RUN`.",
        "",
        "## Integrity",
        "",
        "`manifest.json` lists every file with its rows, bytes and sha256, and is written last: a folder without it "
        "is an incomplete run. `wikiedm validate --corpus path/to/this/folder` checks the folder against it.",
        "",
        "<details><summary>every counter of the run</summary>",
        "",
        *_counters_table(counters),
        "",
        "</details>",
        "",
    ]
    return f"---\n{front}---\n\n" + "\n".join(body)


def write_dataset_card(output: str, manifest: dict | None = None, *, dump_date: str = "") -> str:
    """Write ``OUT/README.md`` for the corpus in ``output`` (local or gs://) and return its path.

    ``manifest``: the run's manifest when the caller has it (the job's last step); read from
    ``OUT/manifest.json`` otherwise (raises ``wikiedm.validate.InvalidOutputError`` if missing).
    ``dump_date``: YYYYMMDD, when the input's file name does not carry it (a renamed local dump).
    """
    if manifest is None:
        from wikiedm.validate import load_manifest

        manifest = load_manifest(output)
    if dump_date:
        manifest = {**manifest, "card": {**manifest.get("card", {}), "dump_date": dump_date}}
    path = storage.join(output, CARD)
    storage.write_bytes_atomic(path, render_card(manifest).encode("utf-8"))
    return path


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import card_parser
    from wikiedm.validate import InvalidOutputError

    try:
        args, _, _ = card_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm card", str(exc))
    try:
        print(write_dataset_card(args.corpus, dump_date=args.date))
    except InvalidOutputError as exc:
        print(f"wikiedm card: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
