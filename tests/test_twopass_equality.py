"""The corpus job against its oracle, the committed digests of what it makes of every shared dump.

tests/golden/corpus_rows.json holds, per distinct shared dump run with the shared-dump arguments
(tests/conftest.py: SHARED_DUMP_JOB_ARGS), the row count and sha256 of each output's rows in canonical order:
passages (every column, and the split of each; also per page), alias table, vocabulary, entity descriptions,
dead letters; and the counters, less those that describe how the work was done (tests/corpus_equality.py:
COUNTERS_THAT_DIFFER). The file was made with both the two-pass job and the earlier shuffle job, which gave
identical digests; tests/golden/make_corpus_rows.py regenerates it for an intended change of the corpus.
"""
from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest

from tests.conftest import SHARED_DUMP_JOB_ARGS, distinct_dumps, dump, needs_shared, run_job_here
from tests.corpus_equality import COUNTERS_THAT_DIFFER, differences, digest_differences

pytestmark = [needs_shared]

GOLDEN = Path(__file__).resolve().parent / "golden" / "corpus_rows.json"


def test_the_oracle_covers_every_shared_dump():
    assert sorted(json.loads(GOLDEN.read_text())["dumps"]) == distinct_dumps()


@pytest.mark.slow
@pytest.mark.parametrize("name", distinct_dumps())
def test_the_job_makes_the_committed_corpus(name: str, shared_dump_corpus):
    expected = json.loads(GOLDEN.read_text())["dumps"][name]
    out = shared_dump_corpus(name)
    assert digest_differences(expected, out) == {}, (
        "the corpus differs from tests/golden/corpus_rows.json; if the change is intended, regenerate it with "
        "tests/golden/make_corpus_rows.py and review its diff")
    counters = json.loads((out / "stats.json").read_text())["counters"]
    assert counters["articles"] > 0 or name.startswith("enwiki-2020-tiny")
    # The counters left out are the job's own steps', and only those: no join of article text in them.
    assert not any(k.startswith(("volume/JoinPageParts/", "volume/LabelCandidates/", "largest_group/JoinPageParts"))
                   for k in counters)
    assert set(COUNTERS_THAT_DIFFER) == {"volume/", "largest_group/", "lookup/"}


def _graph(tmp_path: Path) -> set[str]:
    """The full labels of the transforms of the job's graph (built, not run)."""
    from pipelines.config import WikiMentionsConfig
    from pipelines.wiki_mentions import build_pipeline, plan_input
    from wikiedm.config import parse_config

    cfg, _ = parse_config(WikiMentionsConfig, ["--input", dump("enwiki-2016-206pages-articles1-multistream.xml.bz2"),
                                               "--output", str(tmp_path), "--read_range_mb", "1"],
                          prog="test")
    site, ranges = plan_input(cfg)
    p = beam.Pipeline()
    build_pipeline(p, cfg, site, ranges, {"runner": "DirectRunner"})
    labels: set[str] = set()

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            labels.add(node.full_label)

        def enter_composite_transform(self, node):
            labels.add(node.full_label)

    p.visit(Visitor())
    return labels


def test_no_article_text_crosses_a_shuffle_in_the_twopass_job(tmp_path: Path):
    """The four shuffles of text of the earlier shuffle job (named here as its steps were) are absent from the
    job's graph; its passages are written by the step that reads them (no GroupByKey between reading and writing)."""
    new = _graph(tmp_path)
    text_shuffles = ("ParseWikiDump/SpreadPages", "LabelMissingMentions/JoinPageParts", "DescribeVocabEntities",
                     "WriteShards/GroupByFile", "LabelMissingMentions", "WriteShards")
    assert not any(label.startswith(s) for label in new for s in text_shuffles)
    assert any(label.startswith("ParseWikiDump/ReadAndClassify") for label in new)  # the labels are full ones
    # The one GroupByKey of pass 2 is the Reshuffle of its units' descriptors (a path and a few numbers each).
    assert {label for label in new if label.startswith("WritePassagesByRange") and "GroupByKey" in label} == {
        label for label in new if label.startswith("WritePassagesByRange/SpreadUnits/") and "GroupByKey" in label} != set()
    # Pass 1 groups run paths by shard (BuildTables); the shuffle job's joins of small records are not in it.
    assert {"BuildTables/ResolveTitlesGroupByShard", "BuildTables/WriteLookupStoreGroupByShard",
            "BuildTables/ChaseRedirectsHop0GroupByShard"} <= new
    assert not any(label.startswith(("ResolveRedirects", "ResolveLinks", "BuildAliasTable", "BuildLookupStore",
                                     "WriteAliasTable")) for label in new)
    pass1_groups = {label for label in new if label.startswith("BuildTables/") and label.endswith("GroupByKey")}
    assert pass1_groups and all("GroupByShard" in label or "GroupLinkedByShard" in label or "CountHistogram" in label
                                or "CollectSelections" in label for label in pass1_groups), pass1_groups


@pytest.mark.slow
def test_tiny_run_buffers_and_other_shard_counts_make_the_same_corpus(shared_dump_corpus, tmp_path: Path):
    """Pass 1's sorted runs spill every few records and are merged across many files, with other store and
    alias shard counts: the corpus is the same rows (only the alias table's file layout differs)."""
    name = "enwiki-2019-196pages-namespaces.xml.bz2"
    out = tmp_path / "small-buffers"
    run_job_here(dump(name), out, *SHARED_DUMP_JOB_ARGS, "--sort_buffer_rows", "40", "--lookup_shards", "3",
                 "--alias_shards", "2")
    assert differences(shared_dump_corpus(name), out) == {}
    counters = json.loads((out / "stats.json").read_text())["counters"]
    assert counters["volume/tables/links/records"] > 40  # the links spilled in several runs
    assert sorted(p.name for p in (out / "alias_table").iterdir()) == [
        "alias_table-00000-of-00002.parquet", "alias_table-00001-of-00002.parquet"]
    assert not (out / "tables").exists() and not (out / "lookup").exists()  # working files removed
