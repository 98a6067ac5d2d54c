"""The knowledge base the linker retrieves from, as memory-mapped files built once.

Two sources give the same on-disk layout:

* a corpus output (``OUT/``): its entity vocabulary (ids >= 3) with the
  descriptions the corpus job wrote; the encodings are computed by the model
  (:func:`linker.link.prepare_linker`);
* BLINK's released knowledge base (``--kb blink:DIR``): ``entity.jsonl`` (one
  line per entity: ``title``, ``text``, ``idx`` = ``...wiki?curid=N``) and
  ``all_entities_large.t7`` (the entity encodings, row ``i`` = line ``i``),
  used as they are: the ``.t7`` is memory-mapped in place (see
  :mod:`linker.torchfile`), and BLINK's FAISS files
  (``faiss_flat_index.pkl``, ``faiss_hnsw_index.pkl``) are searched when
  present. With a corpus, BLINK's entities are mapped onto its vocabulary by
  title, through its redirects; the rest are counted as unmapped.

Folder layout (``kb.json`` is written last: it marks a complete build)::

    kb.json                 kind, sources and their sizes, counts, mapping report, encodings
    titles.bin / titles.offsets.npy / titles.hash.npy     entity titles (+ title -> row)
    texts.bin / texts.offsets.npy                          descriptions (corpus KB)
    lines.offsets.npy                                      entity.jsonl line offsets (BLINK KB)
    entity_ids.npy          int32 [n]: the corpus's entity id of each row, -1 when unmapped
    wikipedia_ids.npy       int64 [n]: BLINK's curid, -1 when none
    counts.npy              int64 [n]: hyperlinks to the entity in the corpus (0 when unmapped)
    rows_by_entity.npy      int32 [max entity id + 1]: the row of each corpus entity id, -1 none
    rows_by_wikipedia_id.npy int64 [n]: rows sorted by curid (binary search)
"""
from __future__ import annotations

import json
import logging
import os
import re
from array import array
from dataclasses import dataclass

import numpy as np

from linker.mmap_store import (
    JsonlField,
    StringColumn,
    StringHash,
    StringWriter,
    build_string_hash,
    load_npy,
    read_versioned_json,
    save_npy,
    write_arrow_strings,
    write_json,
    write_strings,
)

log = logging.getLogger(__name__)

KB_FILE = "kb.json"
KB_VERSION = 1
BLINK_PREFIX = "blink:"
BLINK_CATALOGUE = "entity.jsonl"
BLINK_ENCODINGS = ("all_entities_large.t7",)
BLINK_FAISS_FILES = {"hnsw": "faiss_hnsw_index.pkl", "flat": "faiss_flat_index.pkl"}
WIKIPEDIA_URL = "https://en.wikipedia.org/wiki?curid={}"
_SPACES = re.compile(r"[\s_]+")


def parse_kb_spec(spec: str) -> tuple[str, str]:
    """``""`` -> ("corpus", ""); ``"blink:DIR"`` -> ("blink", DIR)."""
    if not spec or spec == "corpus":
        return "corpus", ""
    if spec.startswith(BLINK_PREFIX) and spec[len(BLINK_PREFIX):]:
        return "blink", spec[len(BLINK_PREFIX):]
    raise ValueError(f"--kb {spec!r}: expected '' (the corpus's entities) or blink:DIR (BLINK's entity.jsonl + .t7)")


def file_signature(path: str) -> dict:
    st = os.stat(path)
    return {"path": os.path.abspath(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def normalise_title(title: str) -> str:
    """MediaWiki's form of a page title: ``_`` and runs of spaces -> one space, first letter upper-cased."""
    title = _SPACES.sub(" ", title).strip()
    return title[:1].upper() + title[1:]


# --------------------------------------------------------------------------- reading


@dataclass
class KnowledgeBase:
    """Entity rows: titles, texts, corpus ids, BLINK curids, link counts and (once built) encodings."""

    folder: str
    meta: dict
    titles: StringColumn
    texts: object  # StringColumn or JsonlField: text(row)
    entity_ids: np.ndarray
    wikipedia_ids: np.ndarray
    counts: np.ndarray
    rows_by_entity: np.ndarray
    rows_by_wikipedia_id: np.ndarray
    title_index: StringHash
    encodings: np.ndarray | None = None
    corpus_titles: StringColumn | None = None  # BLINK KB mapped onto a corpus: the corpus's title of each entity id

    def __len__(self) -> int:
        return len(self.titles)

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def mapped(self) -> bool:
        """Whether rows carry corpus entity ids (a corpus KB, or a BLINK KB mapped onto a corpus)."""
        return bool(self.meta.get("corpus"))

    def title(self, row: int) -> str:
        return self.titles[int(row)]

    def text(self, row: int) -> str:
        return self.texts[int(row)]

    def entity_title(self, row: int) -> str:
        """The corpus's title of the row's entity; the KB's own title when the row maps to none."""
        entity_id = int(self.entity_ids[int(row)])
        if self.corpus_titles is not None and 0 <= entity_id < len(self.corpus_titles):
            return self.corpus_titles[entity_id]
        return self.titles[int(row)]

    def url(self, row: int) -> str:
        wid = int(self.wikipedia_ids[int(row)])
        return WIKIPEDIA_URL.format(wid) if wid >= 0 else ""

    def row_of_entity_id(self, entity_id: int) -> int:
        if 0 <= entity_id < len(self.rows_by_entity):
            return int(self.rows_by_entity[entity_id])
        return -1

    def row_of_wikipedia_id(self, wikipedia_id: int) -> int:
        order = self.rows_by_wikipedia_id
        ids = self.wikipedia_ids
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            if ids[order[mid]] < wikipedia_id:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(order) and ids[order[lo]] == wikipedia_id:
            return int(order[lo])
        return -1

    def row_of_title(self, title: str) -> int:
        return self.title_index.find(title)


def open_kb(folder: str) -> KnowledgeBase:
    """Open a built KB folder with memory maps (raises FileNotFoundError when it is not complete)."""
    meta = read_kb_meta(folder)
    if meta is None:
        raise FileNotFoundError(f"no complete knowledge base in {folder} (no {KB_FILE})")
    titles = StringColumn(folder, "titles")
    if meta["kind"] == "blink":
        texts = JsonlField(meta["catalogue"]["path"], os.path.join(folder, "lines.offsets.npy"), "text")
    else:
        texts = StringColumn(folder, "texts")
    kb = KnowledgeBase(
        folder=folder, meta=meta, titles=titles, texts=texts,
        entity_ids=load_npy(os.path.join(folder, "entity_ids.npy")),
        wikipedia_ids=load_npy(os.path.join(folder, "wikipedia_ids.npy")),
        counts=load_npy(os.path.join(folder, "counts.npy")),
        rows_by_entity=load_npy(os.path.join(folder, "rows_by_entity.npy")),
        rows_by_wikipedia_id=load_npy(os.path.join(folder, "rows_by_wikipedia_id.npy")),
        title_index=StringHash(titles, os.path.join(folder, "titles.hash.npy")),
    )
    kb.encodings = open_kb_encodings(kb)
    if os.path.isfile(os.path.join(folder, "corpus_titles.offsets.npy")):
        kb.corpus_titles = StringColumn(folder, "corpus_titles")
    return kb


def read_kb_meta(folder: str) -> dict | None:
    return read_versioned_json(os.path.join(folder, KB_FILE), KB_VERSION)


def open_kb_encodings(kb: KnowledgeBase) -> np.ndarray | None:
    """BLINK KB: the .t7 mapped in place (or its one-time .npy copy); corpus KB: encodings.npy once built."""
    from linker.torchfile import TensorLayout

    enc = kb.meta.get("encodings")
    if enc is None:
        path = os.path.join(kb.folder, "encodings.npy")
        return np.load(path, mmap_mode="r") if os.path.isfile(path) else None
    if enc["format"] == "npy":
        return np.load(enc["path"], mmap_mode="r")
    return TensorLayout(enc["path"], enc["format"], enc["dtype"], tuple(enc["shape"]), enc["data_offset"]).open()


def _write_meta(folder: str, meta: dict) -> None:
    write_json(os.path.join(folder, KB_FILE), {**meta, "version": KB_VERSION})


def _start_build(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, KB_FILE)
    if os.path.exists(path):  # incomplete from here until the new kb.json is written
        os.remove(path)


def _write_lookups(folder: str, entity_ids: np.ndarray, wikipedia_ids: np.ndarray) -> dict:
    """rows_by_entity (first row wins), rows_by_wikipedia_id and the title hash; returns counts."""
    size = int(entity_ids.max()) + 1 if len(entity_ids) and entity_ids.max() >= 0 else 0
    rows_by_entity = np.full(size, -1, dtype=np.int32)
    mapped = np.flatnonzero(entity_ids >= 0)
    entities, first = np.unique(entity_ids[mapped], return_index=True)  # an entity's first row wins
    rows_by_entity[entities] = mapped[first].astype(np.int32)
    save_npy(os.path.join(folder, "rows_by_entity.npy"), rows_by_entity)
    order = np.argsort(wikipedia_ids, kind="stable").astype(np.int64)
    save_npy(os.path.join(folder, "rows_by_wikipedia_id.npy"), order)
    duplicate_titles = build_string_hash(StringColumn(folder, "titles"), os.path.join(folder, "titles.hash.npy"))
    return {"rows_sharing_an_entity": int(len(mapped) - len(entities)),
            "duplicate_titles": duplicate_titles}


# --------------------------------------------------------------------------- building: corpus


def build_corpus_kb(corpus_dir: str, folder: str, fingerprint: str) -> KnowledgeBase:
    """The corpus's vocabulary entities (ids >= 3, id order) with their descriptions."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from linker.catalogue import FIRST_ENTITY_ID, _join, read_parquet_folder

    _start_build(folder)
    vocab = read_parquet_folder(_join(corpus_dir, "entity_vocab"), ["entity_id", "entity", "count"])
    vocab = vocab.filter(pc.greater_equal(vocab.column("entity_id"), FIRST_ENTITY_ID)).sort_by("entity_id")
    ids = vocab.column("entity_id").to_numpy().astype(np.int32)
    counts = vocab.column("count").to_numpy().astype(np.int64)
    try:  # Arrow columns aligned by entity id, not a dict of Python strings (1M descriptions on enwiki)
        desc = read_parquet_folder(_join(corpus_dir, "entity_descriptions"), ["entity_id", "description"])
        position = pc.index_in(vocab.column("entity_id"), value_set=desc.column("entity_id").combine_chunks())
        texts = desc.column("description").combine_chunks().take(position).fill_null("")
    except FileNotFoundError:
        texts = pa.array([""] * len(ids), type=pa.string())
    write_arrow_strings(folder, "titles", vocab.column("entity").combine_chunks())
    write_arrow_strings(folder, "texts", texts)
    with_description = int(pc.sum(pc.greater(pc.utf8_length(texts), 0)).as_py() or 0)
    save_npy(os.path.join(folder, "entity_ids.npy"), ids)
    wikipedia_ids = np.full(len(ids), -1, dtype=np.int64)
    save_npy(os.path.join(folder, "wikipedia_ids.npy"), wikipedia_ids)
    save_npy(os.path.join(folder, "counts.npy"), counts)
    report = _write_lookups(folder, ids, wikipedia_ids)
    _write_meta(folder, {"kind": "corpus", "corpus": {"path": corpus_dir, "fingerprint": fingerprint},
                         "count": int(len(ids)), "with_description": with_description,
                         **report})
    return open_kb(folder)


# --------------------------------------------------------------------------- building: BLINK


def find_blink_files(blink_dir: str) -> dict:
    """entity.jsonl, the encodings .t7 and the FAISS files of a BLINK model/KB folder."""
    if not os.path.isdir(blink_dir):
        raise FileNotFoundError(f"--kb blink:{blink_dir}: not a folder")
    catalogue = os.path.join(blink_dir, BLINK_CATALOGUE)
    if not os.path.isfile(catalogue):
        raise FileNotFoundError(f"no {BLINK_CATALOGUE} in {blink_dir} (BLINK's entity catalogue)")
    t7 = [os.path.join(blink_dir, n) for n in BLINK_ENCODINGS if os.path.isfile(os.path.join(blink_dir, n))]
    if not t7:
        t7 = sorted(os.path.join(blink_dir, n) for n in os.listdir(blink_dir) if n.endswith(".t7"))
    if len(t7) != 1:
        raise FileNotFoundError(f"expected one entity encodings file (all_entities_large.t7) in {blink_dir}, found {t7}")
    faiss_files = {kind: os.path.join(blink_dir, name) for kind, name in BLINK_FAISS_FILES.items()
                   if os.path.isfile(os.path.join(blink_dir, name))}
    return {"catalogue": catalogue, "encodings": t7[0], "faiss": faiss_files}


def parse_blink_idx(idx) -> int:
    """BLINK's ``idx`` (``https://en.wikipedia.org/wiki?curid=N``) -> N; -1 when it holds no number."""
    if isinstance(idx, int):
        return idx
    text = str(idx or "").strip()
    tail = text.split("curid=")[-1].strip()
    return int(tail) if tail.isdigit() else -1


def corpus_title_map(corpus_dir: str) -> tuple[dict, dict, dict]:
    """(title -> entity id, redirect title -> target title, entity id -> hyperlink count) of a corpus."""
    import pyarrow.compute as pc

    from linker.catalogue import FIRST_ENTITY_ID, _join, read_parquet_folder

    vocab = read_parquet_folder(_join(corpus_dir, "entity_vocab"), ["entity_id", "entity", "count"]).to_pydict()
    ids = {t: i for i, t in zip(vocab["entity_id"], vocab["entity"]) if i >= FIRST_ENTITY_ID}
    counts = {i: c for i, c in zip(vocab["entity_id"], vocab["count"])}
    aliases = read_parquet_folder(_join(corpus_dir, "alias_table"), ["alias", "entity", "sources"])
    flat = pc.list_flatten(aliases.column("sources"))
    parents = pc.list_parent_indices(aliases.column("sources")).to_numpy()
    rows = np.unique(parents[pc.equal(flat, "redirect").to_numpy(zero_copy_only=False)])
    redirected = aliases.take(rows).to_pydict() if len(rows) else {"alias": [], "entity": []}
    return ids, dict(zip(redirected["alias"], redirected["entity"])), counts


def build_blink_kb(blink_dir: str, folder: str, corpus_dir: str = "", corpus_fingerprint: str = "") -> KnowledgeBase:
    """Index BLINK's entity.jsonl (titles, curids, line offsets), map its rows onto a corpus's
    vocabulary when one is given, and record where the .t7's rows lie (mapped in place)."""
    from linker.torchfile import NotMappable, convert_to_npy, tensor_layout

    files = find_blink_files(blink_dir)
    _start_build(folder)
    ids_of_title, redirects, counts_of = corpus_title_map(corpus_dir) if corpus_dir else ({}, {}, {})
    how = {"title": 0, "normalised_title": 0, "redirect": 0, "unmapped": 0}
    titles = StringWriter(folder, "titles")
    # compact arrays, not lists of Python ints: 5.9M entities in BLINK's release
    line_offsets = array("q", [0])
    wikipedia_ids = array("q")
    entity_ids = array("i")
    bad_lines = 0
    with open(files["catalogue"], "rb") as fh:
        for line_no, line in enumerate(fh):
            line_offsets.append(line_offsets[-1] + len(line))
            try:
                record = json.loads(line)
                title = str(record.get("title", ""))
            except (ValueError, AttributeError):
                bad_lines += 1
                record, title = {}, ""
            titles.add(title)
            wikipedia_ids.append(parse_blink_idx(record.get("idx")))
            entity_ids.append(_map_title(title, ids_of_title, redirects, how) if corpus_dir else -1)
            if line_no and line_no % 1_000_000 == 0:
                log.info("read %d BLINK entities", line_no)
    n = titles.close()
    if corpus_dir:
        title_of_id = {i: t for t, i in ids_of_title.items()}
        write_strings(folder, "corpus_titles", (title_of_id.get(i, "") for i in range(max(title_of_id, default=-1) + 1)))
    if bad_lines:
        log.warning("%d lines of %s are not JSON objects: kept as rows without a title", bad_lines, files["catalogue"])
    save_npy(os.path.join(folder, "lines.offsets.npy"), np.frombuffer(line_offsets, dtype=np.int64))
    ids = np.frombuffer(entity_ids, dtype=np.int32) if len(entity_ids) else np.zeros(0, np.int32)
    wids = np.frombuffer(wikipedia_ids, dtype=np.int64) if len(wikipedia_ids) else np.zeros(0, np.int64)
    save_npy(os.path.join(folder, "entity_ids.npy"), ids)
    save_npy(os.path.join(folder, "wikipedia_ids.npy"), wids)
    count_by_id = np.zeros(max(counts_of, default=-1) + 2, dtype=np.int64)
    for entity_id, count in counts_of.items():
        count_by_id[entity_id] = count
    save_npy(os.path.join(folder, "counts.npy"), np.where(ids >= 0, count_by_id[np.maximum(ids, 0)], 0) if len(ids)
             else np.zeros(0, np.int64))
    report = _write_lookups(folder, ids, wids)
    try:
        layout = tensor_layout(files["encodings"])
        encodings = {"format": layout.format, "path": layout.path, "dtype": layout.dtype,
                     "shape": list(layout.shape), "data_offset": layout.data_offset}
    except NotMappable as err:
        log.warning("%s cannot be mapped in place (%s): converting it once to .npy", files["encodings"], err)
        npy = convert_to_npy(files["encodings"], os.path.join(folder, "encodings.npy"))
        encodings = {"format": "npy", "path": npy, "shape": list(np.load(npy, mmap_mode="r").shape)}
    if len(encodings["shape"]) != 2 or encodings["shape"][0] != n:
        raise ValueError(f"{files['encodings']} holds {encodings['shape']} encodings but {files['catalogue']} "
                         f"has {n} entities: row i must be line i")
    mapping = {**how, "entities": n, "mapped": n - how["unmapped"]} if corpus_dir else None
    if mapping:
        log.info("BLINK entities mapped onto the corpus vocabulary: %s", json.dumps(mapping))
    _write_meta(folder, {
        "kind": "blink", "count": n, "bad_lines": bad_lines,
        "catalogue": file_signature(files["catalogue"]), "encodings_file": file_signature(files["encodings"]),
        "faiss": {kind: file_signature(path) for kind, path in files["faiss"].items()},
        "encodings": encodings,
        "corpus": {"path": corpus_dir, "fingerprint": corpus_fingerprint} if corpus_dir else None,
        "mapping": mapping, **report,
    })
    return open_kb(folder)


def _map_title(title: str, ids_of_title: dict, redirects: dict, how: dict) -> int:
    if title in ids_of_title:
        how["title"] += 1
        return ids_of_title[title]
    norm = normalise_title(title)
    if norm in ids_of_title:
        how["normalised_title"] += 1
        return ids_of_title[norm]
    target = redirects.get(title, redirects.get(norm))
    if target is not None and target in ids_of_title:
        how["redirect"] += 1
        return ids_of_title[target]
    how["unmapped"] += 1
    return -1


def blink_kb_is_fresh(meta: dict | None, blink_dir: str, corpus_fingerprint: str) -> bool:
    """Whether a built BLINK KB still matches its files (sizes, mtimes) and corpus."""
    if not meta or meta.get("kind") != "blink":
        return False
    try:
        files = find_blink_files(blink_dir)
    except FileNotFoundError:
        return False
    corpus = meta.get("corpus") or {}
    return (meta["catalogue"] == file_signature(files["catalogue"])
            and meta["encodings_file"] == file_signature(files["encodings"])
            and set(meta.get("faiss", {})) == set(files["faiss"])
            and corpus.get("fingerprint", "") == corpus_fingerprint)
