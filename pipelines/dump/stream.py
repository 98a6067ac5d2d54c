"""Open a dump (or a byte range of one) as a stream of decompressed UTF-8 chunks.

This is where a file is judged: missing (``DumpNotFoundError``), not a
MediaWiki export (``NotAMediaWikiDumpError``, decided from the first 16 KiB of
decompressed text), or a byte range that does not start a compressed stream
(``DumpError``). Everything later is damage inside the file and is reported by
the page reader as dead letters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from pipelines.dump.compression import (
    RawRange,
    codec_from_extension,
    codec_from_magic,
    detect_codec,
    iter_decompressed,
    open_raw,
)
from pipelines.dump.encoding import iter_utf8
from pipelines.dump.errors import DumpError, NotAMediaWikiDumpError

HEAD_CHECK_BYTES = 16 << 10  # decompressed bytes looked at to decide "is this a dump"
_MAGIC_BYTES = 8  # raw bytes looked at to pick the codec

_PROLOG_ITEM = re.compile(rb"\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)", re.S)
_ROOT_TAG = re.compile(rb"\s*<((?:[\w.-]+:)?[\w.-]+)")


def describe_source(path: str, start: int | None, end: int | None) -> str:
    """How dead letters name their input: the path and the raw byte range read."""
    return f"{path}[{start or 0}:{'' if end is None else end}]"


@dataclass(slots=True)
class XmlStream:
    """Decompressed UTF-8 chunks of one dump or byte range; close it when done."""

    path: str
    codec: str
    start: int
    end: int | None
    chunks: Iterator[bytes]
    fileobj: BinaryIO
    raw: RawRange

    @property
    def raw_bytes(self) -> int:
        """Raw (compressed) bytes read so far."""
        return self.raw.bytes_read

    @property
    def source(self) -> str:
        return describe_source(self.path, self.start, self.end)

    @property
    def is_whole_file(self) -> bool:
        return self.start == 0 and self.end is None

    def close(self) -> None:
        self.fileobj.close()


def open_xml_stream(path: str, start: int | None = None, end: int | None = None) -> XmlStream:
    """Open ``path`` (or its raw bytes ``[start, end)``) as decompressed UTF-8 chunks.

    A stream from the file's beginning must be a MediaWiki export (root element
    ``mediawiki``, any xmlns); a range starting later must start a compressed
    stream of the file's codec. The head is decoded eagerly so these errors are
    raised here, not at the first ``next()``.
    """
    start = start or 0
    if start < 0 or (end is not None and end < start):
        raise ValueError(f"bad byte range [{start}:{end}] for {path}")
    fileobj = open_raw(path)
    try:
        raw = RawRange(fileobj, start, end)
        codec = _codec_for(path, raw.peek(_MAGIC_BYTES), start)
        decoded = iter_utf8(iter_decompressed(raw, codec, name=path), name=path)
        head, rest, error = _read_head(decoded)
        if error is not None and not head.strip():
            raise error  # nothing decodable at all: the decoder's message says why
        if start == 0:
            check_dump_head(head, path, compressed=codec != "none")
    except BaseException:
        fileobj.close()
        raise
    return XmlStream(path, codec, start, end, _prepend(head, rest), fileobj, raw)


def check_dump_head(head: bytes, name: str, *, compressed: bool = False) -> None:
    """Raise ``NotAMediaWikiDumpError`` unless ``head`` starts a MediaWiki export.

    ``head`` is the start of the decompressed UTF-8 document: an optional XML
    declaration, comments or doctype, then a root element named ``mediawiki``.
    """
    root = root_element_name(head)
    if root is None:
        what = "empty" if not head.strip() else "no XML root element in its first bytes"
        shown = _preview(head)
        raise NotAMediaWikiDumpError(
            f"not a MediaWiki XML dump: {name} ({what}{'; decompressed' if compressed else ''}"
            f"{'; starts with ' + shown if shown else ''})"
        )
    local_name = root.rsplit(":", 1)[-1]
    if local_name != "mediawiki":
        raise NotAMediaWikiDumpError(
            f"not a MediaWiki XML dump: {name} (root element is <{root}>, expected <mediawiki>)"
        )


def root_element_name(head: bytes) -> str | None:
    """Name of the first element after the XML prolog, or None if there is none."""
    position = 0
    while True:
        match = _PROLOG_ITEM.match(head, position)
        if not match or match.end() == position:
            break
        position = match.end()
    match = _ROOT_TAG.match(head, position)
    if not match:
        return None
    return match.group(1).decode("ascii", "replace")


def _codec_for(path: str, first: bytes, start: int) -> str:
    if start == 0:
        return detect_codec(path, first)
    # Mid-file the bytes must start a stream of the file's own codec (multistream reads).
    expected = codec_from_extension(path)
    sniffed = codec_from_magic(first)
    if expected in (None, "none"):
        return sniffed or "none"
    if sniffed != expected:
        raise DumpError(
            f"byte {start} of {path} does not start a {expected} stream "
            f"(starts with {first[:6]!r}); is the multistream index for this file?"
        )
    return expected


def _read_head(chunks: Iterator[bytes]) -> tuple[bytes, Iterator[bytes], DumpError | None]:
    """Take at least HEAD_CHECK_BYTES off ``chunks`` (less if it ends).

    Returns (head, rest, error): a decoding error met inside the head is not
    raised here but replayed by ``rest`` after the head, so a file cut in its
    first kilobytes still delivers what it has.
    """
    iterator = iter(chunks)
    parts: list[bytes] = []
    size = 0
    try:
        while size < HEAD_CHECK_BYTES:
            chunk = next(iterator, None)
            if chunk is None:
                break
            parts.append(chunk)
            size += len(chunk)
    except DumpError as error:
        return b"".join(parts), _raise_later(error), error
    return b"".join(parts), iterator, None


def _raise_later(error: DumpError) -> Iterator[bytes]:
    raise error
    yield b""  # pragma: no cover - makes this a generator


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _preview(head: bytes) -> str:
    text = head[:40].decode("utf-8", "replace")
    return repr(" ".join(text.split()))[:60] if text.strip() else ""


__all__ = ["XmlStream", "open_xml_stream", "check_dump_head",
           "root_element_name", "describe_source"]
