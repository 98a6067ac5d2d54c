"""Check a corpus folder against its manifest: files, sizes, rows, sha256, schemas.

    wikiedm validate --corpus OUT [--sha256 false]   # exit 0 when complete and intact
    python -m pipelines.validate ...                  (the same command line)

The trainer and the Airflow DAG call ``validate_output`` before using a
corpus; a folder without manifest.json is an incomplete run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from schemas import READABLE_SCHEMAS, readable_schema_of
from wikiedm import storage
from wikiedm.config import ConfigError, ConfigParser, command_error
from wikiedm.fields import option


def schema_fingerprint(schema: pa.Schema) -> str:
    """A short digest of a schema's fields, to check files against the manifest."""
    return hashlib.sha256(schema.remove_metadata().to_string().encode()).hexdigest()[:16]


class InvalidOutputError(Exception):
    """The corpus folder is incomplete or damaged; the message names the file."""


def load_manifest(output: str) -> dict:
    path = storage.join(output, storage.MANIFEST)
    if not storage.exists(path):
        raise InvalidOutputError(f"{path} is missing: {output} is not a finished corpus run")
    try:
        return json.loads(storage.read_bytes(path))
    except ValueError as exc:
        raise InvalidOutputError(f"{path} is not valid JSON: {exc}") from None


def validate_output(output: str, *, check_sha256: bool = True, kinds: tuple[str, ...] | None = None) -> dict:
    """Raise InvalidOutputError on the first problem; return the manifest otherwise.

    ``kinds`` limits the checks to those output folders (the trainer needs only
    passages and the vocabulary, not the alias table); None checks every file.
    """
    manifest = load_manifest(output)
    files = manifest.get("files") or []
    if not any(f.get("kind") == "passages" for f in files):
        raise InvalidOutputError(f"{output}: the manifest lists no passage shards")
    for entry in files:
        if kinds is not None and entry.get("kind") not in kinds:
            continue
        path = storage.join(output, entry["path"])
        if not storage.exists(path):
            raise InvalidOutputError(f"{path}: listed in the manifest but missing")
        if check_sha256:
            digest, size = storage.sha256_of_file(path)
            if size != entry["bytes"]:
                raise InvalidOutputError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or replaced)")
            if digest != entry["sha256"]:
                raise InvalidOutputError(f"{path}: sha256 {digest[:12]}… does not match the manifest ({entry['sha256'][:12]}…)")
        if entry.get("kind") in READABLE_SCHEMAS:
            with storage.open_read(path) as fh:
                parquet = pq.ParquetFile(fh)
                got = parquet.schema_arrow
                rows = parquet.metadata.num_rows
            known = readable_schema_of(entry["kind"], got)
            if known is None:
                raise InvalidOutputError(f"{path}: schema is none of the schemas.{entry['kind']} versions")
            recorded = (manifest.get("schemas") or {}).get(entry["kind"])
            if recorded and schema_fingerprint(known) != recorded:  # e.g. a shard with text among shards without
                raise InvalidOutputError(f"{path}: schema differs from the one manifest.json records for {entry['kind']}")
            if entry.get("rows") is not None and rows != entry["rows"]:
                raise InvalidOutputError(f"{path}: {rows} rows, the manifest says {entry['rows']}")
    return manifest


@dataclass
class ValidateConfig:
    corpus: str = option("", "corpus folder (local or gs://) with manifest.json", path="dir", required=True)
    sha256: bool = option(True, "check every file's sha256 (false: sizes, rows and schemas only; faster)")


def validate_parser(prog: str = "wikiedm validate") -> ConfigParser:
    parser = ConfigParser(ValidateConfig, prog=prog, description=__doc__.splitlines()[0], positional="corpus",
                          pass_unknown=False)
    # the old spelling of --sha256 false
    parser.parser.add_argument("--no_sha256", dest="sha256", action="store_const", const="false",
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args, _, _ = validate_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm validate", str(exc))
    try:
        manifest = validate_output(args.corpus, check_sha256=args.sha256)
    except InvalidOutputError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {len(manifest['files'])} files match {storage.join(args.corpus, storage.MANIFEST)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
