"""Candidate indexes: exact chunked search, HNSW with BLINK's inner-product-to-L2 trick, saved encodings."""
from __future__ import annotations

import numpy as np
import pytest

from linker.index import (
    EncodingsMeta,
    ExactIndex,
    HNSWIndex,
    IndexConfig,
    augment_for_l2,
    choose_kind,
    load_encodings,
    open_index,
    read_meta,
    save_encodings,
    top_k_rows,
)

faiss = pytest.importorskip("faiss")


def vectors(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Norms vary a lot, as BLINK's do: inner product and cosine order differ.
    return (rng.normal(size=(n, dim)) * rng.uniform(0.2, 3.0, size=(n, 1))).astype(np.float32)


def test_exact_search_in_chunks_equals_brute_force():
    entities, queries = vectors(1000, 16, 0), vectors(50, 16, 1)
    scores, rows = ExactIndex(entities, chunk_rows=64).search(queries, 10)
    full = queries @ entities.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), rtol=1e-5)
    assert ExactIndex(entities[:3], chunk_rows=2).search(queries, 10)[1].shape == (50, 3)  # k > n


def test_top_k_rows_orders_best_first_ties_by_column():
    vals, cols = top_k_rows(np.array([[1.0, 3.0, 3.0, 2.0]]), 3)
    assert cols.tolist() == [[1, 2, 3]] and vals.tolist() == [[3.0, 3.0, 2.0]]


def test_l2_augmentation_turns_inner_product_order_into_distance_order():
    entities, query = vectors(200, 8, 2), vectors(1, 8, 3)[0]
    augmented, bound = augment_for_l2(entities)
    distances = ((augmented - np.append(query, 0.0)) ** 2).sum(axis=1)
    np.testing.assert_allclose(distances, query @ query + bound - 2 * entities @ query, rtol=1e-3, atol=1e-3)
    assert np.argmin(distances) == np.argmax(entities @ query)


def clustered(n: int, dim: int, seed: int, clusters: int = 50) -> np.ndarray:
    """Vectors around cluster centres, like entity encodings (types, topics); isotropic Gaussian
    data in 32+ dimensions is HNSW's worst case and no model's output."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)) * 2
    return (centres[rng.integers(0, clusters, n)] + rng.normal(size=(n, dim))).astype(np.float32)


def test_hnsw_agrees_with_exact_search_on_top1(tmp_path):
    entities, queries = clustered(5000, 32, 4), clustered(200, 32, 5)
    config = IndexConfig(kind="hnsw", hnsw_m=16, hnsw_ef_construction=100, hnsw_ef_search=128)
    hnsw = HNSWIndex.build(entities, config)
    exact_scores, exact_rows = ExactIndex(entities).search(queries, 5)
    scores, rows = hnsw.search(queries, 5)
    agreement = float(np.mean(rows[:, 0] == exact_rows[:, 0]))
    assert agreement >= 0.95, agreement
    hit = rows[:, 0] == exact_rows[:, 0]
    np.testing.assert_allclose(scores[hit, 0], exact_scores[hit, 0], rtol=1e-4)  # scores are inner products
    hnsw.save(str(tmp_path / "hnsw.faiss"))
    again = HNSWIndex.load(str(tmp_path / "hnsw.faiss"), entities, 128)
    np.testing.assert_array_equal(again.search(queries, 5)[1], rows)


def test_saved_encodings_round_trip_and_index_choice(tmp_path):
    entities = vectors(300, 8, 6)
    ids = np.arange(3, 303, dtype=np.int32)
    meta = EncodingsMeta("m", "c", 300, 8, 128)
    save_encodings(str(tmp_path), entities, ids, meta)
    loaded, loaded_ids = load_encodings(str(tmp_path))
    np.testing.assert_array_equal(loaded, entities)
    np.testing.assert_array_equal(loaded_ids, ids)
    assert read_meta(str(tmp_path)) == meta
    assert choose_kind(IndexConfig(kind="auto", hnsw_min_entities=1000), 300) == "exact"
    assert choose_kind(IndexConfig(kind="auto", hnsw_min_entities=100), 300) == "hnsw"
    index = open_index(str(tmp_path), loaded, IndexConfig(kind="hnsw", hnsw_m=8))
    assert index.kind == "hnsw" and (tmp_path / "hnsw.faiss").exists()  # built once, saved for reuse
    assert open_index(str(tmp_path), loaded, IndexConfig(kind="exact")).kind == "exact"
