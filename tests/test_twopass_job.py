"""The two-pass job's own parts: the lookup store, the progress lines, and the job's progress on a real run."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipelines.corpus.lookup_store import (
    ALIASES,
    FIRST_ARTICLE,
    RESOLUTION,
    VOCAB_ID,
    LookupStore,
    shard_name,
    stable_shard,
    write_shard,
)
from pipelines.progress import progress_line, read_records
from tests.conftest import dump, needs_shared, run_job_here

RECORDS = [
    (RESOLUTION, "Paris", ("article", "Paris")),
    (RESOLUTION, "Lutetia", ("article", "Paris")),
    (RESOLUTION, "Twin", ("disambiguation", "Twin")),
    (RESOLUTION, "Twin", ("article", "Twin")),  # a title with two pages (a broken dump): the smallest wins
    (ALIASES, "Paris", [((True, -1, True, "City of Light"), ("City of Light", 0.5, False, "City")),
                        ((False, 0, True, "Paris"), ("Paris", 0.9, True, "Paris"))]),
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
    assert [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in one] == \
           [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in two]
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


def test_progress_line_shows_both_passes_rate_and_eta():
    records = [{"pass": 1, "start": 0, "range_bytes": 100, "pages": 50, "bytes_read": 100, "done": True},
               {"pass": 1, "start": 100, "range_bytes": 100, "pages": 10, "bytes_read": 20, "done": False}]
    line = progress_line(records, 200_000_000 // 1_000_000 * 1, elapsed=6.0)
    assert line.startswith("progress: pass 1 (tables): 60 pages") and "pages/s" in line and "ETA" in line
    assert "pass 2" not in line
    assert progress_line([], 200, 3.0).startswith("progress: 3s elapsed")


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
    from pipelines.wiki_mentions import run

    value = "nope" if bad == "--job" else "0"
    assert run(["--input", "x.xml", "--output", str(tmp_path), bad, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad.lstrip("-") in err[0]
