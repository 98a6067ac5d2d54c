"""Plan parallel reads of a multistream bz2 dump from its index.

A ``...-multistream.xml.bz2`` file is a chain of bz2 streams: the first holds
the ``<mediawiki>`` root tag and ``<siteinfo>``, each later one about 100
whole pages (the last also ``</mediawiki>``). The companion
``...-multistream-index.txt.bz2`` has one line ``offset:page_id:title`` per
page, ``offset`` being the byte where that page's stream starts. Any stream
can be decompressed on its own, so consecutive streams are grouped into
``ReadRange``s of about ``target_bytes`` compressed bytes that workers read
independently with ``iter_pages(path, start, end)``.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from apache_beam.io.filesystems import FileSystems

from pipelines.dump.compression import (
    RawRange,
    codec_from_extension,
    detect_codec,
    file_size,
    iter_decompressed,
    open_raw,
)
from pipelines.dump.errors import CorruptCompressedError, DumpError, TruncatedCompressedError

log = logging.getLogger(__name__)

DEFAULT_TARGET_BYTES = 64 << 20
_MULTISTREAM_NAME = re.compile(r"^(?P<stem>.*-multistream)\.xml\.bz2$")


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Raw bytes ``[start, end)`` of ``path`` (``end=None``: to end of file), whole bz2 streams."""

    path: str
    start: int
    end: int | None


@dataclass(slots=True)
class MultistreamIndex:
    """What an index file says: the distinct stream offsets, and what could not be used."""

    offsets: list[int] = field(default_factory=list)  # sorted, distinct
    entries: int = 0  # well-formed lines
    bad_lines: int = 0  # lines skipped: not "offset:page_id:title" with integer fields
    truncated: bool = False  # the compressed index was cut short (its last partial line dropped)


def read_multistream_index(index_path: str) -> list[int]:
    """Sorted distinct stream offsets listed in a multistream index (``scan_multistream_index``)."""
    return scan_multistream_index(index_path).offsets


def scan_multistream_index(index_path: str) -> MultistreamIndex:
    """Read a ``...-multistream-index.txt[.bz2]`` file into a ``MultistreamIndex``.

    Lines are ``offset:page_id:title``; titles may contain colons (only the
    first two are separators). Bad lines are skipped and counted; a cut
    compressed index keeps every complete line before the cut. Memory is one
    integer per distinct stream (~70k for English Wikipedia), not per page.
    """
    fileobj = open_raw(index_path)
    summary = MultistreamIndex()
    offsets: set[int] = set()
    try:
        raw = RawRange(fileobj)
        codec = detect_codec(index_path, raw.peek(8))
        pending = b""
        try:
            for chunk in iter_decompressed(raw, codec, name=index_path):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    _add_index_line(line, offsets, summary)
        except TruncatedCompressedError as error:
            log.warning("multistream index cut short, using the lines before the cut: %s", error)
            summary.truncated = True
            pending = b""  # possibly a cut number: "57500" of "575005"
        except CorruptCompressedError as error:
            log.warning("multistream index damaged, using the lines before the damage: %s", error)
            summary.truncated = True
            pending = b""
        if pending:
            _add_index_line(pending, offsets, summary)
    finally:
        fileobj.close()
    summary.offsets = sorted(offsets)
    if summary.bad_lines:
        log.warning("%d bad line(s) skipped in %s", summary.bad_lines, index_path)
    return summary


def default_index_path(dump_path: str) -> str | None:
    """The ``...-multistream-index.txt.bz2`` beside a ``...-multistream.xml.bz2``, if it exists."""
    directory, _, name = dump_path.rpartition("/")
    match = _MULTISTREAM_NAME.match(name)
    if match is None:
        return None
    candidate = f"{directory}/{match['stem']}-index.txt.bz2" if directory else f"{match['stem']}-index.txt.bz2"
    try:
        return candidate if FileSystems.exists(candidate) else None
    except Exception:  # an unreachable filesystem: plan a sequential read instead
        return None


def plan_read_ranges(
    dump_path: str, index_path: str | None = None, *, target_bytes: int = DEFAULT_TARGET_BYTES
) -> list[ReadRange]:
    """Split a dump into ranges of whole bz2 streams of about ``target_bytes`` each.

    With an index (pass ``default_index_path(dump_path)`` to use the one beside
    the dump) the first range starts at the first page stream (the stream
    before it holds only the header: read it with ``read_siteinfo``) and the
    last runs to end of file, so pages after the last indexed offset are still
    read. With ``index_path=None`` the plan is ``[ReadRange(dump_path, 0, None)]``
    (one sequential read). Reading every range with ``iter_pages`` and
    concatenating gives exactly the pages of a sequential read.
    """
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    whole_file = [ReadRange(dump_path, 0, None)]
    if not index_path:
        return whole_file
    if codec_from_extension(dump_path) not in ("bz2", None):
        log.warning("%s is not a bz2 multistream dump; ignoring index %s", dump_path, index_path)
        return whole_file
    size = file_size(dump_path)
    offsets = [offset for offset in read_multistream_index(index_path) if offset < size]
    if not offsets:
        log.warning("index %s lists no usable offsets for %s; reading sequentially", index_path, dump_path)
        return whole_file
    _check_stream_start(dump_path, offsets[0])
    return group_streams(dump_path, offsets, target_bytes)


def group_streams(dump_path: str, offsets: list[int], target_bytes: int) -> list[ReadRange]:
    """Group streams starting at sorted ``offsets`` into consecutive ranges of >= ``target_bytes``.

    The last range always ends at end of file (``end=None``).
    """
    ranges: list[ReadRange] = []
    range_start = offsets[0]
    for offset in offsets[1:]:
        if offset - range_start >= target_bytes:
            ranges.append(ReadRange(dump_path, range_start, offset))
            range_start = offset
    ranges.append(ReadRange(dump_path, range_start, None))
    return ranges


def _check_stream_start(dump_path: str, offset: int) -> None:
    """Fail early when the index does not belong to this dump (offset is not a bz2 stream)."""
    fileobj = open_raw(dump_path)
    try:
        fileobj.seek(offset)
        magic = fileobj.read(4)
    finally:
        fileobj.close()
    if not (magic[:3] == b"BZh" and magic[3:4].isdigit()):
        raise DumpError(
            f"byte {offset} of {dump_path} does not start a bz2 stream ({magic!r}); "
            "the multistream index does not belong to this dump"
        )


def _add_index_line(line: bytes, offsets: set[int], summary: MultistreamIndex) -> None:
    line = line.strip()
    if not line:
        return
    parts = line.split(b":", 2)
    if len(parts) != 3:
        summary.bad_lines += 1
        return
    try:
        offset, page_id = int(parts[0]), int(parts[1])
    except ValueError:
        summary.bad_lines += 1
        return
    if offset < 0 or page_id < 0:
        summary.bad_lines += 1
        return
    summary.entries += 1
    offsets.add(offset)

