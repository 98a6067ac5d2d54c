"""Golden tests against BLINK's own outputs (../shared/blink-golden, see its README).

The fixtures were produced by facebookresearch/BLINK's code (commit 5fe254d,
pytorch-transformers 1.2.0) on tiny random-weight models saved by BLINK
itself: tokenization and context windows, bi-encoder encodings, BLINK's KB
files (entity.jsonl, the .t7, both FAISS indexes), main_dense's top-10 and the
cross-encoder's re-ranking. Nothing here is written by this project's code, so
a wrong loader cannot agree with a wrong fixture.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from linker.inputs import ContextText
from tests.conftest import REPO

GOLDEN = (REPO / ".." / "shared" / "blink-golden").resolve()
pytestmark = pytest.mark.skipif(not (GOLDEN / "README.md").exists(), reason=f"no BLINK golden fixtures at {GOLDEN}")

MODEL, KB = GOLDEN / "model", GOLDEN / "kb"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def expected(name: str):
    path = GOLDEN / "expected" / name
    return np.load(path) if name.endswith(".npy") else json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def mentions() -> list[dict]:
    return jsonl(GOLDEN / "mentions.jsonl")


@pytest.fixture(scope="module")
def entities() -> list[dict]:
    return jsonl(KB / "entity.jsonl")


@pytest.fixture(scope="module")
def contexts(mentions) -> list[ContextText]:
    return [ContextText(m["context_left"], m["mention"], m["context_right"]) for m in mentions]


@pytest.fixture(scope="module")
def biencoder():
    from linker.biencoder import load_biencoder

    return load_biencoder(str(MODEL))


@pytest.fixture(scope="module")
def crossencoder():
    from linker.crossencoder import load_crossencoder

    return load_crossencoder(str(MODEL))


@pytest.fixture(scope="module")
def blink_linkers(tmp_path_factory):
    """A Linker over BLINK's KB files as they are, one per search index (exact, BLINK's flat, BLINK's HNSW)."""
    from linker.index import IndexConfig
    from linker.link import Linker, LinkerConfig

    folder = tmp_path_factory.mktemp("blink_kb")  # the golden folder is read-only: prepared files go here
    linkers = {kind: Linker(LinkerConfig(model=str(MODEL), kb=f"blink:{KB}", encodings=str(folder), fast=True,
                                         index=IndexConfig(kind=kind)))
               for kind in ("exact", "blink_flat", "blink_hnsw")}
    linkers["cross"] = Linker(LinkerConfig(model=str(MODEL), kb=f"blink:{KB}", encodings=str(folder),
                                           index=IndexConfig(kind="exact")))
    return linkers


# --------------------------------------------------------------------------- 1. tokenizer and windows


def test_context_ids_equal_blinks(biencoder, contexts):
    want = expected("context_ids.json")
    assert want["max_context_length"] == biencoder.params.max_context_length == 32
    got = biencoder.inputs.contexts(contexts)
    for ids, m in zip(got, want["mentions"]):
        assert ids == m["ids"], (m["id"], biencoder.inputs.tokenizer.convert_ids_to_tokens(ids), m["tokens"])


def test_candidate_ids_equal_blinks_including_literal_special_tokens(biencoder, entities):
    want = expected("candidate_ids.json")
    got = biencoder.inputs.candidates([e["title"] for e in entities], [e["text"].strip() for e in entities])
    for ids, e in zip(got, want["entities"]):
        assert ids == e["ids"], (e["row"], e["title"])
    bert_row = want["entities"][44]["ids"]  # "[CLS]", "[SEP]", "[MASK]" literally in the text: special ids
    assert 101 in bert_row[1:] and 103 in bert_row and bert_row.count(102) >= 2


def test_context_edge_cases_where_blink_is_defined(biencoder):
    """The edge cases BLINK answers deterministically and main_dense can reach (see the fixture README)."""
    cases = {c["name"]: c for c in expected("context_edge_cases.json")["cases"]}
    empty = cases["empty_mention"]
    ids = biencoder.inputs.contexts([ContextText(empty["context_left"], empty["mention"], empty["context_right"])])[0]
    assert ids == empty["ids"]  # no [unused0] [unused1] around an empty mention


# --------------------------------------------------------------------------- 2-3. models and encodings


def test_models_load_with_blinks_configs(biencoder, crossencoder):
    config = biencoder.model.context_encoder.bert_model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 2, 2)
    assert crossencoder is not None and crossencoder.params.max_seq_length == 160


def test_mention_encodings_match_blinks(biencoder, contexts):
    from linker.biencoder import encode_in_batches

    got = encode_in_batches(biencoder.model.encode_context, biencoder.inputs.contexts(contexts), 8, 0)
    np.testing.assert_allclose(got, expected("mention_encodings.npy"), atol=1e-5, rtol=0)


def test_entity_encodings_match_blinks_t7(biencoder, entities):
    from linker.biencoder import encode_in_batches

    ids = biencoder.inputs.candidates([e["title"] for e in entities], [e["text"].strip() for e in entities])
    got = encode_in_batches(biencoder.model.encode_candidate, ids, 8, 0)
    t7 = torch.load(KB / "all_entities_tiny.t7", weights_only=True).numpy()
    np.testing.assert_allclose(got, t7, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- 4. KB files and retrieval


def test_blinks_kb_is_read_as_is(blink_linkers, entities):
    kb = blink_linkers["exact"].kb
    assert kb.kind == "blink" and len(kb) == len(entities) == 63
    t7 = torch.load(KB / "all_entities_tiny.t7", weights_only=True).numpy()
    assert isinstance(kb.encodings, np.memmap) or isinstance(kb.encodings.base, np.memmap)  # mapped, not loaded
    np.testing.assert_array_equal(np.asarray(kb.encodings), t7)
    for row in (0, 16, 44, 62):
        e = entities[row]
        assert kb.title(row) == e["title"] and kb.text(row) == e["text"]
        curid = int(e["idx"].split("curid=")[-1])
        assert kb.wikipedia_ids[row] == curid and kb.row_of_wikipedia_id(curid) == row
        assert kb.url(row) == f"https://en.wikipedia.org/wiki?curid={curid}"
        assert kb.row_of_title(e["title"]) == row
    assert kb.row_of_wikipedia_id(1) == -1 and not kb.mapped


def test_scores_and_top10_equal_main_dense(blink_linkers, contexts, mentions):
    from linker.blink_io import spans_of, read_mention_records

    records, bad = read_mention_records(str(GOLDEN / "mentions.jsonl"))
    assert not bad and [r.context for r in records] == contexts
    linker = blink_linkers["exact"]
    queries = linker.encode_contexts(contexts)
    np.testing.assert_allclose(queries @ np.asarray(linker.encodings).T, expected("biencoder_scores.npy"), atol=1e-4, rtol=0)
    want = expected("biencoder_top10.json")["mentions"]
    for kind in ("exact", "blink_flat", "blink_hnsw"):
        linker = blink_linkers[kind]
        results = linker.rank_contexts(contexts, spans_of(records, linker))
        for result, m in zip(results, want):
            assert result.retrieved_rows.tolist() == m["rows"], (kind, m["id"])
            np.testing.assert_allclose(result.retrieved_scores, m["scores"], atol=1e-4, rtol=0)
            assert [linker.kb.title(r) for r in result.retrieved_rows] == m["titles"]


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_blinks_faiss_files_answer_as_in_blink(blink_linkers, contexts, kind):
    """BLINK's serialized indexes searched as its search_knn does (HNSW: a 0 appended to each query;
    its answer is a squared L2 distance in the augmented space, smaller is better)."""
    linker = blink_linkers[f"blink_{kind}"]
    want = expected(f"biencoder_top10_faiss_{kind}.json")["mentions"]
    values, rows = linker.index.search_raw(linker.encode_contexts(contexts), 10)
    for v, r, m in zip(values, rows, want):
        assert r.tolist() == m["rows"]
        np.testing.assert_allclose(v, m["scores"], rtol=1e-5, atol=2e-3)
    if kind == "hnsw":
        assert linker.index.index.d == 129  # BLINK's extra dimension


# --------------------------------------------------------------------------- 5. cross-encoder


def test_crossencoder_inputs_logits_and_reranking_equal_blinks(blink_linkers, crossencoder, contexts, mentions, entities):
    from linker.blink_io import spans_of, read_mention_records
    from linker.inputs import cross_ids

    want = expected("crossencoder_top10.json")["mentions"]
    context_ids = crossencoder.inputs.contexts(contexts)
    candidates = crossencoder.inputs.candidates([e["title"] for e in entities], [e["text"] for e in entities])
    for i, m in enumerate(want):
        assert context_ids[i] == m["crossencoder_context_ids"]
        pairs = [cross_ids(context_ids[i], candidates[r], crossencoder.params.max_seq_length) for r in m["biencoder_rows"]]
        if m.get("input_ids"):
            assert pairs == m["input_ids"]  # 32 context ids (padding included) + 127 candidate ids
        logits = crossencoder.model.score_pairs(pairs, batch_size=4)
        np.testing.assert_allclose(logits, m["logits_in_biencoder_order"], atol=1e-5, rtol=0)
    linker = blink_linkers["cross"]
    assert linker.crossencoder is not None and blink_linkers["exact"].crossencoder is None  # --fast: none
    records, _ = read_mention_records(str(GOLDEN / "mentions.jsonl"))
    for result, m in zip(linker.rank_contexts(contexts, spans_of(records, linker)), want):
        rows, logits = result.crossencoder_ranking(10)
        assert rows.tolist() == m["reranked_rows"]
        np.testing.assert_allclose(logits, m["reranked_logits"], atol=1e-5, rtol=0)
        # Without a corpus there is no prior: the linker's choice is BLINK's re-ranked top-1.
        assert linker.kb.title(int(result.candidates.rows[result.order[0]])) == m["reranked_titles"][0]


# --------------------------------------------------------------------------- 3. BLINK's interface


def test_cli_mentions_fast_reproduces_main_dense(blink_linkers, tmp_path):
    """`link --mentions FILE --fast` on BLINK's own files: BLINK's titles, scores and metrics."""
    out, metrics = tmp_path / "out.jsonl", tmp_path / "metrics.json"
    cmd = [sys.executable, "-m", "linker.cli", "link", "--model", str(MODEL), "--kb", f"blink:{KB}",
           "--encodings", str(blink_linkers["exact"].folder), "--mentions", str(GOLDEN / "mentions.jsonl"),
           "--fast", "--output", str(out), "--metrics", str(metrics)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = jsonl(out)
    want = expected("biencoder_top10.json")
    assert len(lines) == 30
    for line, m in zip(lines, want["mentions"]):
        assert [c["title"] for c in line["biencoder"]] == m["titles"] and "crossencoder" not in line
        np.testing.assert_allclose([c["score"] for c in line["biencoder"]], m["scores"], atol=1e-4, rtol=0)
        assert line["gold_row"] == m["gold_row"] and line["linked"]["title"] == m["titles"][0]
        assert line["biencoder"][0]["url"].startswith("https://en.wikipedia.org/wiki?curid=")
    got = json.loads(metrics.read_text())
    assert got["biencoder_accuracy"] == pytest.approx(want["main_dense_returned"]["biencoder_accuracy"])
    assert got["blink_recall_at"] == pytest.approx(want["main_dense_returned"]["recall_at"])  # BLINK's recall@(k-1)
    assert got["labelled"] == 30 and got["labels_not_in_kb"] == 0


def test_cli_mentions_with_crossencoder_reports_blinks_reranking(blink_linkers, tmp_path):
    from linker.cli import main

    out = tmp_path / "out.jsonl"
    assert main(["link", "--model", str(MODEL), "--kb", f"blink:{KB}", "--encodings", str(blink_linkers["exact"].folder),
                 "--mentions", str(GOLDEN / "mentions.jsonl"), "--output", str(out)]) == 0
    want = expected("crossencoder_top10.json")["mentions"]
    for line, m in zip(jsonl(out), want):
        assert [c["title"] for c in line["crossencoder"]] == m["reranked_titles"]
        np.testing.assert_allclose([c["score"] for c in line["crossencoder"]], m["reranked_logits"], atol=1e-5, rtol=0)


def test_legacy_torch_file_and_kb_change_are_picked_up(tmp_path):
    """BLINK's release predates torch's zip format: the same KB with the .t7 rewritten in the legacy
    format is mapped in place, and the prepared folder notices that the files changed."""
    from linker.link import Linker, LinkerConfig

    kb_dir = tmp_path / "kb"
    shutil.copytree(KB, kb_dir)
    (kb_dir / "faiss_flat_index.pkl").unlink()
    (kb_dir / "faiss_hnsw_index.pkl").unlink()
    tensor = torch.load(KB / "all_entities_tiny.t7", weights_only=True)
    config = LinkerConfig(model=str(MODEL), kb=f"blink:{kb_dir}", fast=True)
    first = Linker(config)
    assert first.folder.startswith(str(kb_dir)) and first.index.kind == "exact"  # a writable KB folder keeps it
    torch.save(tensor, kb_dir / "all_entities_tiny.t7", _use_new_zipfile_serialization=False)
    again = Linker(config)
    assert again.kb.meta["encodings"]["format"] == "legacy"
    np.testing.assert_array_equal(np.asarray(again.encodings), tensor.numpy())
