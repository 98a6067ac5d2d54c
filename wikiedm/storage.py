"""File I/O on local disk and remote stores (gs://, s3://, ...): atomic writes, listings, digests.

Every output file is written under a temporary name and renamed into place,
so a killed run never leaves a half-written file under a final name; the
manifest, written last, is the commit point of a whole run.

Beam-free, so the trainer and the linker read corpora without Apache Beam.
Local paths use the standard library (with the semantics of Beam's local
filesystem: ``create`` makes parent folders, listings are recursive). URLs
(``scheme://...``) go to the *remote filesystem*: pyarrow's (``pyarrow.fs``:
gs://, s3://, hdfs://) by default; inside the corpus job, Beam's own
``FileSystems``, which :mod:`pipelines` registers with
:func:`use_remote_filesystem` so the job's pipeline options and credentials
apply as before.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import uuid
from typing import BinaryIO, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
STATS_FILE = "stats.json"


# --------------------------------------------------------------------------- filesystems


class RemoteFileSystem(Protocol):
    """What this module needs of a filesystem for URLs; paths are full URLs (``gs://bucket/a/b``)."""

    def join(self, root: str, *parts: str) -> str: ...
    def exists(self, path: str) -> bool: ...
    def open(self, path: str) -> BinaryIO: ...  # raw bytes, seekable (Parquet footers)
    def create(self, path: str) -> BinaryIO: ...
    def rename(self, source: str, destination: str) -> None: ...
    def delete(self, paths: list[str]) -> None: ...
    def list_files(self, folder: str) -> list[str]: ...  # recursive; [] for a missing folder


def is_remote(path: str) -> bool:
    return "://" in path


class LocalFileSystem:
    """Plain files, with the semantics of Beam's local filesystem."""

    def join(self, root: str, *parts: str) -> str:
        return os.path.join(root, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def open(self, path: str) -> BinaryIO:
        return open(path, "rb")

    def create(self, path: str) -> BinaryIO:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        return open(path, "wb")

    def rename(self, source: str, destination: str) -> None:
        os.rename(source, destination)

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)

    def list_files(self, folder: str) -> list[str]:
        if not os.path.isdir(folder):
            return []
        return sorted(os.path.join(top, name) for top, _, names in os.walk(folder) for name in names)


class ArrowFileSystem:
    """URLs through ``pyarrow.fs`` (gs://, s3://, hdfs://...): the remote filesystem outside the Beam job."""

    @staticmethod
    def _resolve(url: str):
        from pyarrow import fs

        filesystem, path = fs.FileSystem.from_uri(url)
        return filesystem, path

    def join(self, root: str, *parts: str) -> str:
        for part in parts:  # as Beam's object stores join: one '/' between parts
            root = root + part if root.endswith("/") else root + "/" + part
        return root

    def exists(self, path: str) -> bool:
        from pyarrow import fs

        filesystem, inner = self._resolve(path)
        return filesystem.get_file_info(inner).type != fs.FileType.NotFound

    def open(self, path: str) -> BinaryIO:
        filesystem, inner = self._resolve(path)
        return filesystem.open_input_file(inner)

    def create(self, path: str) -> BinaryIO:
        filesystem, inner = self._resolve(path)
        filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)  # a no-op on object stores
        return filesystem.open_output_stream(inner)

    def rename(self, source: str, destination: str) -> None:
        filesystem, inner = self._resolve(source)
        filesystem.move(inner, self._resolve(destination)[1])

    def delete(self, paths: list[str]) -> None:
        from pyarrow import fs

        for path in paths:
            filesystem, inner = self._resolve(path)
            if filesystem.get_file_info(inner).type == fs.FileType.Directory:
                filesystem.delete_dir(inner)
            else:
                filesystem.delete_file(inner)

    def list_files(self, folder: str) -> list[str]:
        from pyarrow import fs

        filesystem, inner = self._resolve(folder)
        selector = fs.FileSelector(inner, recursive=True, allow_not_found=True)
        prefix, inner = folder.rstrip("/"), inner.rstrip("/")
        return sorted(prefix + info.path[len(inner):] for info in filesystem.get_file_info(selector)
                      if info.type == fs.FileType.File)


_LOCAL = LocalFileSystem()
_remote: RemoteFileSystem = ArrowFileSystem()


def use_remote_filesystem(filesystem: RemoteFileSystem) -> RemoteFileSystem:
    """Route every URL to ``filesystem`` from now on (in this process); returns the previous one."""
    global _remote
    previous, _remote = _remote, filesystem
    return previous


def filesystem_for(path: str) -> LocalFileSystem | RemoteFileSystem:
    return _remote if is_remote(path) else _LOCAL


# --------------------------------------------------------------------------- operations


def join(root: str, *parts: str) -> str:
    return filesystem_for(root).join(root, *parts) if parts else root


def relative_to(root: str, path: str) -> str:
    root = root.rstrip("/") + "/"
    return path[len(root):] if path.startswith(root) else path


def exists(path: str) -> bool:
    return filesystem_for(path).exists(path)


def open_read(path: str) -> BinaryIO:
    """A binary, seekable reader of the file's raw bytes."""
    return filesystem_for(path).open(path)


def create(path: str) -> BinaryIO:
    """A binary writer; parent folders are made as needed."""
    return filesystem_for(path).create(path)


def rename(source: str, destination: str) -> None:
    filesystem_for(source).rename(source, destination)


def read_bytes(path: str) -> bytes:
    with open_read(path) as fh:
        return fh.read()


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, then rename it to ``path``."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    with create(tmp) as fh:
        fh.write(data)
    _replace(tmp, path)


def _replace(tmp: str, path: str) -> None:
    if exists(path):
        delete_files([path])
    rename(tmp, path)


def write_json_atomic(path: str, obj) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_of_file(path: str, chunk: int = 8 << 20) -> tuple[str, int]:
    """(sha256, size) of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with open_read(path) as fh:
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
    """Write a Parquet file one row group at a time, on any filesystem (local or remote).

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
        self._raw = create(self._tmp)
        self._stream = _DigestingStream(self._raw)
        self._writer = pq.ParquetWriter(self._stream, schema, **PARQUET_OPTIONS)

    def write_rows(self, rows: list[dict]) -> None:
        if rows:
            self.write_table(pa.Table.from_pylist(rows, schema=self.schema))

    def write_table(self, table: pa.Table) -> None:
        """One row group of ``table`` (of this writer's schema); same bytes as ``write_rows`` on its rows."""
        if table.num_rows:
            self._writer.write_table(table, row_group_size=table.num_rows)
            self.rows += table.num_rows

    def close(self) -> tuple[str, int]:
        """Finish the file, move it into place; returns (sha256, size)."""
        if not self.rows:  # as parquet_bytes([]) does: one empty row group with the schema
            self._writer.write_table(self.schema.empty_table())
        self._writer.close()
        self._raw.close()
        _replace(self._tmp, self.path)
        return self._stream.digest.hexdigest(), self._stream.size


def file_record(root: str, path: str, data: bytes, rows: int | None, kind: str) -> dict:
    """One entry of the manifest's file list."""
    return {"path": relative_to(root, path), "bytes": len(data), "sha256": sha256_hex(data), "rows": rows, "kind": kind}


def list_files(folder: str) -> list[str]:
    """Every file below ``folder`` (recursive), sorted, or [] when it does not exist."""
    try:
        return sorted(filesystem_for(folder).list_files(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []


def delete_files(paths: list[str]) -> None:
    """Delete files (and folders); a missing one is an error. Remote paths go in one batch."""
    local, remote = [p for p in paths if not is_remote(p)], [p for p in paths if is_remote(p)]
    if local:
        _LOCAL.delete(local)
    if remote:
        _remote.delete(remote)
