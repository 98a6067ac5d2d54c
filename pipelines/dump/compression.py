"""Open a dump's raw bytes through Beam's filesystems and decompress them incrementally.

Beam's own decompression is bypassed (``CompressionTypes.UNCOMPRESSED``) because
it cannot tell a complete file from one cut short, and cannot start at a byte
offset inside a multistream bz2 file. Here every codec is driven chunk by chunk
with a bounded output size, so memory stays flat however large the file or how
well it compresses, and a stream that ends before its decompressor reached
end-of-stream raises ``TruncatedCompressedError`` after everything decoded
before the cut has been yielded.

Concatenated streams are followed for every codec (multistream bz2, multi-member
gzip, concatenated xz streams, multi-frame zstd); zero-byte padding between or
after streams (tape-style gzip, xz stream padding) is skipped.
"""
from __future__ import annotations

import bz2
import lzma
import zlib
from typing import BinaryIO, Callable, Iterable, Iterator, Protocol

import zstandard
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.dump.errors import (
    CorruptCompressedError,
    DumpError,
    DumpNotFoundError,
    TruncatedCompressedError,
)

CHUNK_SIZE = 1 << 20  # raw read size and the target size of each decompressed chunk
DECODE_STEP = 64 << 10  # output limit of one decoder call
_INPUT_SLICE = 64 << 10  # input given at once to decoders that copy their unconsumed input
_ZSTD_INPUT_SLICE = 2 << 10  # bounds zstd's unlimited output per call (see _ZstdDecoder)

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

_DECODER_ERRORS = (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error, zstandard.ZstdError)


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


def iter_raw_chunks(
    fileobj: BinaryIO, start: int = 0, end: int | None = None, *, chunk_size: int = CHUNK_SIZE
) -> Iterator[bytes]:
    """Yield the bytes of ``fileobj`` from ``start`` up to (not including) ``end``.

    ``end=None`` reads to end of file. Reading past ``end`` never happens, so a
    range reader only decompresses the streams that lie inside its range.
    """
    if start:
        fileobj.seek(start)
    remaining = None if end is None else end - start
    while remaining is None or remaining > 0:
        size = chunk_size if remaining is None else min(chunk_size, remaining)
        chunk = fileobj.read(size)
        if not chunk:
            return
        if remaining is not None:
            remaining -= len(chunk)
        yield chunk


class _Decoder(Protocol):
    """The interface of ``bz2.BZ2Decompressor`` / ``lzma.LZMADecompressor``."""

    eof: bool
    needs_input: bool
    unused_data: bytes

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class _SlicedInput:
    """Input held by an adapter and handed to its decoder a slice at a time, without copying."""

    __slots__ = ("_data", "_position")

    def __init__(self) -> None:
        self._data = memoryview(b"")
        self._position = 0

    def add(self, data: bytes) -> None:
        if data:
            rest = self._data[self._position:]
            self._data = memoryview(bytes(rest) + data if len(rest) else data)
            self._position = 0

    def take(self, size: int) -> bytes:
        piece = self._data[self._position:self._position + size]
        self._position += len(piece)
        return bytes(piece)

    def rest(self) -> bytes:
        return bytes(self._data[self._position:])

    def __len__(self) -> int:
        return len(self._data) - self._position


class _ZlibDecoder:
    """``zlib.decompressobj`` (gzip framing) behind the bz2/lzma decoder interface.

    Input goes in 64 KiB slices so zlib's ``unconsumed_tail`` (copied on every
    call) stays small.
    """

    __slots__ = ("_inner", "_input", "_tail", "_output_may_be_pending")

    def __init__(self) -> None:
        self._inner = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._input = _SlicedInput()
        self._tail = b""
        self._output_may_be_pending = False

    @property
    def eof(self) -> bool:
        return self._inner.eof

    @property
    def needs_input(self) -> bool:
        return not self._tail and not len(self._input) and not self._output_may_be_pending

    @property
    def unused_data(self) -> bytes:
        return self._inner.unused_data + self._input.rest() if self._inner.eof else b""

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        self._input.add(data)
        feed = self._tail or self._input.take(_INPUT_SLICE)
        output = self._inner.decompress(feed, max(max_length, 0))
        self._tail = self._inner.unconsumed_tail
        # A full output buffer may hide output zlib still holds without more input.
        self._output_may_be_pending = max_length > 0 and len(output) >= max_length
        return output


class _ZstdDecoder:
    """``zstandard`` decompressobj behind the bz2/lzma decoder interface.

    Its ``decompress`` has no output limit, so input goes in slices of
    ``_ZSTD_INPUT_SLICE`` bytes: a zstd block takes at least 4 input bytes and
    yields at most 128 KiB, so one call yields at most ~64 MiB even for a
    pathological input (a "zip bomb"), while ordinary text decodes at full speed.
    """

    __slots__ = ("_inner", "_input")

    def __init__(self) -> None:
        self._inner = zstandard.ZstdDecompressor().decompressobj(write_size=16 << 10)
        self._input = _SlicedInput()

    @property
    def eof(self) -> bool:
        return self._inner.eof

    @property
    def needs_input(self) -> bool:
        return not len(self._input)

    @property
    def unused_data(self) -> bytes:
        return self._inner.unused_data + self._input.rest() if self._inner.eof else b""

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        self._input.add(data)
        return self._inner.decompress(self._input.take(_ZSTD_INPUT_SLICE))


_DECODER_FACTORIES: dict[str, Callable[[], _Decoder]] = {
    "bz2": bz2.BZ2Decompressor,
    "xz": lambda: lzma.LZMADecompressor(format=lzma.FORMAT_AUTO),
    "gz": _ZlibDecoder,
    "zst": _ZstdDecoder,
}


def iter_decompressed(
    raw_chunks: Iterable[bytes], codec: str, *, chunk_size: int = CHUNK_SIZE, name: str = ""
) -> Iterator[bytes]:
    """Decompress ``raw_chunks`` with ``codec``, yielding chunks of about ``chunk_size``.

    Concatenated streams are decoded one after the other. Raises
    ``TruncatedCompressedError`` if the raw bytes end inside a stream and
    ``CorruptCompressedError`` if the decoder rejects the data; in both cases
    everything decoded before has already been yielded. ``name`` (the path)
    only goes into error messages.
    """
    if codec == "none":
        yield from raw_chunks
        return
    if codec not in _DECODER_FACTORIES:
        raise ValueError(f"unknown codec {codec!r}; expected one of {CODECS}")
    yield from _iter_concatenated_streams(raw_chunks, _DECODER_FACTORIES[codec], codec, chunk_size, name)


def _iter_concatenated_streams(
    raw_chunks: Iterable[bytes],
    new_decoder: Callable[[], _Decoder],
    codec: str,
    chunk_size: int,
    name: str,
) -> Iterator[bytes]:
    # Decode in small steps: output decoded before a corrupt block is then not lost
    # with the call that raises; it is gathered and yielded in chunk_size pieces.
    step = min(chunk_size, DECODE_STEP)
    gathered: list[bytes] = []
    gathered_size = 0
    decoder = new_decoder()
    decoder_has_input = False  # False: nothing fed yet, so stopping here is not a cut
    streams_done = 0
    raw_offset = 0  # raw bytes consumed, for messages
    for data in _with_end_marker(raw_chunks):
        at_end = data is None
        data = data or b""
        raw_offset += len(data)
        while True:
            if decoder.eof:
                streams_done += 1
                data = decoder.unused_data + data
                decoder = new_decoder()
                decoder_has_input = False
            if not decoder_has_input and data[:1] == b"\x00":
                data = data.lstrip(b"\x00")  # zero padding between/after streams (no magic starts with 0)
            if data:
                feed, data = data, b""
                decoder_has_input = True
            elif decoder_has_input and not decoder.needs_input and not decoder.eof:
                feed = b""
            else:
                break
            try:
                output = decoder.decompress(feed, step)
            except _DECODER_ERRORS as error:
                if gathered:
                    yield b"".join(gathered)
                raise CorruptCompressedError(
                    f"{codec} data rejected in {name or 'input'} after {streams_done} complete "
                    f"stream(s), near raw byte {raw_offset}: {_one_line(error)}"
                ) from error
            if output:
                gathered.append(output)
                gathered_size += len(output)
                if gathered_size >= chunk_size:
                    yield b"".join(gathered)
                    gathered, gathered_size = [], 0
        if at_end:
            if gathered:
                yield b"".join(gathered)
            if decoder_has_input and not decoder.eof:
                raise TruncatedCompressedError(
                    f"{codec} stream cut short in {name or 'input'}: raw bytes ended at {raw_offset} "
                    f"inside stream {streams_done + 1}"
                )


def _with_end_marker(chunks: Iterable[bytes]) -> Iterator[bytes | None]:
    """The chunks, then ``None`` so the decode loop can drain and check for a cut."""
    yield from chunks
    yield None


def _exists(path: str) -> bool:
    try:
        return FileSystems.exists(path)
    except Exception:
        return False


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__
