"""Normalise the decompressed byte stream to UTF-8 before it is split into pages.

MediaWiki writes UTF-8, but a dump that went through other tools may carry a
byte-order mark or be UTF-16/32. The page splitter searches for the ASCII bytes
``<page>`` and ``</page>``, which only works on UTF-8, so other encodings are
transcoded here, incrementally, chunk by chunk.
"""
from __future__ import annotations

import codecs
from typing import Iterable, Iterator

from pipelines.dump.errors import BadEncodingError

# Longest marks first: the UTF-32-LE BOM starts with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

# Without a BOM, the XML spec's autodetection: how "<?" or "<m" look in each encoding.
_UNMARKED = (
    (b"<\x00\x00\x00", "utf-32-le"),
    (b"\x00\x00\x00<", "utf-32-be"),
    (b"<\x00", "utf-16-le"),
    (b"\x00<", "utf-16-be"),
)

_SNIFF_BYTES = 4


def sniff_encoding(head: bytes) -> tuple[str, int]:
    """Return (encoding, BOM length) for a document starting with ``head``.

    Plain UTF-8 (or anything unmarked that is ASCII-compatible) gives ("utf-8", 0).
    """
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding, len(bom)
    for prefix, encoding in _UNMARKED:
        if head.startswith(prefix):
            return encoding, 0
    return "utf-8", 0


def iter_utf8(chunks: Iterable[bytes], *, name: str = "") -> Iterator[bytes]:
    """Yield the stream as UTF-8: a UTF-8 BOM dropped, UTF-16/32 transcoded.

    Raises ``BadEncodingError`` on bytes invalid in a transcoded encoding (after
    yielding everything before them); UTF-8 input passes through untouched and
    is validated later, page by page, by the XML parser.
    """
    iterator = iter(chunks)
    head = b""
    for chunk in iterator:
        head += chunk
        if len(head) >= _SNIFF_BYTES:
            break
    encoding, bom_length = sniff_encoding(head)
    head = head[bom_length:]
    if encoding == "utf-8":
        if head:
            yield head
        yield from iterator
        return
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    transcoded = 0
    try:
        for chunk in _prepend(head, iterator):
            text = decoder.decode(chunk)
            transcoded += len(chunk)
            if text:
                yield text.encode("utf-8")
        tail = decoder.decode(b"", final=True)
    except UnicodeDecodeError as error:
        raise BadEncodingError(
            f"invalid {encoding} in {name or 'input'} near decoded byte {transcoded + error.start}: {error.reason}"
        ) from error
    if tail:
        yield tail.encode("utf-8")


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest
