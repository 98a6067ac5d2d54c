"""The job's tables from a small hand-made dump (a real run), and its shard writer (Beam TestPipeline)."""
from __future__ import annotations

import json

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import storage
from pipelines.transforms.write import ShardSpec, WriteShards, stable_shard
from schemas import SCHEMAS

# Redirect chains, loops and ends, links and their anchors, as pages of a dump the job runs on.
PAGES = [  # (page id, namespace, title, wikitext, <redirect title>)
    (1, 0, "France", "'''France''' has [[Paris]], [[Paree]], [[City of Light|the capital]] and [[Red|X]].", None),
    (2, 0, "Paris", "'''Paris''' is in [[France]]; see [[Mercury]] and [[Paris Hilton]].", None),
    (3, 0, "Paris Hilton", "'''Paris Hilton''' visits [[Paris]] and [[Paris Hilton|Paris]].", None),
    (4, 0, "Mercury", "'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}", None),
    (5, 0, "Paree", "#REDIRECT [[Paris]]", "Paris"),
    (6, 0, "City of Light", "#REDIRECT [[Paree]]", "Paree"),  # two hops
    (7, 0, "A", "#REDIRECT [[B]]", "B"), (8, 0, "B", "#REDIRECT [[A]]", "A"),  # loops
    (9, 0, "Self", "#REDIRECT [[Self]]", "Self"),
    (10, 0, "To dab", "#REDIRECT [[Mercury]]", "Mercury"), (11, 0, "Gone", "#REDIRECT [[Nowhere]]", "Nowhere"),
    (12, 0, "H1", "#REDIRECT [[H2]]", "H2"), (13, 0, "H2", "#REDIRECT [[H3]]", "H3"),  # three hops
    (14, 0, "H3", "#REDIRECT [[Paris]]", "Paris"),
]


def _run_on_pages(tmp_path, *args):
    from pipelines.sample_dump import SITEINFO, page_xml
    from tests.conftest import run_job_here

    dump = tmp_path / "testwiki-pages-articles.xml"
    dump.write_text('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">\n'
                    + SITEINFO + "".join(page_xml(*page) for page in PAGES) + "</mediawiki>\n", encoding="utf-8")
    out = tmp_path / "out"
    run_job_here(str(dump), out, "--validation_fraction", "0", *args)
    counters = json.loads((out / "stats.json").read_text())["counters"]
    aliases = sorted((r["alias"], r["entity"], r["count"], r["prior"], list(r["sources"]))
                     for path in sorted((out / "alias_table").glob("*.parquet")) for r in pq.read_table(path).to_pylist())
    vocab = [(r["entity_id"], r["entity"], r["count"])
             for r in pq.read_table(out / "entity_vocab" / "entity_vocab.parquet").to_pylist()]
    return counters, aliases, vocab


def test_the_job_resolves_redirect_chains_loops_and_links_into_the_alias_table_and_vocab(tmp_path):
    """Redirects resolve through chains (capped by --max_redirect_hops), loops and missing or disambiguation
    ends count and give no alias; links resolve through redirects, red links and links to a disambiguation
    page are dropped and counted; the alias table counts anchors with their priors and sources; the
    vocabulary is the most-linked entities, ties by title."""
    counters, aliases, vocab = _run_on_pages(tmp_path, "--max_redirect_hops", "2", "--entity_vocab_size", "2")
    assert counters["redirect_loops"] == 3  # A, B, Self
    assert counters["redirect_chains_too_long"] == 1  # H1: 3 hops
    assert counters["links_dropped/red_link"] == 1 and counters["links_dropped/disambiguation"] == 1
    assert counters["redirects_resolved/article"] == 4  # Paree, City of Light, H2, H3
    assert counters["redirects_resolved/disambiguation"] == counters["redirects_resolved/missing"] == 1
    assert aliases == [
        ("City of Light", "Paris", 0, 0.0, ["redirect"]),
        ("France", "France", 1, 1.0, ["anchor", "title"]),
        ("H2", "Paris", 0, 0.0, ["redirect"]), ("H3", "Paris", 0, 0.0, ["redirect"]),
        ("Paree", "Paris", 1, 1.0, ["anchor", "redirect"]),
        ("Paris", "Paris", 2, 2 / 3, ["anchor", "title"]),
        ("Paris", "Paris Hilton", 1, 1 / 3, ["anchor"]),  # Paris Hilton's link to itself counts
        ("Paris Hilton", "Paris Hilton", 1, 1.0, ["anchor", "title"]),
        ("the capital", "Paris", 1, 1.0, ["anchor"]),
    ]
    assert vocab == [(0, "[PAD]", 0), (1, "[UNK]", 0), (2, "[MASK]", 0), (3, "Paris", 4), (4, "Paris Hilton", 2)]


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


def test_write_shards_puts_each_row_in_the_shard_of_its_key(tmp_path):
    rows = [("big", str(i), {"entity_id": i, "entity": f"E{i}", "count": 1}) for i in range(23)]
    spec = ShardSpec("entity_vocab", ("big", "empty"), num_shards=3)
    with BeamTestPipeline() as p:
        written = p | beam.Create(rows) | WriteShards(str(tmp_path), "entity_vocab", spec, lambda r: r["entity_id"], 5)
        assert_that(written | beam.Map(lambda f: f["path"]), equal_to(
            [f"entity_vocab/{part}-0000{i}-of-00003.parquet" for part in ("big", "empty") for i in range(3)]))
    big = sorted((tmp_path / "entity_vocab").glob("big-*"))
    assert sum(pq.read_table(f).num_rows for f in big) == 23
    for f in big:  # a row's shard is a pure function of its shard key
        index = int(f.name.split("-")[1])
        assert all(stable_shard(f"{e}", 3) == index for e in pq.read_table(f).column("entity_id").to_pylist())
