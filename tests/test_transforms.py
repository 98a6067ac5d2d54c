"""Beam TestPipeline tests of the job's PTransforms, on small hand-made inputs."""
from __future__ import annotations

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import storage
from pipelines.records import Article, LinkMention
from pipelines.transforms.aliases import BuildAliasTable, SelectEntityVocab
from pipelines.transforms.resolve import ResolveLinks, ResolveRedirects
from pipelines.transforms.stats import SumStats
from pipelines.transforms.write import ShardSpec, WriteShards, pack_rows, stable_shard
from schemas import SCHEMAS

PAGE_KINDS = [
    ("Paris", "article"), ("France", "article"), ("Mercury", "disambiguation"),
    ("Paree", "redirect"), ("City of Light", "redirect"), ("A", "redirect"), ("B", "redirect"),
    ("Self", "redirect"), ("To dab", "redirect"), ("Gone", "redirect"),
    ("H1", "redirect"), ("H2", "redirect"), ("H3", "redirect"),
]
REDIRECTS = [
    ("Paree", "Paris"), ("City of Light", "Paree"),  # two hops
    ("A", "B"), ("B", "A"), ("Self", "Self"),  # loops
    ("To dab", "Mercury"), ("Gone", "Nowhere"),
    ("H1", "H2"), ("H2", "H3"), ("H3", "Paris"),  # three hops
]


def _resolve(p, max_hops=5, max_group=10):
    return (
        {"redirects": p | "R" >> beam.Create(REDIRECTS), "page_kinds": p | "K" >> beam.Create(PAGE_KINDS)}
        | ResolveRedirects(max_hops, max_group)
    )


def test_resolve_redirects_chains_loops_and_ends():
    with BeamTestPipeline() as p:
        out = _resolve(p)
        assert_that(out["resolutions"], equal_to([
            ("Paris", ("article", "Paris")), ("France", ("article", "France")),
            ("Mercury", ("disambiguation", "Mercury")),
            ("Paree", ("article", "Paris")), ("City of Light", ("article", "Paris")),
            ("A", ("loop", "A")), ("B", ("loop", "B")), ("Self", ("loop", "Self")),
            ("To dab", ("disambiguation", "Mercury")), ("Gone", ("missing", "Nowhere")),
            ("H1", ("article", "Paris")), ("H2", ("article", "Paris")), ("H3", ("article", "Paris")),
        ]))
        stats = tuple(out["stats"]) | SumStats()
        assert_that(
            stats | beam.Filter(lambda kv: kv[0] == "redirect_loops"), equal_to([("redirect_loops", 3)]), label="Loops")


def test_resolve_redirects_caps_chain_length():
    with BeamTestPipeline() as p:
        out = _resolve(p, max_hops=2)
        assert_that(
            out["resolutions"] | beam.Filter(lambda kv: kv[1][0] == "too_long"),
            equal_to([("H1", ("too_long", "H1"))]))


def _article(page_id, title, links):
    text = " ".join(s for s, _ in links)
    out, pos = [], 0
    for surface, target in links:
        out.append(LinkMention(pos, pos + len(surface), surface, target))
        pos += len(surface) + 1
    return Article(page_id=page_id, title=title, text=text, links=out)


def test_resolve_links_counts_anchors_entities_and_red_links():
    articles = [
        _article(1, "France", [("Paris", "Paris"), ("Paree", "Paree"), ("the capital", "City of Light"), ("X", "Red")]),
        _article(2, "Paris", [("France", "France"), ("Mercury", "Mercury")]),
    ]
    with BeamTestPipeline() as p:
        resolved = _resolve(p)
        links = {"articles": p | "Arts" >> beam.Create(articles), "resolutions": resolved["resolutions"]} | ResolveLinks(False, 10)
        assert_that(links["entity_links"], equal_to([("Paris", 3), ("France", 1)]), label="Entities")
        assert_that(links["anchors"], equal_to([
            (("Paris", "Paris"), 1), (("Paree", "Paris"), 1), (("the capital", "Paris"), 1), (("France", "France"), 1)]),
            label="Anchors")
        # Usable links only, each with its page, target and anchor texts, for the label join: one batch per target.
        assert_that(links["entity_refs"], equal_to([
            ("Paris", ((1, "linked", "Paris", ("Paris",)),)), ("Paris", ((1, "linked", "Paree", ("Paree",)),)),
            ("Paris", ((1, "linked", "City of Light", ("the capital",)),)),
            ("France", ((2, "linked", "France", ("France",)),)),
        ]), label="Refs")


def test_alias_table_and_vocab():
    anchors = [(("Paris", "Paris"), 8), (("Paris", "Paris Hilton"), 2), (("the capital", "Paris"), 1)]
    resolutions = [("Paris", ("article", "Paris")), ("Paree", ("article", "Paris")),
                   ("Paris Hilton", ("article", "Paris Hilton")), ("Mercury", ("disambiguation", "Mercury"))]
    with BeamTestPipeline() as p:
        table = {"anchors": p | "A" >> beam.Create(anchors), "resolutions": p | "R" >> beam.Create(resolutions)} | BuildAliasTable(10)
        assert_that(table["rows"], equal_to([
            {"alias": "Paris", "entity": "Paris", "count": 8, "prior": 0.8, "sources": ["anchor", "title"]},
            {"alias": "Paris", "entity": "Paris Hilton", "count": 2, "prior": 0.2, "sources": ["anchor"]},
            {"alias": "the capital", "entity": "Paris", "count": 1, "prior": 1.0, "sources": ["anchor"]},
            {"alias": "Paree", "entity": "Paris", "count": 0, "prior": 0.0, "sources": ["redirect"]},
            {"alias": "Paris Hilton", "entity": "Paris Hilton", "count": 0, "prior": 0.0, "sources": ["title"]},
        ]), label="Aliases")
        counts = p | "Counts" >> beam.Create([("B", 5), ("A", 5), ("C", 9), ("D", 1)])
        assert_that(counts | SelectEntityVocab(3), equal_to([[
            {"entity_id": 0, "entity": "[PAD]", "count": 0}, {"entity_id": 1, "entity": "[UNK]", "count": 0},
            {"entity_id": 2, "entity": "[MASK]", "count": 0}, {"entity_id": 3, "entity": "C", "count": 9},
            {"entity_id": 4, "entity": "A", "count": 5}, {"entity_id": 5, "entity": "B", "count": 5},
        ]]), label="Vocab")


def test_write_shards_sorted_complete_and_deterministic(tmp_path):
    rows = [{"entity_id": i, "entity": f"E{i}", "count": 100 - i} for i in range(50)]
    spec = ShardSpec("entity_vocab", ("even", "odd", "none"), num_shards=1)
    digests = []
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        order = rows if attempt == 0 else list(reversed(rows))
        with BeamTestPipeline() as p:
            written = (
                p | beam.Create(order) | beam.Map(lambda r: (("even", "odd")[r["entity_id"] % 2], r["entity"], r))
                # A sort buffer of 4 rows: each shard is merged from 7 sorted runs spilled to disk.
                | WriteShards(str(out), "entity_vocab", spec, lambda r: r["entity_id"], 7, sort_buffer_rows=4)
            )
            assert_that(written | beam.Map(lambda f: (f["path"], f["rows"])), equal_to([
                ("entity_vocab/even-00000-of-00001.parquet", 25), ("entity_vocab/odd-00000-of-00001.parquet", 25),
                ("entity_vocab/none-00000-of-00001.parquet", 0)]))
        path = out / "entity_vocab" / "even-00000-of-00001.parquet"
        assert pq.read_table(path).column("entity_id").to_pylist() == list(range(0, 50, 2))
        assert pq.ParquetFile(path).metadata.num_row_groups == 4
        # Streaming through spilled runs gives the bytes of writing all rows at once.
        assert path.read_bytes() == storage.parquet_bytes(
            [r for r in rows if r["entity_id"] % 2 == 0], SCHEMAS["entity_vocab"], 7)
        digests.append([p.read_bytes() for p in sorted((out / "entity_vocab").iterdir())])
    assert digests[0] == digests[1]


def test_write_shards_packed_runs_give_the_bytes_of_rows(tmp_path):
    """Runs of rows packed per shard key (a page's windows) are written as the same bytes as the rows
    one by one: row groups that cut across runs, runs spilled to disk by the sort, any arrival order."""
    schema = SCHEMAS["entity_vocab"]
    runs = {}  # shard key -> its run of rows, contiguous in entity_id order; run sizes 0..6
    next_id = 0
    for key in range(30):
        size = key % 7
        runs[key] = [{"entity_id": next_id + i, "entity": f"E{next_id + i}", "count": key} for i in range(size)]
        next_id += size
    rows = [r for run in runs.values() for r in run]
    packed = [("all", str(key), pack_rows(run[0]["entity_id"], run, schema)) for key, run in runs.items() if run]
    spec = ShardSpec("entity_vocab", ("all",), num_shards=2)
    for attempt, order in enumerate((packed, list(reversed(packed)))):
        out = tmp_path / f"run{attempt}"
        with BeamTestPipeline() as p:
            written = p | beam.Create(order) | WriteShards(
                str(out), "entity_vocab", spec, None, 4, sort_buffer_rows=9, packed=True)
            assert_that(written | beam.Map(lambda f: f["rows"]) | beam.CombineGlobally(sum), equal_to([len(rows)]))
        for index in range(2):
            in_shard = [r for key, run in runs.items() if stable_shard(str(key), 2) == index for r in run]
            assert 10 < len(in_shard) < len(rows)
            path = out / "entity_vocab" / f"all-0000{index}-of-00002.parquet"
            assert path.read_bytes() == storage.parquet_bytes(in_shard, schema, 4)
            assert pq.ParquetFile(path).metadata.num_row_groups == -(-len(in_shard) // 4)


def test_write_shards_derives_shard_counts_from_the_data(tmp_path):
    rows = [("big", str(i), {"entity_id": i, "entity": f"E{i}", "count": 1}) for i in range(23)]
    rows += [("small", "x", {"entity_id": 100, "entity": "X", "count": 1})]
    spec = ShardSpec("entity_vocab", ("big", "small", "empty"), num_shards=0, rows_per_shard=10)
    with BeamTestPipeline() as p:
        written = p | beam.Create(rows) | WriteShards(str(tmp_path), "entity_vocab", spec, lambda r: r["entity_id"], 5)
        assert_that(written | beam.Map(lambda f: f["path"]), equal_to(
            [f"entity_vocab/big-0000{i}-of-00003.parquet" for i in range(3)]
            + ["entity_vocab/small-00000-of-00001.parquet", "entity_vocab/empty-00000-of-00001.parquet"]))
    big = sorted((tmp_path / "entity_vocab").glob("big-*"))
    assert [f.name for f in big] == [f"big-0000{i}-of-00003.parquet" for i in range(3)]
    assert sum(pq.read_table(f).num_rows for f in big) == 23
    # A row's shard is a pure function of its shard key.
    for f in big:
        index = int(f.name.split("-")[1])
        assert all(stable_shard(f"{e}", 3) == index for e in pq.read_table(f).column("entity_id").to_pylist())
