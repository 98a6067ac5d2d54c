"""Tests of the dump reader (pipelines.dump): real dump excerpts and synthetic damaged files.

Expected values come from an independent parse: the whole decompressed file
fed to ElementTree's pull parser (which also copes with the truncated ukwiki
file), or regex counts on the raw XML.
"""
from __future__ import annotations

import bz2
import codecs
import gzip
import html
import lzma
import os
import random
import re
import string
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.dump import (
    DumpError,
    DumpNotFoundError,
    NotAMediaWikiDumpError,
    ReadStats,
    TruncatedCompressedError,
    iter_pages,
    iter_pages_from_xml_chunks,
    read_siteinfo,
)
from pipelines.dump.splitter import PageSplitter
from pipelines.records import DeadLetter, RawPage

# ---------------------------------------------------------------- shared dumps


def wikidumps_dir() -> Path:
    """../shared/wikidumps beside the repository, or $WIKIDUMPS_DIR."""
    configured = os.environ.get("WIKIDUMPS_DIR")
    if configured:
        return Path(configured).resolve()
    return (Path(__file__).resolve().parents[1] / ".." / "shared" / "wikidumps").resolve()


def shared_dump(name: str) -> Path:
    path = wikidumps_dir() / name
    if not path.exists():
        pytest.skip(f"shared dump excerpt {name} not found in {wikidumps_dir()} (set WIKIDUMPS_DIR)")
    return path


SHARED_DUMPS = [
    "enwiki-2020-tiny-7pages.xml.bz2",
    "enwiki-2019-196pages-namespaces.xml.bz2",
    "enwiki-2016-206pages-articles1.xml.bz2",
    "enwiki-2016-206pages-articles1-multistream.xml.bz2",
    "enwiki-2019-11pages-partial.xml",
    "simplewiki-2019-7pages.xml.bz2",
    "enwiki-pear-1page-schema0.10.xml",
    "ukwiki-2023-first100k-lines-truncated.xml.xz",
    "enwiki-5pages-tables-no-siteinfo.xml.bz2",
]


def decompress_whole(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".bz2":
        return bz2.decompress(data)
    if path.suffix == ".xz":
        return lzma.decompress(data)
    return data


@dataclass
class ExpectedPage:
    page_id: int
    ns: int
    title: str
    is_redirect: bool
    text: str


def independent_pages(xml: bytes) -> tuple[list[ExpectedPage], bool]:
    """Pages closed in ``xml`` by ElementTree's pull parser; True if the document is complete."""
    parser = ET.XMLPullParser(events=("end",))
    parser.feed(xml)
    pages = []
    for _, element in parser.read_events():
        if element.tag.rsplit("}", 1)[-1] != "page":
            continue
        children = {child.tag.rsplit("}", 1)[-1]: child for child in element}
        revisions = [child for child in element if child.tag.endswith("revision")]
        text = ""
        if revisions:
            text_element = [c for c in revisions[-1] if c.tag.endswith("text")][0]
            text = text_element.text or ""
        pages.append(ExpectedPage(int(children["id"].text), int(children["ns"].text),
                                  children["title"].text, "redirect" in children, text))
    try:
        parser.close()
        complete = True
    except ET.ParseError:
        complete = False
    return pages, complete


@pytest.mark.needs_shared
@pytest.mark.parametrize("name", SHARED_DUMPS)
def test_shared_dump_reads_every_page(name):
    path = shared_dump(name)
    xml = decompress_whole(path)
    expected, complete = independent_pages(xml)
    stats = ReadStats()
    records = list(iter_pages(str(path), stats=stats))
    pages = [r for r in records if isinstance(r, RawPage)]
    dead = [r for r in records if isinstance(r, DeadLetter)]

    assert len(pages) == len(expected) == stats.pages
    assert [p.page_id for p in pages] == [e.page_id for e in expected]
    assert [p.title for p in pages] == [e.title for e in expected]
    assert [p.ns for p in pages] == [e.ns for e in expected]
    assert [p.text for p in pages] == [e.text for e in expected]
    assert sum(p.redirect is not None for p in pages) == sum(e.is_redirect for e in expected)
    # Raw counts, independent of any XML parser.
    assert sum(p.redirect is not None for p in pages) == len(re.findall(rb"<redirect[\s/>]", xml))
    if complete:
        assert len(pages) == len(re.findall(rb"<page>", xml))
        assert dead == []
    else:
        assert len(pages) == len(re.findall(rb"<page>", xml)) - 1  # the cut one


@pytest.mark.needs_shared
def test_truncated_ukwiki_yields_complete_pages_then_one_truncated_record():
    path = shared_dump("ukwiki-2023-first100k-lines-truncated.xml.xz")
    xml = lzma.decompress(path.read_bytes())
    records = list(iter_pages(str(path)))
    assert all(isinstance(r, RawPage) for r in records[:-1])
    last = records[-1]
    assert isinstance(last, DeadLetter)
    assert (last.stage, last.reason) == ("read", "truncated_xml")
    cut_page = xml[xml.rfind(b"<page>"):]
    assert last.page_id == int(re.search(rb"<id>(\d+)</id>", cut_page).group(1))
    assert f"last complete page id={records[-2].page_id}" in last.detail
    assert str(path) in last.source


@pytest.mark.needs_shared
def test_no_siteinfo_dump_still_reads_its_pages_and_reports_defaults():
    path = shared_dump("enwiki-5pages-tables-no-siteinfo.xml.bz2")
    info = read_siteinfo(str(path))
    assert info.from_dump is False
    assert info.namespaces == ()
    assert info.dbname == ""
    assert len([r for r in iter_pages(str(path)) if isinstance(r, RawPage)]) == 5


@pytest.mark.needs_shared
def test_siteinfo_of_enwiki():
    path = shared_dump("enwiki-2020-tiny-7pages.xml.bz2")
    info = read_siteinfo(str(path))
    raw = bz2.decompress(path.read_bytes())
    assert info.from_dump
    assert (info.dbname, info.sitename, info.case) == ("enwiki", "Wikipedia", "first-letter")
    assert info.base == "https://en.wikipedia.org/wiki/Main_Page"
    assert info.generator.startswith("MediaWiki ")
    assert info.schema_version == "0.10"
    assert info.language == "en"
    names = {ns.id: ns.name for ns in info.namespaces}
    assert names[6] == "File" and names[14] == "Category" and names[0] == "" and names[-2] == "Media"
    assert len(info.namespaces) == raw.count(b"<namespace ")
    assert {ns.id: ns.case for ns in info.namespaces}[2302] == "case-sensitive"


@pytest.mark.needs_shared
def test_siteinfo_of_simplewiki_and_ukwiki():
    simple = read_siteinfo(str(shared_dump("simplewiki-2019-7pages.xml.bz2")))
    assert simple.dbname == "simplewiki" and {n.id: n.name for n in simple.namespaces}[14] == "Category"
    uk = read_siteinfo(str(shared_dump("ukwiki-2023-first100k-lines-truncated.xml.xz")))
    names = {n.id: n.name for n in uk.namespaces}
    assert (uk.dbname, uk.sitename, uk.language) == ("ukwiki", "Вікіпедія", "uk")
    assert names[6] == "Файл" and names[14] == "Категорія" and names[10] == "Шаблон"


@pytest.mark.needs_shared
def test_plain_xml_dump_with_schema_0_10():
    path = shared_dump("enwiki-pear-1page-schema0.10.xml")
    (page,) = list(iter_pages(str(path)))
    assert page.title == "Pear" and page.ns == 0 and page.redirect is None
    assert page.text.count("[[") >= 174
    assert read_siteinfo(str(path)).schema_version == "0.10"


# ---------------------------------------------------------------- synthetic dumps

SITEINFO = """  <siteinfo>
    <sitename>Testpedia</sitename>
    <dbname>testwiki</dbname>
    <base>https://test.example.org/wiki/Main</base>
    <generator>MediaWiki 1.42</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="6" case="first-letter">Файл</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""


def page_xml(page_id, title, text="body", *, ns=0, redirect=None, revisions=None, id_text=None) -> str:
    """One <page> element; ``revisions`` is a list of (revision_id, timestamp, text)."""
    revisions = revisions or [(page_id * 10, "2024-01-01T00:00:00Z", text)]
    parts = [f"  <page>\n    <title>{html.escape(title, quote=False)}</title>\n"]
    if ns is not None:
        parts.append(f"    <ns>{ns}</ns>\n")
    parts.append(f"    <id>{page_id if id_text is None else id_text}</id>\n")
    if redirect is not None:
        parts.append(f'    <redirect title="{html.escape(redirect)}" />\n')
    for revision_id, timestamp, body in revisions:
        parts.append(
            f"    <revision>\n      <id>{revision_id}</id>\n      <timestamp>{timestamp}</timestamp>\n"
            f'      <text bytes="{len(body)}" xml:space="preserve">{html.escape(body, quote=False)}</text>\n'
            "    </revision>\n"
        )
    parts.append("  </page>\n")
    return "".join(parts)


def dump_xml(pages: list[str], *, schema="0.10", siteinfo=True, closed=True) -> str:
    xmlns = f' xmlns="http://www.mediawiki.org/xml/export-{schema}/"' if schema else ""
    head = f'<mediawiki{xmlns} version="{schema}" xml:lang="en">\n' + (SITEINFO if siteinfo else "")
    return head + "".join(pages) + ("</mediawiki>\n" if closed else "")


def simple_pages(count: int, *, text_size: int = 40, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + " ÄÖÜ日本<>&"
    return [page_xml(i, f"Page {i} ünïcode", "".join(rng.choice(alphabet) for _ in range(text_size)))
            for i in range(1, count + 1)]


def read_all(path, **kwargs) -> list[RawPage | DeadLetter]:
    return list(iter_pages(str(path), **kwargs))


def pages_of(records) -> list[RawPage]:
    return [r for r in records if isinstance(r, RawPage)]


def dead_of(records) -> list[DeadLetter]:
    return [r for r in records if isinstance(r, DeadLetter)]


def test_compressed_formats_read_like_plain_xml(tmp_path):
    xml = dump_xml(simple_pages(30)).encode()
    half = len(xml) // 2
    zstd = zstandard.ZstdCompressor()
    variants = {
        "plain.xml": xml,
        "multi-member.xml.gz": gzip.compress(xml[:half]) + gzip.compress(xml[half:]),
        "padded.xml.gz": gzip.compress(xml) + b"\x00" * 512,  # tape-style zero padding
        "streams.xml.xz": lzma.compress(xml[:half]) + lzma.compress(xml[half:]),
        "frames.xml.zst": zstd.compress(xml[:half]) + zstd.compress(xml[half:]),
        "multistream.xml.bz2": bz2.compress(xml[:half]) + bz2.compress(xml[half:]),
        "gzip-without-extension.dump": gzip.compress(xml),  # found by its magic bytes
    }
    expected, complete = independent_pages(xml)
    assert complete and len(expected) == 30
    for name, blob in variants.items():
        path = tmp_path / name
        path.write_bytes(blob)
        records = read_all(path)
        assert dead_of(records) == [], name
        assert [(p.page_id, p.title, p.text) for p in records] == [(e.page_id, e.title, e.text) for e in expected], name


def test_bz2_cut_in_half_delivers_pages_before_the_cut(tmp_path):
    rng = random.Random(1)
    pages = [page_xml(i, f"P{i}", "".join(rng.choice(string.ascii_letters) for _ in range(3000)))
             for i in range(1, 301)]
    xml = dump_xml(pages).encode()
    compressed = bz2.compress(xml, compresslevel=1)  # 100 kB blocks: several before the cut
    cut = compressed[: len(compressed) // 2]
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(cut)
    # Independently: what the stdlib can decode from the cut bytes, and the pages closed in it.
    decodable = bz2.BZ2Decompressor().decompress(cut)
    closed_pages = decodable.count(b"</page>")
    assert 0 < closed_pages < 300

    stats = ReadStats()
    records = read_all(path, stats=stats)
    pages = pages_of(records)
    assert [p.page_id for p in pages] == list(range(1, closed_pages + 1))
    (dead,) = dead_of(records)
    assert records[-1] is dead
    assert dead.reason == "truncated_compressed"
    assert dead.page_id == closed_pages + 1  # the page the cut interrupted
    assert f"last complete page id={closed_pages}" in dead.detail
    assert str(path) in dead.source
    assert stats.dead_letters == {"truncated_compressed": 1}


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, zstandard.ZstdCompressor().compress])
def test_other_codecs_cut_short_are_reported(tmp_path, compress):
    xml = dump_xml(simple_pages(200, text_size=3000)).encode()  # several zstd blocks / xz chunks
    blob = compress(xml)
    path = tmp_path / "cut.xml.gz"  # extension is overridden by the magic bytes
    path.write_bytes(blob[: len(blob) * 2 // 3])
    records = read_all(path)
    assert records[-1].reason == "truncated_compressed"
    pages = pages_of(records)
    assert [p.page_id for p in pages] == list(range(1, len(pages) + 1))


def test_file_cut_before_anything_decodes_is_an_error_at_open(tmp_path):
    path = tmp_path / "stub.xml.bz2"
    path.write_bytes(bz2.compress(dump_xml(simple_pages(5)).encode())[:40])
    with pytest.raises(TruncatedCompressedError) as raised:
        iter_pages(str(path))
    assert str(path) in str(raised.value)


def test_corrupt_bz2_block_reports_corruption_after_earlier_pages(tmp_path):
    rng = random.Random(2)
    pages = [page_xml(i, f"P{i}", "".join(rng.choice(string.ascii_letters) for _ in range(3000)))
             for i in range(1, 301)]
    compressed = bytearray(bz2.compress(dump_xml(pages).encode(), compresslevel=1))
    middle = len(compressed) // 2
    compressed[middle:middle + 64] = bytes(64)  # wipe part of a block: its CRC cannot match
    path = tmp_path / "corrupt.xml.bz2"
    path.write_bytes(bytes(compressed))
    records = read_all(path)
    pages = pages_of(records)
    assert 0 < len(pages) < 300
    assert [p.page_id for p in pages] == list(range(1, len(pages) + 1))
    assert records[-1].reason == "corrupt_compressed"
    assert len(dead_of(records)) == 1


@pytest.mark.parametrize("bom, encoding", [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
                                           (codecs.BOM_UTF8, "utf-8")])
def test_byte_order_marked_dumps_are_transcoded(tmp_path, bom, encoding):
    pages = [page_xml(1, "Київ", "Столиця [[Україна|України]]"), page_xml(2, "東京", "日本の首都"),
             page_xml(3, "Emoji 🎉", "text 🎉 " * 200000)]  # > 1 MiB: spans chunk boundaries
    xml = dump_xml(pages)
    path = tmp_path / "bom.xml.gz"
    path.write_bytes(gzip.compress(bom + xml.encode(encoding)))
    records = read_all(path)
    assert dead_of(records) == []
    assert [(p.page_id, p.title) for p in records] == [(1, "Київ"), (2, "東京"), (3, "Emoji 🎉")]
    assert records[0].text == "Столиця [[Україна|України]]"
    assert records[2].text == "text 🎉 " * 200000
    info = read_siteinfo(str(path))
    assert info.dbname == "testwiki" and {n.id: n.name for n in info.namespaces}[6] == "Файл"


def test_broken_page_between_two_good_pages(tmp_path):
    broken = page_xml(2, "Broken", "x").replace("<title>Broken</title>", "<title>Broken & bad</title>")
    unclosed = page_xml(4, "Unclosed", "y").replace("  </page>\n", "")
    pages = [page_xml(1, "Good one"), broken, page_xml(3, "Good two"), unclosed, page_xml(5, "Good three")]
    path = tmp_path / "broken.xml"
    path.write_text(dump_xml(pages), encoding="utf-8")
    stats = ReadStats()
    records = read_all(path, stats=stats)
    assert [type(r).__name__ for r in records] == ["RawPage", "DeadLetter", "RawPage", "DeadLetter", "RawPage"]
    assert [p.title for p in pages_of(records)] == ["Good one", "Good two", "Good three"]
    bad_xml, unclosed_page = dead_of(records)
    assert (bad_xml.reason, bad_xml.page_id, bad_xml.title) == ("bad_xml", 2, "Broken & bad")
    assert (unclosed_page.reason, unclosed_page.page_id, unclosed_page.title) == ("bad_xml", 4, "Unclosed")
    assert stats.dead_letters == {"bad_xml": 2}


def test_damaged_page_start_tag_is_reported_not_dropped(tmp_path):
    damaged = page_xml(2, "Lost start").replace("<page>", "<pa ge>")
    path = tmp_path / "damaged.xml"
    path.write_text(dump_xml([page_xml(1, "A"), damaged, page_xml(3, "B")]), encoding="utf-8")
    records = read_all(path)
    assert [p.page_id for p in pages_of(records)] == [1, 3]
    (dead,) = dead_of(records)
    assert (dead.reason, dead.page_id, dead.title) == ("bad_xml", 2, "Lost start")


def test_bad_page_id_and_missing_title(tmp_path):
    no_title = page_xml(3, "x").replace("<title>x</title>", "")
    pages = [page_xml(1, "Good"), page_xml(0, "Not a number", id_text="12a"), no_title, page_xml(4, "Also good")]
    path = tmp_path / "ids.xml"
    path.write_text(dump_xml(pages), encoding="utf-8")
    records = read_all(path)
    assert [p.page_id for p in pages_of(records)] == [1, 4]
    bad_id, bad_title = dead_of(records)
    assert (bad_id.reason, bad_id.title) == ("bad_page_id", "Not a number")
    assert (bad_title.reason, bad_title.page_id) == ("bad_title", 3)


def test_oversized_page_is_skipped_while_streaming(tmp_path):
    big_text = "0123456789" * 300_000  # 3 MB: spans several 1 MiB chunks
    pages = [page_xml(1, "Small"), page_xml(2, "Huge", big_text), page_xml(3, "After")]
    path = tmp_path / "big.xml.bz2"
    path.write_bytes(bz2.compress(dump_xml(pages).encode()))
    records = read_all(path, max_page_bytes=256 << 10)
    assert [p.title for p in pages_of(records)] == ["Small", "After"]
    (dead,) = dead_of(records)
    assert (dead.reason, dead.page_id, dead.title) == ("page_too_large", 2, "Huge")
    assert len(records) == 3 and records[1] is dead  # in file order


def test_splitter_memory_stays_bounded_while_skipping():
    huge = b"<page><title>H</title><id>9</id><text>" + b"a" * 5_000_000 + b"</text></page>"
    stream = b"<mediawiki>" + huge + b"<page><title>T</title><id>1</id></page></mediawiki>"
    splitter = PageSplitter(max_page_bytes=100_000)
    fragments, high_water = [], 0
    for i in range(0, len(stream), 65536):
        fragments.extend(splitter.feed(stream[i:i + 65536]))
        high_water = max(high_water, splitter.buffered_bytes)
    fragments.extend(splitter.finish())
    assert [f.kind.value for f in fragments] == ["too_large", "page"]
    assert high_water < 100_000 + 2 * 65536
    assert splitter.saw_document_end


SPLIT_TEST_XML = dump_xml([
    page_xml(1, "A", "short"),
    page_xml(2, "B & <b>", "x" * 300),
    page_xml(3, "Broken").replace("<title>Broken</title>", "<title>Broken & </title>"),
    page_xml(4, "Unclosed").replace("  </page>\n", ""),
    page_xml(5, "Big", "y" * 2000),
    page_xml(6, "Last"),
]).encode()


def split_test_records(chunks):
    records = list(iter_pages_from_xml_chunks(chunks, max_page_bytes=1500))
    return [(type(r).__name__, r.page_id, getattr(r, "reason", None)) for r in records], records


SPLIT_TEST_EXPECTED = [("RawPage", 1, None), ("RawPage", 2, None), ("DeadLetter", 3, "bad_xml"),
                       ("DeadLetter", 4, "bad_xml"), ("DeadLetter", 5, "page_too_large"), ("RawPage", 6, None)]


@pytest.mark.parametrize("chunk_size", [*range(1, 14), 64, 333, 4096])
def test_chunk_boundaries_do_not_change_the_result(chunk_size):
    """Small chunks split every tag ("</page>", "</mediawiki>") somewhere; all are still found."""
    chunks = [SPLIT_TEST_XML[i:i + chunk_size] for i in range(0, len(SPLIT_TEST_XML), chunk_size)]
    summary, records = split_test_records(chunks)
    assert summary == SPLIT_TEST_EXPECTED
    assert records[1].title == "B & <b>" and records[1].text == "x" * 300


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(SPLIT_TEST_XML) - 1), min_size=1, max_size=200))
def test_random_chunk_boundaries_do_not_change_the_result(cuts):
    bounds = [0, *sorted(set(cuts)), len(SPLIT_TEST_XML)]
    summary, _ = split_test_records([SPLIT_TEST_XML[a:b] for a, b in zip(bounds, bounds[1:])])
    assert summary == SPLIT_TEST_EXPECTED


def test_history_page_takes_last_revision(tmp_path):
    revisions = [(101, "2001-01-01T00:00:00Z", "first"), (102, "2002-01-01T00:00:00Z", "second"),
                 (103, "2003-01-01T00:00:00Z", "third & last")]
    path = tmp_path / "history.xml.xz"
    path.write_bytes(lzma.compress(dump_xml([page_xml(7, "History", revisions=revisions)]).encode()))
    stats = ReadStats()
    (page,) = read_all(path, stats=stats)
    assert (page.revision_id, page.timestamp, page.text) == (103, "2003-01-01T00:00:00Z", "third & last")
    assert stats.older_revisions == 2


def test_deleted_text_and_redirect_attribute(tmp_path):
    deleted = page_xml(2, "Deleted").replace(
        '<text bytes="4" xml:space="preserve">body</text>', '<text deleted="deleted" />')
    pages = [page_xml(1, "Alias", "#REDIRECT [[Target]]", redirect="Target & Co"), deleted]
    path = tmp_path / "d.xml"
    path.write_text(dump_xml(pages), encoding="utf-8")
    first, second = read_all(path)
    assert first.redirect == "Target & Co"
    assert second.text == "" and second.redirect is None


def test_old_schema_without_ns_and_bare_redirect(tmp_path):
    old_redirect = page_xml(2, "Old alias", "#REDIRECT [[Real target#Section|x]]", ns=None, redirect="")
    old_redirect = old_redirect.replace('<redirect title="" />', "<redirect />")
    pages = [page_xml(1, "Category:Things", ns=None), old_redirect, page_xml(3, "Файл:Photo.jpg", ns=None)]
    path = tmp_path / "old.xml"
    path.write_text(dump_xml(pages, schema="0.3"), encoding="utf-8")
    stats = ReadStats()
    records = read_all(path, stats=stats)
    assert [(p.page_id, p.ns) for p in records] == [(1, 14), (2, 0), (3, 6)]
    assert records[1].redirect == "Real target"
    assert stats.ns_from_title == 3
    assert read_siteinfo(str(path)).schema_version == "0.3"


@pytest.mark.parametrize("schema", ["0.3", "0.5", "0.8", "0.10", "0.11", ""])
def test_schema_version_from_root_element(tmp_path, schema):
    path = tmp_path / "v.xml"
    path.write_text(dump_xml([page_xml(1, "A")], schema=schema), encoding="utf-8")
    assert read_siteinfo(str(path)).schema_version == schema
    assert [p.title for p in read_all(path)] == ["A"]


def test_document_cut_between_pages_is_reported(tmp_path):
    path = tmp_path / "cut.xml"
    path.write_text(dump_xml([page_xml(1, "A"), page_xml(2, "B")], closed=False), encoding="utf-8")
    records = read_all(path)
    assert [p.page_id for p in pages_of(records)] == [1, 2]
    (dead,) = dead_of(records)
    assert dead.reason == "truncated_xml" and "last complete page id=2" in dead.detail


def test_dump_without_pages(tmp_path):
    path = tmp_path / "empty-wiki.xml.bz2"
    path.write_bytes(bz2.compress(dump_xml([]).encode()))
    assert read_all(path) == []
    assert read_siteinfo(str(path)).dbname == "testwiki"


NOT_DUMPS = {
    "random.xml.bz2": random.Random(3).randbytes(5000),
    "data.json": b'{"mediawiki": {"page": 1}}',
    "page.html": b"<!DOCTYPE html>\n<html><head><title>x</title></head><body><page>1</page></body></html>",
    "feed.xml": b'<?xml version="1.0"?>\n<rss version="2.0"><channel/></rss>',
    "empty.xml": b"",
    "json-inside.json.gz": gzip.compress(b'[{"title": "not xml"}]'),
}


@pytest.mark.parametrize("name", sorted(NOT_DUMPS))
def test_files_that_are_not_dumps_are_rejected_at_open(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(NOT_DUMPS[name])
    with pytest.raises(NotAMediaWikiDumpError) as raised:
        iter_pages(str(path))  # raised at call time, not at first next()
    message = str(raised.value)
    assert str(path) in message and "\n" not in message
    with pytest.raises(NotAMediaWikiDumpError, match=re.escape(str(path))):
        read_siteinfo(str(path))


def test_archives_are_named_in_the_error(tmp_path):
    path = tmp_path / "enwiki-pages-meta-history1.xml.7z"
    path.write_bytes(b"7z\xbc\xaf\x27\x1c" + bytes(100))
    with pytest.raises(DumpError, match="7z archive"):
        iter_pages(str(path))


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nowhere" / "enwiki-latest-pages-articles.xml.bz2"
    for call in (lambda: iter_pages(str(missing)), lambda: read_siteinfo(str(missing))):
        with pytest.raises(DumpNotFoundError) as raised:
            call()
        assert isinstance(raised.value, DumpError)
        assert str(missing) in str(raised.value) and "\n" not in str(raised.value)


def test_xml_declaration_and_comment_before_root_are_accepted(tmp_path):
    path = tmp_path / "decl.xml"
    xml = '<?xml version="1.0" encoding="UTF-8"?>\n<!-- exported -->\n' + dump_xml([page_xml(1, "A")])
    path.write_text(xml, encoding="utf-8")
    assert [p.title for p in read_all(path)] == ["A"]
