"""File I/O on any Beam filesystem (local, gs://, s3://): atomic writes, listings, digests.

Every output file is written under a temporary name and renamed into place,
so a killed run never leaves a half-written file under a final name; the
manifest, written last, is the commit point of a whole run.
"""
from __future__ import annotations

import hashlib
import io
import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

MANIFEST = "manifest.json"
STATS_FILE = "stats.json"


def join(root: str, *parts: str) -> str:
    return FileSystems.join(root, *parts) if parts else root


def relative_to(root: str, path: str) -> str:
    root = root.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as fh:
        return fh.read()


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, then rename it to ``path``."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    with FileSystems.create(tmp) as fh:
        fh.write(data)
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def write_json_atomic(path: str, obj) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of_file(path: str, chunk: int = 8 << 20) -> tuple[str, int]:
    """(sha256, size) of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with FileSystems.open(path) as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def parquet_bytes(rows: list[dict], schema: pa.Schema, row_group_rows: int) -> bytes:
    """Rows -> Parquet (zstd) bytes. Same rows in the same order give the same bytes."""
    table = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, row_group_rows), **PARQUET_OPTIONS)
    return buf.getvalue()


PARQUET_OPTIONS = {"compression": "zstd", "write_statistics": True, "store_schema": True}


class _DigestingStream:
    """A write-only stream that forwards to ``raw`` and keeps a sha256 and a byte count."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += len(data)
        self.raw.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class ParquetFileWriter:
    """Write a Parquet file one row group at a time, on any Beam filesystem.

    The file is written under a temporary sibling name and renamed into place
    by ``close()``; its sha256 and size are computed as it streams. Row groups
    written with ``write_rows`` in the same order give the same bytes as
    :func:`parquet_bytes` on all the rows at once.
    """

    def __init__(self, path: str, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self._tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        self._raw = FileSystems.create(self._tmp)
        self._stream = _DigestingStream(self._raw)
        self._writer = pq.ParquetWriter(self._stream, schema, **PARQUET_OPTIONS)

    def write_rows(self, rows: list[dict]) -> None:
        if rows:
            self._writer.write_table(pa.Table.from_pylist(rows, schema=self.schema), row_group_size=len(rows))
            self.rows += len(rows)

    def close(self) -> tuple[str, int]:
        """Finish the file, move it into place; returns (sha256, size)."""
        if not self.rows:  # as parquet_bytes([]) does: one empty row group with the schema
            self._writer.write_table(self.schema.empty_table())
        self._writer.close()
        self._raw.close()
        if FileSystems.exists(self.path):
            FileSystems.delete([self.path])
        FileSystems.rename([self._tmp], [self.path])
        return self._stream.digest.hexdigest(), self._stream.size


def file_record(root: str, path: str, data: bytes, rows: int | None, kind: str) -> dict:
    """One entry of the manifest's file list."""
    return {"path": relative_to(root, path), "bytes": len(data), "sha256": sha256_hex(data), "rows": rows, "kind": kind}


def list_files(folder: str) -> list[str]:
    """Every file below ``folder`` (recursive), or [] when it does not exist."""
    pattern = join(folder, "**")
    try:
        results = FileSystems.match([pattern])
    except Exception:  # noqa: BLE001 - a missing folder matches nothing
        return []
    return sorted(m.path for r in results for m in r.metadata_list)


def delete_files(paths: list[str]) -> None:
    if paths:
        FileSystems.delete(paths)
