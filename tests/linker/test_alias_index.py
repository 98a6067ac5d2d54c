"""The memory-mapped alias candidate index: the same candidates and priors as the in-memory table,
limited to vocabulary entities and their top-K aliases; O(1) lookups from a file."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from linker.alias_index import AliasIndexSettings, MappedAliasIndex, build_alias_index, read_alias_meta
from linker.catalogue import read_alias_index, read_catalogue
from linker.mmap_store import StringColumn, StringHash, build_string_hash, write_strings
from schemas import ALIAS_SCHEMA, ENTITY_VOCAB_SCHEMA


def fake_corpus(folder, alias_rows, vocab):
    """A corpus folder with just the two tables the index reads."""
    (folder / "alias_table").mkdir(parents=True)
    (folder / "entity_vocab").mkdir()
    rows = [{"alias": a, "entity": e, "count": c, "prior": 0.0, "sources": s} for a, e, c, s in alias_rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=ALIAS_SCHEMA), folder / "alias_table" / "a.parquet")
    vocab_rows = [{"entity_id": i, "entity": t, "count": 1} for t, i in vocab.items()]
    pq.write_table(pa.Table.from_pylist(vocab_rows, schema=ENTITY_VOCAB_SCHEMA), folder / "entity_vocab" / "v.parquet")
    return folder


VOCAB = {"Paris": 3, "Paris (band)": 4, "New York City": 5, "York": 6, "Istanbul": 7}
ROWS = [
    ("Paris", "Paris", 10, ["anchor", "title"]),
    ("paris", "Paris (band)", 2, ["anchor"]),
    ("PARIS", "Paris", 1, ["anchor"]),
    ("Paris", "Paris, Texas", 5, ["anchor"]),  # outside the vocabulary
    ("New  York City", "New York City", 4, ["anchor"]),
    ("NYC", "New York City", 1, ["anchor"]),
    ("Big Apple", "New York City", 0, ["redirect"]),
    ("York", "York", 3, ["anchor", "title"]),
    ("the city", "New York City", 1, ["anchor"]),
    ("Constantinople", "Istanbul", 0, ["redirect"]),
    ("Straße", "York", 1, ["anchor"]),
]


def test_same_candidates_and_priors_as_the_in_memory_table(tmp_path):
    corpus = fake_corpus(tmp_path / "c", ROWS, VOCAB)
    build_alias_index(str(corpus), str(tmp_path / "idx"), AliasIndexSettings(), fingerprint="fp")
    mapped = MappedAliasIndex(str(tmp_path / "idx"))
    reference = read_alias_index(str(corpus), VOCAB)
    assert len(mapped) == len(reference)
    for key, expected in reference.candidates.items():
        assert mapped.lookup_key(key) == expected, key
    paris = mapped.lookup("pArIs")
    assert [(c.entity_id, c.count, c.is_name) for c in paris] == [(3, 11, True), (4, 2, False)]
    assert paris[0].prior == pytest.approx(11 / 13)
    assert mapped.lookup("new york city")[0].entity_id == 5 and "Constantinople" in mapped
    assert mapped.lookup("Big Apple")[0].is_name and mapped.lookup("Big Apple")[0].prior == 0.0
    assert mapped.lookup("STRASSE") == mapped.lookup("straße")  # case-folded keys
    assert mapped.lookup("Paris, Texas") == () and "nowhere" not in mapped
    assert read_alias_meta(str(tmp_path / "idx"))["corpus_fingerprint"] == "fp"


def test_top_k_per_entity_keeps_names_then_the_most_linked(tmp_path):
    corpus = fake_corpus(tmp_path / "c", ROWS, VOCAB)
    report = build_alias_index(str(corpus), str(tmp_path / "idx"), AliasIndexSettings(top_k=2))
    mapped = MappedAliasIndex(str(tmp_path / "idx"))
    # New York City has 4 aliases: the redirect "Big Apple" first, then the most linked one.
    nyc = {k for k in ("big apple", "new york city", "nyc", "the city") if any(c.entity_id == 5 for c in mapped.lookup_key(k))}
    assert nyc == {"big apple", "new york city"}
    assert report["pairs_dropped_by_top_k"] == 2
    assert mapped.lookup("Paris")[0].prior == pytest.approx(11 / 13)  # priors counted before the cap


def test_min_count_drops_rare_anchors_but_keeps_names(tmp_path):
    corpus = fake_corpus(tmp_path / "c", ROWS, VOCAB)
    build_alias_index(str(corpus), str(tmp_path / "idx"), AliasIndexSettings(min_count=2))
    mapped = MappedAliasIndex(str(tmp_path / "idx"))
    assert "NYC" not in mapped and "Big Apple" in mapped and "Constantinople" in mapped
    assert [c.entity_id for c in mapped.lookup("paris")] == [3, 4]  # the 1-count PARIS row folds into a kept key


def test_on_a_real_corpus_every_key_matches(sample_corpus, tmp_path):
    catalogue = read_catalogue(str(sample_corpus))
    reference = read_alias_index(str(sample_corpus), catalogue.id_of_title(), min_count=2)
    build_alias_index(str(sample_corpus), str(tmp_path / "idx"), AliasIndexSettings(min_count=2, top_k=10**6))
    mapped = MappedAliasIndex(str(tmp_path / "idx"))
    assert len(mapped) == len(reference) > 100
    assert all(mapped.lookup_key(k) == v for k, v in reference.candidates.items())


def test_string_hash_finds_every_string_and_the_first_of_duplicates(tmp_path):
    words = [f"w{i % 700}\u00e9" for i in range(2000)] + ["", "x" * 300]
    write_strings(str(tmp_path), "s", words)
    column = StringColumn(str(tmp_path), "s")
    duplicates = build_string_hash(column, str(tmp_path / "s.hash.npy"))
    assert duplicates == 2000 - 700
    index = StringHash(column, str(tmp_path / "s.hash.npy"))
    first = {}
    for i, w in enumerate(words):
        first.setdefault(w, i)
    assert all(index.find(w) == first[w] for w in words)
    assert index.find("w700\u00e9") == -1 and column[2001] == "x" * 300
