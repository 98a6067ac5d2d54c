"""WriteShards, SaveTokenizer and WriteManifest: the job's small outputs (vocabulary, dead letters), the
tokenizer, and the manifest.

Shards are written as they stream: a shard's rows are fed through an
external sort (sorted runs spilled to the worker's local disk, then merged)
straight into a Parquet writer, one row group at a time, so no worker holds
a whole shard. An output is one file, or a fixed number of shards per partition.

Determinism: a row's file is a pure function of its shard key (page id,
alias, entity) and the shard count, rows are sorted by a unique key inside
each file, and Parquet is written with fixed options, so the same input and
config give byte-identical files on any runner and any parallelism. Every
expected shard is written, empty or not.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import shutil
from dataclasses import dataclass

import apache_beam as beam

from pipelines.corpus.sorted_runs import stable_shard
from pipelines.external_sort import ExternalSorter
from schemas import SCHEMAS
from schemas.corpus import MENTION_SOURCES
from wikiedm import storage
from wikiedm.tokenizer import saved_tokenizer_files
from wikiedm.validate import schema_fingerprint

log = logging.getLogger(__name__)

# Output folders owned by the job: stale files there (from an earlier run with
# other shard counts) are removed before the manifest is written.
OWNED_FOLDERS = ("passages", "alias_table", "entity_vocab", "entity_descriptions", "dead_letters", "tokenizer",
                 "article_cache", "lookup", "progress", "tables")  # the last four: the two-pass job's working files
WORKING_FOLDERS = OWNED_FOLDERS[-4:]  # emptied above; gone from a finished corpus
SORT_BUFFER_ROWS = 100_000  # rows a writer sorts in memory before spilling a run to local disk


def shard_name(prefix: str, index: int, count: int) -> str:
    return f"{prefix}-{index:05d}-of-{count:05d}.parquet"


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Where an output's rows go.

    ``folder``/``{partition}-{i:05d}-of-{n:05d}.parquet`` for each partition
    (``num_shards`` of them), or one ``folder/single_file``.
    """

    folder: str
    partitions: tuple[str, ...]
    num_shards: int = 1
    single_file: str = ""

    def layout(self) -> dict[str, int]:
        """Partition -> shard count."""
        return {p: 1 if self.single_file else max(1, self.num_shards) for p in self.partitions}

    def path(self, partition: str, index: int, count: int) -> str:
        if self.single_file:
            return f"{self.folder}/{self.single_file}"
        return f"{self.folder}/{shard_name(partition, index, count)}"

    def all_paths(self, layout: dict[str, int]) -> list[str]:
        return sorted(self.path(p, i, n) for p, n in layout.items() for i in range(n))


class _WriteSortedFileFn(beam.DoFn):
    """(relative path, rows) -> file record; rows streamed through an external sort."""

    def __init__(self, output: str, schema_name: str, sort_key, row_group_rows: int, sort_buffer_rows: int) -> None:
        self.output = output
        self.schema_name = schema_name
        self.schema = SCHEMAS[schema_name]
        self.sort_key = sort_key
        self.row_group_rows = max(1, row_group_rows)
        self.sort_buffer_rows = sort_buffer_rows

    def process(self, element):
        relative, rows = element
        path = storage.join(self.output, relative)
        with ExternalSorter(self.sort_key, self.sort_buffer_rows) as sorter:
            for row in rows:
                if row is not None:
                    sorter.add(row)
            writer = storage.ParquetFileWriter(path, self.schema)
            batch: list = []
            for row in sorter.sorted():
                batch.append(row)
                if len(batch) == self.row_group_rows:
                    writer.write_rows(batch)
                    batch = []
            writer.write_rows(batch)
            sha256, size = writer.close()
            if sorter.spilled_runs:
                log.info("wrote %s: %d rows, merged from %d sorted runs", relative, writer.rows, sorter.spilled_runs)
        yield {"path": storage.relative_to(self.output, path), "bytes": size, "sha256": sha256,
               "rows": writer.rows, "kind": self.schema_name}


def _assign_file(element, spec: ShardSpec, layout: dict):
    partition, shard_key, row = element
    count = layout[partition]
    return spec.path(partition, stable_shard(shard_key, count) if count > 1 else 0, count), row


class WriteShards(beam.PTransform):
    """(partition, shard key, row) -> Parquet files, as :class:`ShardSpec` lays them out.

    A shard with no rows is still written (empty, with the schema), so a
    reader can rely on the full ``-of-N`` set.
    """

    def __init__(self, output: str, schema_name: str, spec: ShardSpec, sort_key, row_group_rows: int,
                 sort_buffer_rows: int = SORT_BUFFER_ROWS) -> None:
        super().__init__()
        self.output = output
        self.schema_name = schema_name
        self.spec = spec
        self.sort_key = sort_key
        self.row_group_rows = row_group_rows
        self.sort_buffer_rows = sort_buffer_rows

    def expand(self, rows):
        spec = self.spec
        layout_pc = rows.pipeline | "FixedLayout" >> beam.Create([spec.layout()])
        layout = beam.pvalue.AsSingleton(layout_pc)
        with_paths = rows | "AssignFile" >> beam.Map(_assign_file, spec=spec, layout=layout)
        placeholders = layout_pc | "ExpectedFiles" >> beam.FlatMap(lambda lay: [(p, None) for p in spec.all_paths(lay)])
        return (
            (with_paths, placeholders)
            | "FlattenWithPlaceholders" >> beam.Flatten()
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteParquet" >> beam.ParDo(_WriteSortedFileFn(
                self.output, self.schema_name, self.sort_key, self.row_group_rows, self.sort_buffer_rows))
        )


class SaveTokenizerFn(beam.DoFn):
    """Save the tokenizer the job used to OUT/tokenizer/ and return its file records."""

    def __init__(self, output: str, name_or_path: str) -> None:
        self.output = output
        self.name_or_path = name_or_path

    def process(self, _):
        folder = storage.join(self.output, "tokenizer")
        for name, data in saved_tokenizer_files(self.name_or_path):  # the default's come from a disk cache
            path = storage.join(folder, name)
            with storage.create(path) as f:
                f.write(data)
            yield storage.file_record(self.output, path, data, None, "tokenizer")


# Counters always present in stats.json, zero when nothing was counted.
HEADLINE_COUNTERS = (
    "pages_read", "articles", "redirects", "disambiguation_pages", "redirect_loops",
    "redirect_chains_too_long", "siteinfo_missing", *(f"mentions/{source}" for source in MENTION_SOURCES),
    "passages/train", "passages/validation",
)


def _summary(counters: dict) -> dict:
    """Headline numbers derived from the counters, for people and the dataset card."""
    get = counters.get
    hyperlinks = get("mentions/hyperlink", 0)
    added = {k.split("/", 1)[1]: v for k, v in counters.items()
             if k.startswith("mentions/") and k != "mentions/hyperlink" and (v or k != "mentions/blink")}
    total = hyperlinks + sum(added.values())
    return {
        "pages_read": get("pages_read", 0),
        "articles": get("articles", 0),
        "redirects": get("redirects", 0),
        "disambiguation_pages": get("disambiguation_pages", 0),
        "passages": {k.split("/", 1)[1]: v for k, v in counters.items() if k.startswith("passages/")},
        "mentions": {"hyperlink": hyperlinks, **added, "total": total},
        "mention_ratio_to_hyperlinks": round(total / hyperlinks, 4) if hyperlinks else None,
        "dead_letters": sum(v for k, v in counters.items() if k.startswith("dead_letters/")),
        # Where the job's volume goes: elements and bytes into and out of each step (pass 1's run files too).
        "volume": _nested(counters, "volume/"),
    }


def _nested(counters: dict, prefix: str) -> dict:
    """{"volume/Stage/in": n, ...} -> {"Stage": {"in": n, ...}}."""
    out: dict = {}
    for key, value in counters.items():
        if key.startswith(prefix):
            stage, _, what = key[len(prefix):].partition("/")
            out.setdefault(stage, {})[what] = value
    return out


class WriteManifestFn(beam.DoFn):
    """The last step: remove stale files, then write stats.json and manifest.json."""

    def __init__(self, output: str, config: dict, site: dict, job: dict, schemas: dict | None = None) -> None:
        self.output = output
        self.schemas = {**SCHEMAS, **(schemas or {})}  # the schemas written (passages with or without text)
        self.config = config
        self.site = site
        self.job = job

    def process(self, _, files: list, stats: list):
        files = sorted(files, key=lambda f: f["path"])
        counters = dict(sorted({**dict.fromkeys(HEADLINE_COUNTERS, 0), **dict(stats)}.items()))
        keep = {storage.join(self.output, f["path"]) for f in files}
        stale = [
            path
            for folder in OWNED_FOLDERS
            for path in storage.list_files(storage.join(self.output, folder))
            if path not in keep
        ]
        if stale:
            log.info("removing %d stale files of an earlier run", len(stale))
            storage.delete_files(stale)
        for folder in WORKING_FOLDERS:  # a local folder outlives its files (object stores have no folders)
            path = storage.join(self.output, folder)
            if not storage.is_remote(path) and os.path.isdir(path) and not any(
                    files for _root, _dirs, files in os.walk(path)):
                shutil.rmtree(path)  # empty, but for empty sub-folders (OUT/tables/<run set>/<shard>/)
        stats_doc = {"counters": counters, "summary": _summary(counters)}
        storage.write_json_atomic(storage.join(self.output, storage.STATS_FILE), stats_doc)
        manifest = {
            "format": "wikiedm-corpus",
            # 2: passages schema version 2 (char_offset, text, passage-relative mention offsets).
            "format_version": 2,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "job": self.job,
            "site": self.site,
            "config": self.config,
            "files": files,
            "schemas": {name: schema_fingerprint(schema) for name, schema in self.schemas.items()},
            "schema_versions": {name: (schema.metadata or {}).get(b"version", b"").decode()
                                for name, schema in self.schemas.items()},
            "counters": counters,
            "summary": stats_doc["summary"],
        }
        storage.write_json_atomic(storage.join(self.output, storage.MANIFEST), manifest)
        # The dataset card (OUT/README.md) is derived from the manifest, after it.
        from pipelines.dataset_card import write_dataset_card

        write_dataset_card(self.output, manifest)
        yield storage.join(self.output, storage.MANIFEST)
