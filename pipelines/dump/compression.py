"""Open a dump's raw bytes and decompress them incrementally.

The codecs' own readers decode: ``bz2.BZ2File``, ``gzip.GzipFile`` and
``lzma.LZMAFile`` follow concatenated streams (multistream bz2, multi-member
gzip, concatenated xz), bound the output of each call, and raise ``EOFError``
when the bytes end inside a stream; gzip also skips zero padding. Kept here is
what they cannot do:

* Byte ranges. ``RawRange`` serves raw bytes ``[start, end)`` of a file, so a
  worker decodes only the whole bz2 streams of its multistream range. Beam's
  own decompression is bypassed: it can neither start mid-file nor tell a
  complete file from one cut short.
* Nothing lost silently. ``BZ2File`` and ``LZMAFile`` end quietly at bytes
  after a stream that do not start another one, so a damaged stream header
  would drop the rest of a multistream file; a reader that ends before it read
  its raw input to the end raises ``CorruptCompressedError`` here (zero
  padding after a bz2 or xz stream, which no dump tool writes, is reported the
  same way; gzip's and zstd's is skipped). zstandard's ``stream_reader``
  returns a cut frame's bytes without an error, so zstd frames are followed
  with its ``decompressobj``, whose ``eof`` marks a complete frame.
* One error type per kind of damage, raised after everything decoded before it
  has been yielded: ``TruncatedCompressedError`` (cut short) and
  ``CorruptCompressedError`` (rejected data), which the page reader counts as
  dead letters. A failing read of the raw file is not damage and propagates as
  it is, so the runner can retry.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from typing import BinaryIO, Iterable, Iterator

import zstandard
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.dump.errors import (
    CorruptCompressedError,
    DumpError,
    DumpNotFoundError,
    TruncatedCompressedError,
)

CHUNK_SIZE = 1 << 20  # target size of each decompressed chunk
DECODE_STEP = 64 << 10  # output limit of one decoder call: bounds what a corrupt block takes with it
_ZSTD_INPUT_SLICE = 2 << 10  # bounds zstd's unlimited output per call (see _iter_zstd_frames)
_ZSTD_WRITE_SIZE = 16 << 10  # zstd's output buffer, grown by joining

CODECS = ("bz2", "gz", "xz", "zst", "none")

_EXTENSIONS = {
    ".bz2": "bz2", ".bzip2": "bz2",
    ".gz": "gz", ".gzip": "gz",
    ".xz": "xz", ".lzma": "xz",
    ".zst": "zst", ".zstd": "zst",
    ".xml": "none", ".txt": "none",
}

_MAGIC = (
    (b"BZh", "bz2"),
    (b"\x1f\x8b", "gz"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zst"),
)

# Archives that wrap files rather than compress a stream: named in the error, not guessed at.
_UNSUPPORTED_MAGIC = (
    (b"7z\xbc\xaf\x27\x1c", "7z archive (decompress it with `7z x` or recompress as .bz2/.zst)"),
    (b"PK\x03\x04", "zip archive (unzip it first)"),
)

# What the decoders raise on bad data (BadGzipFile is an OSError); EOFError means cut short.
_DECODER_ERRORS = (OSError, ValueError, lzma.LZMAError, zlib.error, zstandard.ZstdError)


def codec_from_extension(path: str) -> str | None:
    """The codec implied by the file name's last extension, or None if it names none."""
    lowered = path.lower()
    for extension, codec in _EXTENSIONS.items():
        if lowered.endswith(extension):
            return codec
    return None


def codec_from_magic(head: bytes) -> str | None:
    """The codec whose magic number starts ``head``, or None (plain or unknown data)."""
    for magic, codec in _MAGIC:
        if head.startswith(magic):
            return codec
    return None


def detect_codec(path: str, head: bytes) -> str:
    """Pick the codec for a file: its magic bytes when they match one, else plain.

    The extension is the first guess, but the bytes decide: a ``.bz2`` file
    that does not start with ``BZh`` cannot be bzip2, and a renamed ``.xml``
    that is really gzip is still read. Data with no known magic is treated as
    uncompressed; the XML check that follows then rejects it if it is not a dump.
    A 7z or zip archive raises ``DumpError`` naming the format.
    """
    for magic, what in _UNSUPPORTED_MAGIC:
        if head.startswith(magic):
            raise DumpError(f"unsupported format: {path} is a {what}")
    guessed = codec_from_extension(path)
    sniffed = codec_from_magic(head)
    if guessed is not None and guessed != "none" and sniffed == guessed:
        return guessed
    return sniffed or "none"


def open_raw(path: str) -> BinaryIO:
    """Open ``path`` (local, gs://, s3://, ...) for reading its raw bytes.

    Raises ``DumpNotFoundError`` when it does not exist, ``DumpError`` when it
    exists but cannot be opened (a directory, no permission).
    """
    try:
        return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as error:  # each filesystem raises its own type
        if not _exists(path):
            raise DumpNotFoundError(f"dump file not found: {path}") from error
        raise DumpError(f"cannot open {path}: {_one_line(error)}") from error


def file_size(path: str) -> int:
    """Size of ``path`` in bytes (``DumpNotFoundError`` when it does not exist)."""
    try:
        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    except Exception as error:
        raise DumpNotFoundError(f"dump file not found: {path}") from error


class RawRange:
    """Raw bytes ``[start, end)`` of an open file (``end=None``: to end of file), for a decoder.

    Reading past ``end`` never happens, so a range reader only decodes the
    streams inside its range. It counts the bytes served (``bytes_read``),
    notes whether a reader asked past the last one (``reached_end``: a reader
    following concatenated streams must, to know no stream follows), and keeps
    an error of the file's own read (``read_error``) apart from decoder errors.
    """

    __slots__ = ("_file", "_remaining", "_peeked", "bytes_read", "reached_end", "read_error")

    def __init__(self, fileobj: BinaryIO, start: int = 0, end: int | None = None) -> None:
        if start:
            fileobj.seek(start)
        self._file = fileobj
        self._remaining = None if end is None else end - start
        self._peeked = b""
        self.bytes_read = 0
        self.reached_end = False
        self.read_error: BaseException | None = None

    def peek(self, size: int) -> bytes:
        """The next ``size`` bytes (fewer at the end), still to be read."""
        if len(self._peeked) < size:
            self._peeked += self._read_file(size - len(self._peeked))
        return self._peeked[:size]

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left if negative); fewer only at the end of the range."""
        data = b""
        if self._peeked:  # a full read, as gzip expects of its header reads
            data = self._peeked if size < 0 else self._peeked[:size]
            self._peeked = self._peeked[len(data):]
            if len(data) == size:
                return data
        data += self._read_file(size if size < 0 else size - len(data))
        if not data and size:
            self.reached_end = True
        return data

    def _read_file(self, size: int) -> bytes:
        if self._remaining is not None:
            size = self._remaining if size < 0 else min(size, self._remaining)
            if size == 0:
                return b""
        try:
            data = self._file.read(size)
        except BaseException as error:
            self.read_error = error
            raise
        self.bytes_read += len(data)
        if self._remaining is not None:
            self._remaining -= len(data)
        return data


def iter_decompressed(
    raw: RawRange | Iterable[bytes], codec: str, *, chunk_size: int = CHUNK_SIZE, name: str = ""
) -> Iterator[bytes]:
    """Decompress ``raw`` (a ``RawRange`` or raw chunks) with ``codec``, yielding ~``chunk_size`` chunks.

    Concatenated streams are decoded one after the other. Raises
    ``TruncatedCompressedError`` if the raw bytes end inside a stream and
    ``CorruptCompressedError`` if the decoder rejects the data or stops before
    the end of the raw bytes; in both cases everything decoded before has
    already been yielded. ``name`` (the path) only goes into error messages.
    """
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; expected one of {CODECS}")
    if not isinstance(raw, RawRange):
        raw = RawRange(_ChunkFile(raw))
    if codec == "none":
        yield from iter(lambda: raw.read(chunk_size), b"")
        return
    if not raw.peek(1):
        return  # no bytes: nothing to decode, and nothing cut
    gathered: list[bytes] = []
    gathered_size = 0
    pieces = _decoded_pieces(raw, codec)
    while True:
        try:
            piece = next(pieces, None)
        except EOFError as error:
            yield from _flush(gathered)
            raise TruncatedCompressedError(
                f"{codec} stream cut short in {name or 'input'}: raw bytes ended at {raw.bytes_read} "
                f"inside a stream"
            ) from error
        except _DECODER_ERRORS as error:
            if error is raw.read_error:
                raise  # the file could not be read: not damage in it
            yield from _flush(gathered)
            raise CorruptCompressedError(
                f"{codec} data rejected in {name or 'input'} near raw byte {raw.bytes_read}: {_one_line(error)}"
            ) from error
        if piece is None:
            break
        gathered.append(piece)
        gathered_size += len(piece)
        if gathered_size >= chunk_size:
            yield b"".join(gathered)
            gathered, gathered_size = [], 0
    yield from _flush(gathered)
    if not raw.reached_end:
        raise CorruptCompressedError(
            f"{codec} data rejected in {name or 'input'} near raw byte {raw.bytes_read}: "
            "bytes after a complete stream do not start another stream"
        )


def _decoded_pieces(raw: RawRange, codec: str) -> Iterator[bytes]:
    """Decoded output of ``raw`` in pieces of at most ``DECODE_STEP`` bytes (zstd: about that)."""
    if codec == "zst":
        return _iter_zstd_frames(raw)
    if codec == "bz2":
        reader = bz2.BZ2File(raw)
    elif codec == "gz":
        reader = gzip.GzipFile(fileobj=raw, mode="rb")
    else:
        reader = lzma.LZMAFile(raw)
    return iter(lambda: reader.read1(DECODE_STEP), b"")


def _iter_zstd_frames(raw: RawRange) -> Iterator[bytes]:
    """The output of the zstd frames in ``raw``; ``EOFError`` if the bytes end inside a frame.

    Input goes in slices of ``_ZSTD_INPUT_SLICE`` bytes because ``decompress``
    has no output limit: a zstd block takes at least 4 input bytes and yields
    at most 128 KiB, so one call yields at most ~64 MiB even for a crafted
    input, while text decodes at full speed. Zero padding between frames is skipped.
    """
    decompressor = zstandard.ZstdDecompressor()
    frame = None
    for block in iter(lambda: raw.read(DECODE_STEP), b""):
        view = memoryview(block)
        position = 0
        while position < len(view):
            if frame is None:
                if view[position] == 0:
                    position += 1
                    continue
                frame = decompressor.decompressobj(write_size=_ZSTD_WRITE_SIZE)
            piece = view[position:position + _ZSTD_INPUT_SLICE]
            position += len(piece)
            output = frame.decompress(piece)
            if frame.eof:  # the rest of the slice starts the next frame
                position -= len(frame.unused_data)
                frame = None
            if output:
                yield output
    if frame is not None:
        raise EOFError("zstd frame cut short")


class _ChunkFile:
    """An iterable of byte chunks as the ``read(size)`` a ``RawRange`` reads from."""

    __slots__ = ("_chunks", "_pending")

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = b""

    def read(self, size: int = -1) -> bytes:
        while not self._pending:  # an empty chunk is not the end
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._pending = chunk
        if size < 0:
            data, self._pending = self._pending + b"".join(self._chunks), b""
            return data
        data, self._pending = self._pending[:size], self._pending[size:]
        return data


def _flush(gathered: list[bytes]) -> Iterator[bytes]:
    if gathered:
        yield b"".join(gathered)
        gathered.clear()


def _exists(path: str) -> bool:
    try:
        return FileSystems.exists(path)
    except Exception:
        return False


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__
