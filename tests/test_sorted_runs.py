"""Sorted run files (pipelines.corpus.sorted_runs): what pass 1 of the two-pass job hands between its steps."""
from __future__ import annotations

import os
import random
from collections import defaultdict
from pathlib import Path

import pytest

from pipelines.corpus import sorted_runs
from pipelines.corpus.sorted_runs import RunWriter, grouped, merged, stable_shard
from wikiedm import storage


def _records(n: int, seed: int = 0) -> list[tuple]:
    rng = random.Random(seed)
    keys = [f"title {i}" for i in range(n // 3 + 1)] + ["Ünïcode ✓", "a", ""]
    return [(rng.choice(keys), rng.randrange(3), (rng.randrange(100), "v" * rng.randrange(4))) for _ in range(n)]


def _write(tmp_path: Path, records, shards: int, buffer: int, producer: str = "p") -> RunWriter:
    writer = RunWriter(str(tmp_path / "runs"), shards, producer, storage.create, storage.join, buffer)
    for key, tag, value in records:
        writer.add(key, tag, value)
    writer.close()
    return writer


def test_runs_are_partitioned_by_key_and_sorted(tmp_path: Path):
    records = _records(500)
    writer = _write(tmp_path, records, shards=4, buffer=64)
    assert writer.records == len(records) and writer.bytes == sum(os.path.getsize(p) for _s, p in writer.runs)
    assert len({p for _s, p in writer.runs}) == len(writer.runs) > 4  # the buffer spilled several times
    for shard, path in writer.runs:
        with open(path, "rb") as fh:
            run = list(sorted_runs.read_run(fh))
        assert run == sorted(run, key=sorted_runs.RECORD_ORDER)
        assert {stable_shard(key, 4) for key, _t, _v in run} == {shard}
        assert path.startswith(str(tmp_path / "runs" / f"{shard:05d}"))


def test_merging_a_shards_runs_gives_each_key_once_with_its_records_in_tag_order(tmp_path: Path):
    records = _records(2000, seed=1)
    writers = [_write(tmp_path, records[i::3], shards=3, buffer=50, producer=f"range-{i}") for i in range(3)]
    expected = defaultdict(list)
    for key, tag, value in records:
        expected[key].append((tag, value))
    seen = {}
    for shard in range(3):
        paths = [p for w in writers for s, p in w.runs if s == shard]
        keys = []
        for key, recs in grouped(paths, storage.open_read):
            recs = [(t, v) for _k, t, v in recs]
            assert [t for t, _v in recs] == sorted(t for t, _v in recs)
            seen[key] = sorted(recs)
            keys.append(key)
        assert keys == sorted(keys)
    assert seen == {k: sorted(v) for k, v in expected.items()}


def test_more_runs_than_can_be_open_are_merged_in_rounds(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sorted_runs, "MAX_OPEN_RUNS", 3)
    records = _records(400, seed=2)
    writer = _write(tmp_path, records, shards=1, buffer=10)
    assert len(writer.runs) == 40
    out = list(merged([p for _s, p in writer.runs], storage.open_read, tmp_dir=str(tmp_path)))
    assert [r[:2] for r in out] == sorted(r[:2] for r in records)
    assert sorted(out, key=repr) == sorted(records, key=repr)
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]  # the rounds' temporary runs are gone


@pytest.mark.parametrize("max_open", [2, 4, 7])
def test_rounds_merge_only_the_smallest_excess_runs_and_keep_ties_in_run_order(tmp_path: Path, monkeypatch,
                                                                                max_open: int):
    """With more runs than MAX_OPEN_RUNS, a round merges only as many consecutive runs as are too many, those
    with the fewest bytes, not every run: most records are read once. Ties keep sorted(paths)' order."""
    import heapq

    monkeypatch.setattr(sorted_runs, "MAX_OPEN_RUNS", max_open)
    rng = random.Random(max_open)
    runs, paths = [], []
    for i in range(9):
        records = [(rng.choice(["hub", "a", "b", "zz"]), rng.randrange(2), (i, n))
                   for n in range([50, 40, 3, 2, 4, 60, 1, 30, 45][i])]
        records.sort(key=sorted_runs.RECORD_ORDER)
        paths.append(str(tmp_path / f"run-{i}.run"))
        with open(paths[-1], "wb") as fh:
            sorted_runs.write_run(records, fh)
        runs.append(records)
    written = []
    write_run = sorted_runs.write_run

    def counting_write_run(records, fh):
        written.extend(records)
        return write_run(records, fh)

    monkeypatch.setattr(sorted_runs, "write_run", counting_write_run)
    expected = list(heapq.merge(*runs, key=sorted_runs.RECORD_ORDER))
    assert list(merged(list(reversed(paths)), storage.open_read, tmp_dir=str(tmp_path))) == expected
    # 9 runs, 7 open at most: one round of the 3 smallest consecutive runs (2-4: 9 records); 4 open: runs 1-4
    # (49 records), then of the 6 left the 3 last (6-8); 2 open: rounds until two are left
    if max_open == 7:
        assert sorted(written) == sorted(runs[2] + runs[3] + runs[4])
    elif max_open == 4:
        assert sorted(written) == sorted(r for run in runs[1:5] + runs[6:] for r in run)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(os.path.basename(p) for p in paths)


def test_a_writer_needs_a_shard(tmp_path: Path):
    with pytest.raises(ValueError, match="shards"):
        RunWriter(str(tmp_path), 0, "p", storage.create)


def test_the_merge_keeps_ties_in_run_order_across_batches_as_a_heap_merge_does(tmp_path: Path, monkeypatch):
    """merged()'s order is (key, tag), ties in run order (the consumers' tables rely on it), also for a key
    with more records than a batch (a hub's links): a faster merge must keep it."""
    import heapq

    monkeypatch.setattr(sorted_runs, "BATCH_RECORDS", 3)
    rng = random.Random(3)
    runs = []
    for i in range(5):
        records = [(rng.choice(["hub", "a", "b", "zz"]), rng.randrange(2), (rng.randrange(1000), i)) for _ in range(rng.randrange(40))]
        records.sort(key=sorted_runs.RECORD_ORDER)
        path = tmp_path / f"run-{i}.run"
        with open(path, "wb") as fh:
            sorted_runs.write_run(records, fh)
        runs.append(records)
    expected = list(heapq.merge(*runs, key=sorted_runs.RECORD_ORDER))
    assert list(merged([str(tmp_path / f"run-{i}.run") for i in range(5)], storage.open_read)) == expected


def test_a_spill_sorts_like_a_stable_sort_on_key_and_tag(tmp_path: Path):
    records = [(key, tag, n) for n, (key, tag) in enumerate(
        [("b", 1), ("a", 2), ("b", 0), ("a", 2), ("a", 0), ("b", 1), ("c", 5)])]
    writer = _write(tmp_path, records, shards=1, buffer=100)
    with open(writer.runs[0][1], "rb") as fh:
        assert list(sorted_runs.read_run(fh)) == sorted(records, key=sorted_runs.RECORD_ORDER)


@pytest.mark.parametrize("seed", range(6))
def test_the_block_merge_gives_a_heap_merges_order_and_whole_keys_per_block(tmp_path: Path, monkeypatch, seed: int):
    """merge_batches against heapq.merge on random runs: empty runs, a hub key over many batches of one run,
    keys in one run only, batches of 1 to 5 records."""
    import heapq

    rng = random.Random(seed)
    monkeypatch.setattr(sorted_runs, "BATCH_RECORDS", rng.randrange(1, 6))
    keys = ["", "a", "hub", "m", "zz", "Ω"] + [f"k{i}" for i in range(rng.randrange(1, 30))]
    runs = []
    for i in range(rng.randrange(2, 9)):
        records = [(rng.choice(keys), rng.randrange(3), (i, n)) for n in range(rng.choice([0, 1, 5, 40, 120]))]
        if rng.random() < 0.5:
            records += [("hub", 1, (i, -n)) for n in range(rng.randrange(30))]
        records.sort(key=sorted_runs.RECORD_ORDER)
        path = tmp_path / f"run-{i}.run"
        with open(path, "wb") as fh:
            sorted_runs.write_run(records, fh)
        runs.append(records)
    paths = [str(tmp_path / f"run-{i}.run") for i in range(len(runs))]
    expected = list(heapq.merge(*runs, key=sorted_runs.RECORD_ORDER))
    blocks = list(sorted_runs.merged_blocks(paths, storage.open_read))
    assert [r for block in blocks for r in block] == expected
    keys_seen = [{r[0] for r in block} for block in blocks]
    assert all(not (a & b) for i, a in enumerate(keys_seen) for b in keys_seen[i + 1:])  # a key in one block


def test_a_cut_run_file_is_an_error(tmp_path: Path):
    path = tmp_path / "run"
    with open(path, "wb") as fh:
        sorted_runs.write_run([("a", 0, 1), ("b", 0, 2)], fh)
    path.write_bytes(path.read_bytes()[:-3])
    with open(path, "rb") as fh, pytest.raises(ValueError, match="truncated"):
        list(sorted_runs.read_run(fh))


def test_a_value_marshal_cannot_write_is_an_error_not_a_changed_value(tmp_path: Path):
    import enum

    class Kind(str, enum.Enum):
        ARTICLE = "article"

    with open(tmp_path / "run", "wb") as fh, pytest.raises(ValueError):
        sorted_runs.write_run([("a", 0, Kind.ARTICLE)], fh)


def test_a_reader_that_returns_short_reads_reads_the_same_records(tmp_path: Path):
    import io

    class Trickle(io.RawIOBase):  # at most 7 bytes per read, like a raw network stream may return
        def __init__(self, data: bytes) -> None:
            self.data, self.at = data, 0

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            n = 7 if n < 0 else min(n, 7)
            chunk = self.data[self.at:self.at + n]
            self.at += len(chunk)
            return chunk

    records = sorted(_records(300, seed=9), key=sorted_runs.RECORD_ORDER)
    with open(tmp_path / "run", "wb") as fh:
        sorted_runs.write_run(records, fh)
    assert list(sorted_runs.read_run(Trickle((tmp_path / "run").read_bytes()))) == records
