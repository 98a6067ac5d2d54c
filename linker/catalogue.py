"""What the linker reads from a corpus output folder (``OUT/``).

* the entity vocabulary (``entity_vocab/``): the linkable entities, ids >= 3;
* their descriptions (``entity_descriptions/``, the lead paragraph): the text
  BLINK encodes for a candidate, with the title;
* the alias table (``alias_table/``): surface forms for mention detection and
  p(entity | alias) for the first-stage candidate list and the baseline.

Aliases are looked up case- and space-insensitively (questions and dialogue
are often lower-cased): the rows of the case variants of an alias are merged,
their hyperlink counts summed, and the prior recomputed from the sums.
"""
from __future__ import annotations

import hashlib
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas import SPECIAL_ENTITIES

FIRST_ENTITY_ID = len(SPECIAL_ENTITIES)  # ids 0..2 are [PAD], [UNK], [MASK]
_WS = re.compile(r"\s+")


def alias_key(text: str) -> str:
    """The lookup key of a surface form: case-folded, whitespace collapsed."""
    return _WS.sub(" ", text).strip().casefold()


# --------------------------------------------------------------------------- reading


def _join(root: str, *parts: str) -> str:
    from wikiedm import storage

    return storage.join(root, *parts)


def read_parquet_folder(folder: str, columns: list[str] | None = None) -> pa.Table:
    """All Parquet files of a folder (local or any Beam filesystem), concatenated in name order."""
    from wikiedm import storage

    paths = [p for p in storage.list_files(folder) if p.endswith(".parquet")]
    if not paths:
        raise FileNotFoundError(f"no Parquet files in {folder}")
    tables = []
    for path in paths:
        source = path if "://" not in path else io.BytesIO(storage.read_bytes(path))
        tables.append(pq.read_table(source, columns=columns))
    return pa.concat_tables(tables)


def corpus_fingerprint(corpus_dir: str) -> str:
    """A digest of the corpus's manifest: changes whenever any output file changes."""
    from wikiedm import storage

    path = _join(corpus_dir, storage.MANIFEST)
    if not storage.exists(path):
        raise FileNotFoundError(f"{corpus_dir} has no manifest.json: not a finished corpus run")
    return hashlib.sha256(storage.read_bytes(path)).hexdigest()[:16]


# --------------------------------------------------------------------------- entities


@dataclass(slots=True)
class EntityCatalogue:
    """The linkable entities, in entity-id order, with their candidate text."""

    entity_ids: np.ndarray  # int32 [n]
    titles: list[str]
    descriptions: list[str]
    _row_of_title: dict = field(default_factory=dict, repr=False)
    _row_of_id: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._row_of_title = {t: i for i, t in enumerate(self.titles)}
        self._row_of_id = {int(e): i for i, e in enumerate(self.entity_ids)}

    def __len__(self) -> int:
        return len(self.titles)

    def row_of_title(self, title: str) -> int | None:
        return self._row_of_title.get(title)

    def row_of_id(self, entity_id: int) -> int | None:
        return self._row_of_id.get(int(entity_id))

    def id_of_title(self) -> dict[str, int]:
        return {t: int(self.entity_ids[i]) for t, i in self._row_of_title.items()}


def read_catalogue(corpus_dir: str) -> EntityCatalogue:
    """The vocabulary's entities (ids >= 3) with their descriptions ("" when an entity has none)."""
    vocab = read_parquet_folder(_join(corpus_dir, "entity_vocab"), ["entity_id", "entity"]).to_pydict()
    try:
        desc = read_parquet_folder(_join(corpus_dir, "entity_descriptions"), ["entity_id", "description"]).to_pydict()
        description_of = dict(zip(desc["entity_id"], desc["description"]))
    except FileNotFoundError:
        description_of = {}
    rows = sorted((i, t) for i, t in zip(vocab["entity_id"], vocab["entity"]) if i >= FIRST_ENTITY_ID)
    return EntityCatalogue(
        entity_ids=np.array([i for i, _ in rows], dtype=np.int32),
        titles=[t for _, t in rows],
        descriptions=[description_of.get(i, "") for i, _ in rows],
    )


# --------------------------------------------------------------------------- aliases


@dataclass(frozen=True, slots=True)
class AliasCandidate:
    entity_id: int
    prior: float  # p(entity | alias) over hyperlinks, case variants merged; 0 for title/redirect-only
    count: int
    is_name: bool = False  # the alias is a title or a redirect of the entity


@dataclass(slots=True)
class AliasIndex:
    """alias key -> candidates, most linked first (then by entity id)."""

    candidates: dict[str, tuple[AliasCandidate, ...]]

    def lookup(self, surface: str) -> tuple[AliasCandidate, ...]:
        return self.candidates.get(alias_key(surface), ())

    def lookup_key(self, key: str) -> tuple[AliasCandidate, ...]:
        return self.candidates.get(key, ())

    def has_key(self, key: str) -> bool:
        return key in self.candidates

    def __contains__(self, surface: str) -> bool:
        return alias_key(surface) in self.candidates

    def __len__(self) -> int:
        return len(self.candidates)


def merge_alias_rows(rows, id_of_title: dict[str, int], min_count: int = 0,
                     max_candidates: int = 64) -> AliasIndex:
    """(alias, entity, count) rows -> an AliasIndex over vocabulary entities.

    Rows of entities outside the vocabulary are dropped (they cannot be linked);
    an entity reached only by ``count < min_count`` hyperlinks and by no title
    or redirect is dropped too (noisy anchors)."""
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    names: set[tuple[str, int]] = set()
    for alias, entity, count, sources in rows:
        entity_id = id_of_title.get(entity)
        if entity_id is None or (count < min_count and list(sources) == ["anchor"]):
            continue
        key = alias_key(alias)
        per_entity = counts[key]
        per_entity[entity_id] = per_entity.get(entity_id, 0) + int(count)
        if "title" in sources or "redirect" in sources:
            names.add((key, entity_id))
    candidates: dict[str, tuple[AliasCandidate, ...]] = {}
    for key, per_entity in counts.items():
        total = sum(per_entity.values())
        ranked = sorted(per_entity.items(), key=lambda kv: (-kv[1], kv[0]))[:max_candidates]
        candidates[key] = tuple(AliasCandidate(e, (c / total) if total else 0.0, c, (key, e) in names)
                                for e, c in ranked)
    return AliasIndex(candidates)


def read_alias_index(corpus_dir: str, id_of_title: dict[str, int], min_count: int = 0,
                     max_candidates: int = 64) -> AliasIndex:
    table = read_parquet_folder(_join(corpus_dir, "alias_table"), ["alias", "entity", "count", "sources"])
    cols = table.to_pydict()
    rows = zip(cols["alias"], cols["entity"], cols["count"], cols["sources"])
    return merge_alias_rows(rows, id_of_title, min_count, max_candidates)
