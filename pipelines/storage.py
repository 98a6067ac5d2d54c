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
    pq.write_table(
        table,
        buf,
        compression="zstd",
        row_group_size=max(1, row_group_rows),
        write_statistics=True,
        store_schema=True,
    )
    return buf.getvalue()


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
