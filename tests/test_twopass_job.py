"""The two-pass job's own parts: the lookup store, the progress lines, and the job's progress on a real run."""
from __future__ import annotations

import hashlib
import json
import marshal
from pathlib import Path

import pytest

from pipelines.corpus.labels import LabelConfig, pack_alias, prepare_page
from pipelines.corpus.lookup_store import (
    ALIASES,
    FIRST_ARTICLE,
    RESOLUTION,
    VOCAB_ID,
    LookupStore,
    heads_path,
    open_store,
    shard_name,
    stable_shard,
    write_shard,
)
from pipelines.corpus.sorted_runs import MARSHAL_VERSION
from pipelines.progress import progress_line, read_records
from tests.conftest import dump, needs_shared, run_job_here


def _data(packed) -> bytes:
    """A packed alias as the store's ALIASES records hold it."""
    return marshal.dumps(packed, MARSHAL_VERSION)


RECORDS = [
    (RESOLUTION, "Paris", ("article", "Paris")),
    (RESOLUTION, "Lutetia", ("article", "Paris")),
    (RESOLUTION, "Twin", ("disambiguation", "Twin")),
    (RESOLUTION, "Twin", ("article", "Twin")),  # a title with two pages (a broken dump): the smallest wins
    (ALIASES, "Paris", [((True, -1, True, "City of Light"), _data(pack_alias("City of Light", 0.5, False, LabelConfig()))),
                        ((False, 0, True, "Paris"), _data(pack_alias("Paris", 0.9, True, LabelConfig())))]),
    (VOCAB_ID, "Paris", 3),
    (FIRST_ARTICLE, "Paris", 40),
    (FIRST_ARTICLE, "Paris", 12),
]


def _build(tmp_path: Path, records, shards: int = 2) -> list[str]:
    tmp_path.mkdir(parents=True)
    paths = []
    for index in range(shards):
        path = str(tmp_path / shard_name(index, shards))
        write_shard([r for r in records if stable_shard(r[1], shards) == index], path, sort_buffer=2)
        paths.append(path)
    return paths


def test_lookup_store_merges_records_per_title_and_is_deterministic(tmp_path: Path):
    one = _build(tmp_path / "a", RECORDS)
    two = _build(tmp_path / "b", list(reversed(RECORDS)))  # any order in: the same bytes out (sorted runs)
    files = [(p, heads_path(p)) for p in one], [(p, heads_path(p)) for p in two]
    assert [hashlib.sha256(Path(f).read_bytes()).hexdigest() for pair in files[0] for f in pair] == \
           [hashlib.sha256(Path(f).read_bytes()).hexdigest() for pair in files[1] for f in pair]
    store = LookupStore(one)
    rows = store.get(["Paris", "Lutetia", "Twin", "Nowhere"])
    assert "Nowhere" not in rows  # a red link has no row
    status, entity, aliases, vocab_id, first = rows["Paris"]
    assert (status, entity, vocab_id, first) == ("article", "Paris", 3, 12)
    assert [a[0] for a in aliases.ranked] == ["Paris", "City of Light"]  # best rank first
    assert rows["Lutetia"][:2] == ("article", "Paris") and rows["Lutetia"][2:] == (None, None, None)
    assert rows["Twin"][:2] == ("article", "Twin")
    again = store.get(["Paris", "Nowhere"])  # from the process's cache
    assert again.keys() == {"Paris"} and store.cache_hits == 2


def test_stored_aliases_give_each_page_what_ranked_aliases_give(tmp_path: Path):
    """The store keeps an entity's first aliases in its row and the rest by (entity, alias): a page gets the
    head plus its own anchor texts in rank order, as RankedAliases.for_page gives them from the whole list."""
    from pipelines.corpus.candidates import RankedAliases

    ranked = [((i,), pack_alias(f"alias {i}", 0.1, False, LabelConfig())) for i in range(40)]
    records = [(ALIASES, "Hub", [(rank, _data(packed)) for rank, packed in reversed(ranked)]),
               (RESOLUTION, "Hub", ("article", "Hub"))]
    whole = RankedAliases([packed for _rank, packed in ranked])
    for head in (4, 10, None):
        path = str(tmp_path / f"head-{head}.sqlite")
        write_shard(records, path, head_aliases=head)
        stored = LookupStore([path]).get(["Hub"])["Hub"][2]
        assert len(stored.head) == (head or 40) and stored.ranked == whole.ranked
        for top in (4, 10):
            for anchors in ((), ("alias 2",), ("alias 30", "alias 12", "nope", None), ("alias 7", "alias 39")):
                assert stored.for_page(top, anchors) == whole.for_page(top, anchors), (head, top, anchors)
                # With the page: only the aliases it may hold, decoded from the store's gate index.
                page = prepare_page("We saw alias 2, then alias 30 and Alias 7; alias is a word.", LabelConfig())
                gated = stored.for_page(top, anchors, page)
                assert gated == whole.for_page(top, anchors, page) == tuple(
                    a for a in whole.for_page(top, anchors) if a[0] in ("alias 2", "alias 30", "alias 7")), gated


def test_stored_aliases_query_extra_aliases_only_for_anchors_outside_the_head(tmp_path: Path):
    """A page that links a hub only with head names (most pages) asks SQLite nothing: its anchors cannot be
    extra aliases. The other anchors are still looked up."""
    ranked = [((i,), _data(pack_alias(f"alias {i}", 0.1, False, LabelConfig()))) for i in range(40)]
    path = str(tmp_path / "hub.sqlite")
    write_shard([(ALIASES, "Hub", ranked), (RESOLUTION, "Hub", ("article", "Hub"))], path, head_aliases=10)
    stored = LookupStore([path]).get(["Hub"])["Hub"][2]
    asked = []

    class RecordingDb:
        def __init__(self, db) -> None:
            self.db = db

        def execute(self, sql, parameters=()):
            asked.append(parameters)
            return self.db.execute(sql, parameters)

    stored._db = RecordingDb(stored._db)
    page = prepare_page("We saw alias 2, then alias 30 and alias 7.", LabelConfig())
    assert [a[0] for a in stored.for_page(10, {"alias 2", "alias 7"}, page)] == ["alias 2", "alias 7"]
    assert asked == []
    assert [a[0] for a in stored.for_page(10, {"alias 2", "alias 30"}, page)] == ["alias 2", "alias 7", "alias 30"]
    assert asked == [["Hub", "alias 30"]]


def test_lookup_store_reads_heads_beside_its_sqlite_file_and_refuses_a_truncated_one(tmp_path: Path):
    """A shard is two files: its heads (each entity's head aliases, located by its title row) beside the SQLite
    file. open_store copies both of a shard that is not local; a truncated heads file is a clear error."""
    paths = _build(tmp_path / "a", RECORDS)
    paris = LookupStore(paths).get(["Paris"])["Paris"][2]
    assert [a[0] for a in paris.head] == ["Paris", "City of Light"]
    copied = []

    def copy_remote(path, local):
        copied.append(Path(local).name)
        Path(local).write_bytes(Path(path.removeprefix("remote:")).read_bytes())

    store = open_store([f"remote:{p}" for p in paths], copy_remote)
    assert sorted(copied) == sorted(n for p in paths for n in (Path(p).name, Path(heads_path(p)).name))
    assert [a[0] for a in store.get(["Paris"])["Paris"][2].head] == ["Paris", "City of Light"]
    shard = next(p for p in paths if stable_shard("Paris", 2) == paths.index(p))
    Path(heads_path(shard)).write_bytes(Path(heads_path(shard)).read_bytes()[:-1])
    with pytest.raises(ValueError, match="heads file .* is truncated"):
        LookupStore(paths).get(["Paris"])


def test_lookup_store_cache_keeps_part_of_a_cycle_bigger_than_itself(tmp_path: Path):
    """Pages that cycle over more titles than the cache holds: plain LRU would push each row out before it is
    asked again (no hits); the cache's admission keeps a fixed part of them, and the rows stay the same."""
    titles = [f"T{i}" for i in range(6)]
    path = str(tmp_path / "cycle.sqlite")
    write_shard([(RESOLUTION, t, ("article", t)) for t in titles], path)
    store = LookupStore([path], cache_titles=4)
    for _round in range(5):
        for title in titles:
            assert store.get([title]) == {title: ("article", title, None, None, None)}
    assert store.lookups == 30 and store.cache_hits >= 12, store.cache_hits  # 4 of 6 from round 2 on: 16


def test_progress_line_shows_both_passes_rate_and_eta():
    records = [{"pass": 1, "start": 0, "range_bytes": 100, "pages": 50, "bytes_read": 100, "done": True},
               {"pass": 1, "start": 100, "range_bytes": 100, "pages": 10, "bytes_read": 20, "done": False}]
    line = progress_line(records, 200_000_000 // 1_000_000 * 1, elapsed=6.0)
    assert line.startswith("progress: pass 1 (tables): 60 pages") and "pages/s" in line and "ETA" in line
    assert "pass 2" not in line
    assert progress_line([], 200, 3.0).startswith("progress: 3s elapsed")


def test_progress_printer_keeps_the_last_records_after_the_folder_goes(tmp_path: Path):
    """The job removes OUT/progress before the printer stops: the last line still shows what was read."""
    from pipelines.progress import ProgressPrinter, RangeProgress

    lines = []
    printer = ProgressPrinter(str(tmp_path / "progress"), 100, 3600, lines.append).start()
    RangeProgress(str(tmp_path / "progress"), 2, 0, 100, pages=7, bytes_read=100, done=True).write()
    printer._print()
    for path in (tmp_path / "progress").iterdir():
        path.unlink()
    printer.stop()
    assert len(lines) == 2 and all("pass 2 (passages): 7 pages" in line for line in lines), lines


@needs_shared
def test_a_local_run_prints_progress_and_leaves_no_working_files(tmp_path: Path):
    out = tmp_path / "out"
    printed = run_job_here(dump("enwiki-2019-196pages-namespaces.xml.bz2"), out, "--progress_every_s", "0.2")
    lines = [line for line in printed.splitlines() if line.startswith("progress: ")]
    assert lines, printed[-2000:]
    assert any("pass 1 (tables)" in line and "pages/s" in line for line in lines)
    assert any("pass 2 (passages)" in line for line in lines) or "no page read yet" not in lines[-1]
    assert not read_records(str(out / "progress"))  # removed with the other working files
    assert not any((out / "lookup").glob("*")) and json.loads((out / "manifest.json").read_text())["job"]["job"] == "twopass"


@pytest.mark.parametrize("bad", ["--job", "--lookup_shards"])
def test_bad_job_options_are_one_line_errors(bad: str, tmp_path: Path, capsys):
    """--lookup_shards 0 is refused; --job (the choice of the earlier versions' two jobs) is no option now."""
    from pipelines.wiki_mentions import run

    value = "shuffle" if bad == "--job" else "0"
    dump = tmp_path / "x.xml"
    dump.write_text("<mediawiki/>")
    assert run(["--input", str(dump), "--output", str(tmp_path / "out"), bad, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad.lstrip("-") in err[0]


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize("variant", [("--cache_chunk_articles", "7"), ("--article_cache", "false")],
                         ids=["chunks_of_7_articles", "extract_again"])
def test_pass2_units_do_not_change_the_corpus(variant, shared_dump_corpus, tmp_path: Path):
    """A single-stream dump cut into many pass-2 units (chunks of 7 cached articles), or read and extracted
    again by pass 2 (no cache), makes the same rows as the default run; only the file layout differs."""
    from tests.conftest import SHARED_DUMP_JOB_ARGS
    from tests.corpus_equality import differences

    name = "enwiki-2019-196pages-namespaces.xml.bz2"
    default = shared_dump_corpus(name)
    out = tmp_path / "variant"
    run_job_here(dump(name), out, *SHARED_DUMP_JOB_ARGS, *variant)
    assert differences(default, out) == {}
    counters = json.loads((out / "stats.json").read_text())["counters"]
    units = counters["volume/WritePassagesByRange/units"]
    expected = -(-counters["articles"] // 7) if variant[0] == "--cache_chunk_articles" else 1  # one range
    assert units == expected and (units > 1 or variant[0] == "--article_cache")
    assert len(list((out / "passages").glob("train-*.parquet"))) == units
    assert not (out / "article_cache").exists() or not any((out / "article_cache").iterdir())


def test_alias_steps_hide_the_older_heap_from_the_collector_and_give_it_back(monkeypatch):
    """BuildAliasRows and WriteLookupStore freeze the heap made before them (full collector passes over it
    were most of their CPU) and unfreeze it after, even on an error; a heap frozen by someone else stays so."""
    import gc

    from pipelines import worker_gc
    from pipelines.transforms.tables import _young_objects_only

    gc.unfreeze()  # a job run earlier in this process froze the heap at its first bundle (pipelines.worker_gc)
    monkeypatch.setattr(worker_gc, "_froze", False)
    assert gc.get_freeze_count() == 0
    with _young_objects_only():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with pytest.raises(KeyError), _young_objects_only():
        raise KeyError("x")
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with _young_objects_only():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
