"""Candidate retrieval over entity encodings: exact (chunked) or HNSW (FAISS).

Exact search multiplies the queries with blocks of ``chunk_rows`` entity
vectors and keeps a running top-k, so memory is ``queries x (chunk + k)``
whatever the number of entities; the encodings can be a memory-mapped
``.npy`` file. HNSW (``faiss.IndexHNSWFlat``) is for 1M+ entities: HNSW
searches by L2 distance, so, as BLINK does, every entity vector gets one more
coordinate ``sqrt(M - |x|^2)`` (M the largest squared norm) and every query a
0: then ``|q' - x'|^2 = |q|^2 + M - 2 q.x`` and the nearest entity is the one
with the highest inner product. Scores are returned as inner products.

Saved encodings (``ENCODINGS_DIR`` inside a model folder, or any folder)::

    encodings.npy   float32 [n, dim]: candidate encodings, entity-id order
    entity_ids.npy  int32 [n]
    hnsw.faiss      the HNSW graph (when built)
    meta.json       model weights digest, corpus fingerprint, n, dim: a cache
                    is reused only when both still match
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass

import numpy as np

from wikiedm.fields import option

log = logging.getLogger(__name__)

ENCODINGS_FILE = "encodings.npy"
ENTITY_IDS_FILE = "entity_ids.npy"
HNSW_FILE = "hnsw.faiss"
META_FILE = "meta.json"


@dataclass(frozen=True, slots=True)
class IndexConfig:
    kind: str = option("auto", "exact, hnsw, blink_hnsw, blink_flat (BLINK's FAISS files of --kb blink:DIR), or auto: BLINK's HNSW/flat file when the KB has one, else hnsw from hnsw_min_entities entities on (when faiss is installed)")
    chunk_rows: int = option(65536, "entity rows per block of exact search (memory: queries x chunk_rows floats)")
    hnsw_min_entities: int = option(500_000, "auto picks hnsw from this many entities on")
    hnsw_m: int = option(32, "HNSW graph degree (BLINK: 128; 32 builds faster for a small recall loss)")
    hnsw_ef_construction: int = option(200, "HNSW efConstruction")
    hnsw_ef_search: int = option(256, "HNSW efSearch (higher: better recall, slower)")


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, columns) of the k best scores of each row, best first (ties: lower column)."""
    k = min(k, scores.shape[1])
    if k <= 0:
        return np.zeros((scores.shape[0], 0), scores.dtype), np.zeros((scores.shape[0], 0), np.int64)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < scores.shape[1] else np.tile(
        np.arange(scores.shape[1]), (scores.shape[0], 1))
    vals = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(part, order, axis=1)


class ExactIndex:
    """Exact maximum inner product search in blocks of ``chunk_rows`` entities."""

    kind = "exact"

    def __init__(self, encodings: np.ndarray, chunk_rows: int = 65536) -> None:
        self.encodings = encodings
        self.chunk_rows = max(1, chunk_rows)

    def __len__(self) -> int:
        return self.encodings.shape[0]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each [queries, min(k, n)], best first."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n = len(self)
        k = min(k, n)
        best_vals = np.full((len(queries), 0), -np.inf, dtype=np.float32)
        best_rows = np.zeros((len(queries), 0), dtype=np.int64)
        for lo in range(0, n, self.chunk_rows):
            block = np.asarray(self.encodings[lo: lo + self.chunk_rows], dtype=np.float32)
            vals, cols = top_k_rows(queries @ block.T, k)
            merged_vals = np.concatenate([best_vals, vals], axis=1)
            merged_rows = np.concatenate([best_rows, cols + lo], axis=1)
            keep_vals, keep_cols = top_k_rows(merged_vals, k)
            best_vals, best_rows = keep_vals, np.take_along_axis(merged_rows, keep_cols, axis=1)
        return best_vals, best_rows


def augment_for_l2(encodings: np.ndarray, max_norm_sq: float | None = None) -> tuple[np.ndarray, float]:
    """BLINK's trick: one more coordinate sqrt(M - |x|^2) makes L2 order = inner-product order."""
    norms_sq = np.einsum("ij,ij->i", encodings, encodings)
    bound = float(norms_sq.max()) if max_norm_sq is None else max_norm_sq
    extra = np.sqrt(np.maximum(bound - norms_sq, 0.0)).astype(np.float32)
    return np.hstack([encodings.astype(np.float32, copy=False), extra[:, None]]), bound


class HNSWIndex:
    """Approximate inner-product search with FAISS's HNSW over L2-augmented vectors."""

    kind = "hnsw"

    def __init__(self, index, encodings: np.ndarray, ef_search: int) -> None:
        self.index = index
        self.encodings = encodings
        self.index.hnsw.efSearch = ef_search

    @classmethod
    def build(cls, encodings: np.ndarray, config: IndexConfig, block_rows: int = 100_000) -> "HNSWIndex":
        faiss = import_faiss()
        dim = encodings.shape[1]
        norms_sq_max = 0.0
        for lo in range(0, len(encodings), block_rows):  # the bound first, in blocks (memory-mapped input)
            block = np.asarray(encodings[lo: lo + block_rows], dtype=np.float32)
            norms_sq_max = max(norms_sq_max, float(np.einsum("ij,ij->i", block, block).max()))
        index = faiss.IndexHNSWFlat(dim + 1, config.hnsw_m)
        index.hnsw.efConstruction = config.hnsw_ef_construction
        for lo in range(0, len(encodings), block_rows):
            block, _ = augment_for_l2(np.asarray(encodings[lo: lo + block_rows], dtype=np.float32), norms_sq_max)
            index.add(block)
        return cls(index, encodings, config.hnsw_ef_search)

    @classmethod
    def load(cls, path: str, encodings: np.ndarray, ef_search: int, kind: str = "hnsw") -> "HNSWIndex":
        index = cls(read_faiss_index(path), encodings, ef_search)
        if index.index.d != encodings.shape[1] + 1:
            raise ValueError(f"{path}: an HNSW index of dimension {index.index.d}, expected {encodings.shape[1]} + 1 "
                             "(inner product turned into L2 with one extra coordinate)")
        index.kind = kind
        return index

    def search_raw(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's own answer, as BLINK's ``search_knn`` returns it: squared L2 distances in the
        augmented space (smaller is better) and rows."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        padded = np.hstack([queries, np.zeros((len(queries), 1), dtype=np.float32)])
        return self.index.search(padded, min(k, len(self)))

    def save(self, path: str) -> None:
        faiss = import_faiss()
        tmp = path + ".tmp"
        faiss.write_index(self.index, tmp)
        os.replace(tmp, path)

    def __len__(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, len(self))
        padded = np.hstack([queries, np.zeros((len(queries), 1), dtype=np.float32)])
        _, rows = self.index.search(padded, k)
        rows = rows.astype(np.int64)
        # Inner products recomputed from the vectors (exact); -1 marks a graph miss.
        safe = np.where(rows < 0, 0, rows)
        vectors = np.asarray(self.encodings[safe.reshape(-1)], dtype=np.float32).reshape(*safe.shape, -1)
        scores = np.einsum("qd,qkd->qk", queries, vectors)
        scores = np.where(rows < 0, -np.inf, scores).astype(np.float32)
        order = np.argsort(-scores, axis=1, kind="stable")
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


class FaissFlatIndex:
    """BLINK's ``DenseFlatIndexer`` file (``faiss.IndexFlatIP``): exact inner products."""

    kind = "blink_flat"

    def __init__(self, index, dim: int) -> None:
        if index.d != dim:
            raise ValueError(f"the flat index has dimension {index.d}, the encodings {dim}")
        self.index = index

    @classmethod
    def load(cls, path: str, dim: int) -> "FaissFlatIndex":
        return cls(read_faiss_index(path), dim)

    def __len__(self) -> int:
        return self.index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(self)))
        return scores.astype(np.float32), rows.astype(np.int64)

    search_raw = search


def read_faiss_index(path: str):
    """A FAISS index file, its vectors memory-mapped where FAISS can (IO_FLAG_MMAP_IFC: flat codes)."""
    faiss = import_faiss()
    flag = getattr(faiss, "IO_FLAG_MMAP_IFC", 0)
    try:
        return faiss.read_index(path, flag)
    except RuntimeError:
        return faiss.read_index(path)


def import_faiss():
    try:
        import faiss
    except ImportError as err:
        raise RuntimeError("the HNSW index needs faiss (pip install faiss-cpu==1.15.1); use kind 'exact' otherwise") from err
    return faiss


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


INDEX_KINDS = ("auto", "exact", "hnsw", "blink_hnsw", "blink_flat")


def choose_kind(config: IndexConfig, n: int, blink_files: dict | None = None) -> str:
    """The index to search: ``blink_files`` are the FAISS files of a BLINK KB (kind -> path)."""
    blink_files = blink_files or {}
    if config.kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {config.kind!r} ({', '.join(INDEX_KINDS)})")
    if config.kind.startswith("blink_"):
        if config.kind[len("blink_"):] not in blink_files:
            raise FileNotFoundError(f"--index.kind {config.kind}: the BLINK KB has no {config.kind[6:]} FAISS file")
        return config.kind
    if config.kind != "auto":
        return config.kind
    for kind in ("hnsw", "flat"):
        if kind in blink_files and faiss_available():
            return f"blink_{kind}"
    return "hnsw" if n >= config.hnsw_min_entities and faiss_available() else "exact"


# --------------------------------------------------------------------------- saved encodings


@dataclass(frozen=True, slots=True)
class EncodingsMeta:
    model_digest: str  # of the bi-encoder weights file
    corpus_fingerprint: str  # of the corpus manifest
    count: int
    dim: int
    max_cand_length: int


def file_digest(path: str, chunk: int = 16 << 20) -> str:
    """sha256 of a file (a few seconds for BERT-large's 2.5 GB; done once per index build/load)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()[:16]


def save_encodings(folder: str, encodings: np.ndarray, entity_ids: np.ndarray, meta: EncodingsMeta) -> None:
    """Write encodings, ids and meta (meta last: it marks a complete cache)."""
    writer = EncodingsWriter(folder, len(encodings), encodings.shape[1])
    writer.array[:] = encodings
    writer.commit(entity_ids, meta)


class EncodingsWriter:
    """Fill ``array`` (a memory-mapped ``.npy`` under a temporary name), then ``commit``:
    1M x 1024 floats never need to be in memory at once."""

    def __init__(self, folder: str, count: int, dim: int) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.meta_path = os.path.join(folder, META_FILE)
        if os.path.exists(self.meta_path):  # the cache is incomplete from here until commit
            os.remove(self.meta_path)
        self.tmp = os.path.join(folder, ENCODINGS_FILE + ".tmp.npy")
        self.array = np.lib.format.open_memmap(self.tmp, mode="w+", dtype=np.float32, shape=(count, dim))

    def commit(self, entity_ids: np.ndarray, meta: EncodingsMeta) -> None:
        self.array.flush()
        del self.array
        os.replace(self.tmp, os.path.join(self.folder, ENCODINGS_FILE))
        ids_tmp = os.path.join(self.folder, ENTITY_IDS_FILE + ".tmp.npy")
        np.save(ids_tmp, entity_ids.astype(np.int32, copy=False))
        os.replace(ids_tmp, os.path.join(self.folder, ENTITY_IDS_FILE))
        stale = os.path.join(self.folder, HNSW_FILE)
        if os.path.exists(stale):
            os.remove(stale)
        with open(self.meta_path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(asdict(meta), fh, indent=2, sort_keys=True)
        os.replace(self.meta_path + ".tmp", self.meta_path)


def read_meta(folder: str) -> EncodingsMeta | None:
    path = os.path.join(folder, META_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return EncodingsMeta(**json.load(fh))


def load_encodings(folder: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    mode = "r" if mmap else None
    encodings = np.load(os.path.join(folder, ENCODINGS_FILE), mmap_mode=mode)
    entity_ids = np.load(os.path.join(folder, ENTITY_IDS_FILE))
    return encodings, entity_ids


def open_index(folder: str, encodings: np.ndarray, config: IndexConfig, save_built: bool = True,
               blink_files: dict | None = None, build: bool = True):
    """The search index over ``encodings``: exact, BLINK's FAISS file, or HNSW (loaded from
    ``folder``, or built and saved there when ``build``)."""
    kind = choose_kind(config, len(encodings), blink_files)
    if kind == "exact":
        return ExactIndex(encodings, config.chunk_rows)
    if kind == "blink_flat":
        index = FaissFlatIndex.load(blink_files["flat"], encodings.shape[1])
    elif kind == "blink_hnsw":
        index = HNSWIndex.load(blink_files["hnsw"], encodings, config.hnsw_ef_search, kind="blink_hnsw")
    else:
        index = None
    if index is not None:
        if len(index) != len(encodings):
            raise ValueError(f"BLINK's {kind[6:]} index holds {len(index)} vectors, the encodings {len(encodings)}")
        return index
    path = os.path.join(folder, HNSW_FILE)
    if os.path.isfile(path):
        index = HNSWIndex.load(path, encodings, config.hnsw_ef_search)
        if len(index) == len(encodings):
            return index
        log.warning("%s holds %d vectors, not %d: rebuilding", path, len(index), len(encodings))
    if not build:
        raise FileNotFoundError(f"no HNSW index in {folder}: run `python -m linker.cli index` first")
    log.info("building an HNSW index over %d entities", len(encodings))
    index = HNSWIndex.build(encodings, config)
    if save_built:
        index.save(path)
    return index
