"""Reading MediaWiki XML dumps: plain functions and generators, no Beam transforms.

* ``read_siteinfo(path) -> SiteInfo``: the header (wiki, namespaces, schema version).
* ``iter_pages(path, start=None, end=None, ...) -> Iterator[RawPage | DeadLetter]``:
  streaming page reader with bounded memory; damage becomes dead letters.
* ``plan_read_ranges(dump_path, index_path=None, ...) -> list[ReadRange]``: byte
  ranges of a multistream dump for parallel reading.

Any path Beam's filesystems accept works (local, gs://, s3://); bz2 (single and
multistream), gzip, xz, zstd and plain XML are decompressed incrementally.
"""
from pipelines.dump.compression import detect_codec, iter_decompressed
from pipelines.dump.errors import (
    BadEncodingError,
    CorruptCompressedError,
    DumpError,
    DumpNotFoundError,
    NotAMediaWikiDumpError,
    TruncatedCompressedError,
)
from pipelines.dump.multistream import (
    MultistreamIndex,
    ReadRange,
    default_index_path,
    plan_read_ranges,
    read_multistream_index,
    scan_multistream_index,
)
from pipelines.dump.pages import namespace_from_title, namespace_prefixes, parse_page
from pipelines.dump.reader import DEFAULT_MAX_PAGE_BYTES, iter_pages, iter_pages_from_xml_chunks
from pipelines.dump.siteinfo import parse_siteinfo, read_siteinfo
from pipelines.dump.stats import ReadStats

__all__ = [
    "BadEncodingError",
    "CorruptCompressedError",
    "DEFAULT_MAX_PAGE_BYTES",
    "DumpError",
    "DumpNotFoundError",
    "MultistreamIndex",
    "NotAMediaWikiDumpError",
    "ReadRange",
    "ReadStats",
    "TruncatedCompressedError",
    "default_index_path",
    "detect_codec",
    "iter_decompressed",
    "iter_pages",
    "iter_pages_from_xml_chunks",
    "namespace_from_title",
    "namespace_prefixes",
    "parse_page",
    "parse_siteinfo",
    "plan_read_ranges",
    "read_multistream_index",
    "read_siteinfo",
    "scan_multistream_index",
]
