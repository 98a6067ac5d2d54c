"""WriteShards, WriteTable, SaveTokenizer and WriteManifest: the job's outputs.

Determinism: a row's file is a pure function of its key (page id, alias),
rows are sorted inside each file, and Parquet is written with fixed options,
so the same input and config give byte-identical files on any runner and any
parallelism. Every expected shard is written, empty or not.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import tempfile

import apache_beam as beam
import pyarrow as pa

from pipelines import storage
from pipelines.corpus.tokenizer import load_tokenizer, save_tokenizer
from schemas import SCHEMAS

log = logging.getLogger(__name__)

# Output folders owned by the job: stale files there (from an earlier run with
# other shard counts) are removed before the manifest is written.
OWNED_FOLDERS = ("passages", "alias_table", "entity_vocab", "entity_descriptions", "dead_letters", "tokenizer")


def shard_name(prefix: str, index: int, count: int) -> str:
    return f"{prefix}-{index:05d}-of-{count:05d}.parquet"


def stable_shard(key: str, count: int) -> int:
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


class _WriteGroupFn(beam.DoFn):
    """(relative path, rows) -> file record; rows sorted by ``sort_key`` first."""

    def __init__(self, output: str, schema_name: str, sort_key, row_group_rows: int) -> None:
        self.output = output
        self.schema_name = schema_name
        self.sort_key = sort_key
        self.row_group_rows = row_group_rows

    def process(self, element):
        relative, rows = element
        rows = sorted((r for r in rows if r is not None), key=self.sort_key)
        data = storage.parquet_bytes(rows, SCHEMAS[self.schema_name], self.row_group_rows)
        path = storage.join(self.output, relative)
        storage.write_bytes_atomic(path, data)
        yield storage.file_record(self.output, path, data, len(rows), self.schema_name)


class WriteShards(beam.PTransform):
    """(shard key, row) -> Parquet files ``{folder}/{prefix}-{i:05d}-of-{n:05d}.parquet``.

    ``files`` maps every expected shard key to its relative path; a shard
    with no rows is still written (empty, with the schema), so a reader can
    rely on the full ``-of-N`` set.
    """

    def __init__(self, output: str, schema_name: str, files: dict, sort_key, row_group_rows: int) -> None:
        super().__init__()
        self.output = output
        self.schema_name = schema_name
        self.files = files
        self.sort_key = sort_key
        self.row_group_rows = row_group_rows

    def expand(self, keyed_rows):
        files = self.files
        with_paths = keyed_rows | "ToFilePath" >> beam.Map(lambda kv: (files[kv[0]], kv[1]))
        placeholders = (
            keyed_rows.pipeline
            | "ExpectedFiles" >> beam.Create(sorted(files.values()))
            | "EmptyShard" >> beam.Map(lambda path: (path, None))
        )
        return (
            (with_paths, placeholders)
            | "FlattenWithPlaceholders" >> beam.Flatten()
            | "GroupByFile" >> beam.GroupByKey()
            | "WriteParquet" >> beam.ParDo(_WriteGroupFn(self.output, self.schema_name, self.sort_key, self.row_group_rows))
        )


class SaveTokenizerFn(beam.DoFn):
    """Save the tokenizer the job used to OUT/tokenizer/ and return its file records."""

    def __init__(self, output: str, name_or_path: str) -> None:
        self.output = output
        self.name_or_path = name_or_path

    def process(self, _):
        tokenizer = load_tokenizer(self.name_or_path)
        folder = storage.join(self.output, "tokenizer")
        save_tokenizer(tokenizer, folder)
        with tempfile.TemporaryDirectory() as tmp:  # list what save_pretrained writes
            tokenizer.save_pretrained(tmp)
            names = sorted(os.listdir(tmp))
        for name in names:
            path = storage.join(folder, name)
            data = storage.read_bytes(path)
            yield storage.file_record(self.output, path, data, None, "tokenizer")


# Counters always present in stats.json, zero when nothing was counted.
HEADLINE_COUNTERS = (
    "pages_read", "articles", "redirects", "disambiguation_pages", "redirect_loops",
    "redirect_chains_too_long", "siteinfo_missing", "mentions/hyperlink", "mentions/same_page_alias",
    "mentions/title_alias", "mentions/blink", "passages/train", "passages/validation",
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
    }


class WriteManifestFn(beam.DoFn):
    """The last step: remove stale files, then write stats.json and manifest.json."""

    def __init__(self, output: str, config: dict, site: dict, job: dict) -> None:
        self.output = output
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
        stats_doc = {"counters": counters, "summary": _summary(counters)}
        storage.write_json_atomic(storage.join(self.output, storage.STATS_FILE), stats_doc)
        manifest = {
            "format": "wikiedm-corpus",
            "format_version": 1,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "job": self.job,
            "site": self.site,
            "config": self.config,
            "files": files,
            "schemas": {name: schema_fingerprint(schema) for name, schema in SCHEMAS.items()},
            "counters": counters,
            "summary": stats_doc["summary"],
        }
        storage.write_json_atomic(storage.join(self.output, storage.MANIFEST), manifest)
        # The dataset card (OUT/README.md) is derived from the manifest, after it.
        from pipelines.dataset_card import write_dataset_card

        write_dataset_card(self.output, manifest)
        yield storage.join(self.output, storage.MANIFEST)


def schema_fingerprint(schema: pa.Schema) -> str:
    """A short digest of a schema's fields, to check files against the manifest."""
    return hashlib.sha256(schema.remove_metadata().to_string().encode()).hexdigest()[:16]
