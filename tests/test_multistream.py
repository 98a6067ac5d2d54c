"""Tests of multistream planning: index parsing, range grouping, and range reads equal to a sequential read."""
from __future__ import annotations

import bz2
import html
import re

import pytest

from pipelines.dump import (
    DumpError,
    ReadRange,
    default_index_path,
    iter_pages,
    plan_read_ranges,
    read_multistream_index,
    read_siteinfo,
    scan_multistream_index,
)
from pipelines.records import DeadLetter, RawPage
from tests.test_dump_reader import SITEINFO, page_xml, shared_dump

MULTISTREAM = "enwiki-2016-206pages-articles1-multistream.xml.bz2"
MULTISTREAM_INDEX = "enwiki-2016-206pages-articles1-multistream-index.txt.bz2"
SEQUENTIAL = "enwiki-2016-206pages-articles1.xml.bz2"


def read_ranges(ranges: list[ReadRange]) -> list[RawPage | DeadLetter]:
    return [record for r in ranges for record in iter_pages(r.path, r.start, r.end)]


def write_multistream(tmp_path, titles: list[str], pages_per_stream: int, name="testwiki-multistream"):
    """A multistream dump + index as MediaWiki writes them: header stream, then page streams."""
    head = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">\n' + SITEINFO
    streams = [bz2.compress(head.encode())]
    index_lines = []
    offset = len(streams[0])
    for first in range(0, len(titles), pages_per_stream):
        group = list(enumerate(titles[first:first + pages_per_stream], start=first + 1))
        body = "".join(page_xml(page_id, title, f"text of {title} " * 50) for page_id, title in group)
        if first + pages_per_stream >= len(titles):
            body += "</mediawiki>\n"
        stream = bz2.compress(body.encode())
        index_lines += [f"{offset}:{page_id}:{html.escape(title)}" for page_id, title in group]
        streams.append(stream)
        offset += len(stream)
    dump = tmp_path / f"{name}.xml.bz2"
    dump.write_bytes(b"".join(streams))
    index = tmp_path / f"{name}-index.txt.bz2"
    index.write_bytes(bz2.compress(("\n".join(index_lines) + "\n").encode()))
    return dump, index, [len(s) for s in streams]


# ---------------------------------------------------------------- real multistream excerpt


@pytest.mark.needs_shared
def test_real_index_offsets_match_raw_lines():
    index = shared_dump(MULTISTREAM_INDEX)
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    expected = sorted({int(line.split(":", 1)[0]) for line in lines if line})
    summary = scan_multistream_index(str(index))
    assert summary.offsets == expected == read_multistream_index(str(index))
    assert summary.entries == len(lines) and summary.bad_lines == 0 and not summary.truncated


@pytest.mark.needs_shared
def test_default_index_path_finds_the_companion_index():
    dump = shared_dump(MULTISTREAM)
    assert default_index_path(str(dump)) == str(shared_dump(MULTISTREAM_INDEX))
    assert default_index_path(str(shared_dump(SEQUENTIAL))) is None


@pytest.mark.needs_shared
def test_range_reads_equal_sequential_read_and_the_plain_dump():
    dump = shared_dump(MULTISTREAM)
    index_offsets = read_multistream_index(str(shared_dump(MULTISTREAM_INDEX)))
    ranges = plan_read_ranges(str(dump), default_index_path(str(dump)), target_bytes=1)  # one per stream
    assert len(ranges) == len(index_offsets) > 1
    assert ranges[0].start == index_offsets[0] > 0  # the header stream is not a page range
    assert ranges[-1].end is None
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))  # contiguous, no gap or overlap

    from_ranges = read_ranges(ranges)
    sequential = list(iter_pages(str(dump)))
    assert all(isinstance(r, RawPage) for r in from_ranges)
    assert from_ranges == sequential
    assert len(from_ranges) == bz2.decompress(dump.read_bytes()).count(b"<page>")

    plain = list(iter_pages(str(shared_dump(SEQUENTIAL))))
    assert [(p.page_id, p.title, p.text) for p in from_ranges] == [(p.page_id, p.title, p.text) for p in plain]

    two_ranges = plan_read_ranges(str(dump), default_index_path(str(dump)), target_bytes=dump.stat().st_size // 2)
    assert 1 < len(two_ranges) < len(ranges)
    assert read_ranges(two_ranges) == sequential


@pytest.mark.needs_shared
def test_siteinfo_of_multistream_reads_only_the_header_stream():
    info = read_siteinfo(str(shared_dump(MULTISTREAM)))
    assert info.dbname == "enwiki" and {n.id: n.name for n in info.namespaces}[14] == "Category"


# ---------------------------------------------------------------- synthetic multistream files


def test_synthetic_multistream_plan_groups_whole_streams(tmp_path):
    titles = [f"Title {i}: with colon & ampersand" for i in range(1, 51)]
    dump, index, stream_sizes = write_multistream(tmp_path, titles, pages_per_stream=5)
    assert default_index_path(str(dump)) == str(index)
    target = sum(stream_sizes[1:4])  # about three page streams per range
    ranges = plan_read_ranges(str(dump), str(index), target_bytes=target)
    assert ranges[0].start == stream_sizes[0]
    assert ranges[-1].end is None
    assert all(r.end - r.start >= target for r in ranges[:-1])
    assert all(r.end - r.start < target + max(stream_sizes) for r in ranges[:-1])
    records = read_ranges(ranges)
    assert [(p.page_id, p.title) for p in records] == list(enumerate(titles, start=1))
    assert records == list(iter_pages(str(dump)))


def test_without_index_the_plan_is_one_whole_file_range(tmp_path):
    dump, index, _ = write_multistream(tmp_path, ["A", "B"], pages_per_stream=1)
    assert plan_read_ranges(str(dump)) == [ReadRange(str(dump), 0, None)]  # None: no index wanted
    index.unlink()
    assert default_index_path(str(dump)) is None
    assert plan_read_ranges(str(dump), default_index_path(str(dump))) == [ReadRange(str(dump), 0, None)]


def test_index_with_bad_and_cut_lines(tmp_path):
    dump, index, stream_sizes = write_multistream(tmp_path, [f"T{i}" for i in range(1, 21)], pages_per_stream=4)
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    damaged = lines[:6] + ["not a line", "12x:5:Bad offset", "", "77:notanid:Title"] + lines[6:]
    blob = bz2.compress(("\n".join(damaged) + "\n").encode())
    bad_index = tmp_path / "bad-index.txt.bz2"
    bad_index.write_bytes(blob)
    summary = scan_multistream_index(str(bad_index))
    assert summary.bad_lines == 3 and summary.entries == 20
    assert summary.offsets == sorted({int(line.split(":")[0]) for line in lines})

    cut_index = tmp_path / "cut-index.txt.bz2"
    complete_part = bz2.compress(("\n".join(lines[:8]) + "\n").encode())
    rest = bz2.compress(("\n".join(lines[8:]) + "\n").encode())
    cut_index.write_bytes(complete_part + rest[: len(rest) // 2])
    cut = scan_multistream_index(str(cut_index))
    assert cut.truncated and cut.entries == 8
    assert cut.offsets == sorted({int(line.split(":")[0]) for line in lines[:8]})
    # A cut index still gives a plan that reads every page: the last range runs to EOF.
    ranges = plan_read_ranges(str(dump), str(cut_index), target_bytes=1)
    assert len(ranges) == len(cut.offsets)
    assert [p.page_id for p in read_ranges(ranges)] == list(range(1, 21))


def test_index_is_ignored_for_a_dump_that_is_not_bz2(tmp_path):
    dump = tmp_path / "wiki.xml.gz"
    dump.write_bytes(b"")
    index = tmp_path / "index.txt"
    index.write_text("100:1:A\n")
    assert plan_read_ranges(str(dump), str(index)) == [ReadRange(str(dump), 0, None)]


def test_index_offsets_from_another_dump_are_rejected(tmp_path):
    dump, _, _ = write_multistream(tmp_path, ["A", "B", "C"], pages_per_stream=1)
    wrong_index = tmp_path / "wrong-index.txt"
    wrong_index.write_text("5:1:A\n")
    with pytest.raises(DumpError, match="does not start a bz2 stream"):
        plan_read_ranges(str(dump), str(wrong_index))


def test_range_not_on_a_stream_boundary_is_an_error(tmp_path):
    dump, _, stream_sizes = write_multistream(tmp_path, ["A", "B"], pages_per_stream=1)
    with pytest.raises(DumpError, match="does not start a bz2 stream"):
        iter_pages(str(dump), stream_sizes[0] + 3, None)


def test_range_ending_inside_a_stream_reports_truncation(tmp_path):
    dump, _, stream_sizes = write_multistream(tmp_path, ["A", "B", "C"], pages_per_stream=1)
    start = stream_sizes[0]
    records = list(iter_pages(str(dump), start, start + stream_sizes[1] + 20))
    assert [p.title for p in records if isinstance(p, RawPage)] == ["A"]
    assert records[-1].reason == "truncated_compressed"
    assert re.search(rf"\[{start}:{start + stream_sizes[1] + 20}\]$", records[-1].source)


def test_middle_range_does_not_expect_document_end(tmp_path):
    dump, _, stream_sizes = write_multistream(tmp_path, ["A", "B", "C"], pages_per_stream=1)
    start, end = stream_sizes[0], stream_sizes[0] + stream_sizes[1]
    assert [p.title for p in iter_pages(str(dump), start, end)] == ["A"]
