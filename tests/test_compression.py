"""Tests of the decompression layer (pipelines.dump.compression).

The codecs' own readers (bz2.BZ2File, gzip.GzipFile, lzma.LZMAFile) do the
decoding; the first group of tests pins the library behaviour this relies on,
and the limits it works around, so that a library upgrade that changes either
shows here. The rest checks what the module adds: byte ranges, no silent loss
after a damaged stream, cut zstd frames, bounded chunks, file read errors kept
apart from damage.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random

import pytest
import zstandard

from pipelines.dump import CorruptCompressedError, TruncatedCompressedError, iter_decompressed, iter_pages
from pipelines.dump.compression import CHUNK_SIZE, DECODE_STEP, RawRange
from tests.test_dump_reader import dead_of, dump_xml, pages_of, simple_pages
from tests.test_multistream import write_multistream

TEXT = "".join(random.Random(4).choice("abcdefgh ijklm\n") for _ in range(300_000)).encode()
FIRST, SECOND = TEXT[:200_000], TEXT[200_000:]

COMPRESS = {
    "bz2": lambda data: bz2.compress(data, compresslevel=1),
    "gz": gzip.compress,
    "xz": lzma.compress,
    "zst": zstandard.ZstdCompressor().compress,
}
STDLIB_READERS = {
    "bz2": bz2.BZ2File,
    "gz": lambda fileobj: gzip.GzipFile(fileobj=fileobj, mode="rb"),
    "xz": lzma.LZMAFile,
}


def decode(blob: bytes, codec: str, **kwargs) -> tuple[bytes, BaseException | None]:
    """Everything ``iter_decompressed`` yields for ``blob``, and the error it ended with."""
    out = []
    try:
        for chunk in iter_decompressed(RawRange(io.BytesIO(blob)), codec, **kwargs):
            out.append(chunk)
    except Exception as error:  # returned for the caller to assert on
        return b"".join(out), error
    return b"".join(out), None


# ---------------------------------------------------------------- what the libraries do (and do not)


@pytest.mark.parametrize("codec", sorted(STDLIB_READERS))
def test_stdlib_readers_follow_streams_and_raise_on_a_cut(codec):
    both = COMPRESS[codec](FIRST) + COMPRESS[codec](SECOND)
    assert STDLIB_READERS[codec](io.BytesIO(both)).read() == TEXT
    with pytest.raises(EOFError, match="end-of-stream marker"):
        STDLIB_READERS[codec](io.BytesIO(both[: len(both) - 100])).read()
    # read1 bounds each call's output: a corrupt block loses at most one step.
    reader = STDLIB_READERS[codec](io.BytesIO(both))
    assert max(len(piece) for piece in iter(lambda: reader.read1(DECODE_STEP), b"")) <= DECODE_STEP


@pytest.mark.parametrize("codec", ["bz2", "xz"])
def test_stdlib_readers_end_quietly_at_a_damaged_stream_start(codec):
    """Why iter_decompressed checks that the reader read to the end of its input."""
    second = bytearray(COMPRESS[codec](SECOND))
    second[:4] = b"XXXX"
    assert STDLIB_READERS[codec](io.BytesIO(COMPRESS[codec](FIRST) + bytes(second))).read() == FIRST


def test_zstandard_stream_reader_returns_a_cut_frame_without_error():
    """Why zstd frames are followed with decompressobj, whose eof marks a complete frame."""
    blob = COMPRESS["zst"](TEXT)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob[: len(blob) // 2]), read_across_frames=True)
    assert len(reader.read()) < len(TEXT)  # and no error


# ---------------------------------------------------------------- iter_decompressed


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_concatenated_streams_decode_whole(codec):
    assert decode(COMPRESS[codec](FIRST) + COMPRESS[codec](SECOND), codec) == (TEXT, None)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_cut_in_the_second_stream_yields_the_first_then_raises(codec):
    first = COMPRESS[codec](FIRST)
    second = COMPRESS[codec](SECOND)
    decoded, error = decode(first + second[: len(second) // 2], codec)
    assert isinstance(error, TruncatedCompressedError)
    assert decoded.startswith(FIRST) and TEXT.startswith(decoded)
    assert f"{codec} stream cut short" in str(error)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_bytes_after_a_stream_that_start_no_stream_are_reported(codec):
    first, second = COMPRESS[codec](FIRST), bytearray(COMPRESS[codec](SECOND))
    second[:4] = b"XXXX"
    for blob in (first + bytes(second), first + b"trailing garbage"):
        decoded, error = decode(blob, codec)
        assert decoded == FIRST
        assert isinstance(error, CorruptCompressedError), codec


@pytest.mark.parametrize("codec", ["gz", "zst"])
def test_zero_padding_between_and_after_streams_is_skipped(codec):
    blob = COMPRESS[codec](FIRST) + bytes(100) + COMPRESS[codec](SECOND) + bytes(512)
    assert decode(blob, codec) == (TEXT, None)


@pytest.mark.parametrize("codec", ["bz2", "xz"])
def test_zero_padding_after_bz2_or_xz_is_reported_not_dropped(codec):
    """BZ2File and LZMAFile stop at padding; what follows it is counted as damage, never lost silently."""
    decoded, error = decode(COMPRESS[codec](FIRST) + bytes(64) + COMPRESS[codec](SECOND), codec)
    assert decoded == FIRST and isinstance(error, (CorruptCompressedError, TruncatedCompressedError))


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_raw_chunks_of_any_size_are_accepted(codec):
    blob = COMPRESS[codec](FIRST) + COMPRESS[codec](SECOND)
    rng = random.Random(1)
    cuts = sorted({0, len(blob), *(rng.randrange(len(blob)) for _ in range(50))})
    chunks = [piece for a, b in zip(cuts, cuts[1:]) for piece in (blob[a:b], b"")]  # empty chunks too
    assert b"".join(iter_decompressed(chunks, codec)) == TEXT
    assert list(iter_decompressed([], codec)) == []


@pytest.mark.parametrize("codec", ["bz2", "gz", "xz"])
def test_chunks_stay_bounded_for_a_highly_compressed_input(codec):
    zeros = bytes(24 << 20)
    blob = COMPRESS[codec](zeros)
    assert len(blob) < 1 << 20
    sizes = [len(chunk) for chunk in iter_decompressed(RawRange(io.BytesIO(blob)), codec, chunk_size=CHUNK_SIZE)]
    assert sum(sizes) == len(zeros)
    assert max(sizes) <= CHUNK_SIZE + DECODE_STEP


class FailingFile(io.BytesIO):
    """A file whose read fails after ``fail_after`` bytes, as a network read can."""

    def __init__(self, data: bytes, fail_after: int) -> None:
        super().__init__(data)
        self.fail_after = fail_after

    def read(self, size: int = -1) -> bytes:
        if self.tell() >= self.fail_after:
            raise ConnectionResetError("connection reset by peer")
        return super().read(size)


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_failing_file_read_is_not_reported_as_damage(codec):
    blob = COMPRESS[codec](TEXT)
    with pytest.raises(ConnectionResetError, match="connection reset by peer"):
        list(iter_decompressed(RawRange(FailingFile(blob, len(blob) // 2)), codec))


def test_raw_range_serves_only_its_bytes():
    data = bytes(range(256)) * 40
    raw = RawRange(io.BytesIO(data), 1000, 3000)
    assert raw.peek(4) == data[1000:1004] and raw.bytes_read == 4
    assert raw.read(10) == data[1000:1010]  # a full read across the peeked bytes
    assert raw.read(5000) == data[1010:3000]
    assert not raw.reached_end  # the reader has not asked past the end yet
    assert raw.read(1) == b"" and raw.reached_end
    assert raw.bytes_read == 2000
    assert RawRange(io.BytesIO(data), 100).read() == data[100:]


# ---------------------------------------------------------------- through the page reader


def test_damaged_stream_header_in_a_multistream_dump_is_counted_in_whole_and_range_reads(tmp_path):
    titles = [f"T{i}" for i in range(1, 13)]
    dump, _, sizes = write_multistream(tmp_path, titles, pages_per_stream=3)
    blob = bytearray(dump.read_bytes())
    damaged_at = sum(sizes[:3])  # the third page stream (pages 7..9)
    blob[damaged_at:damaged_at + 3] = b"XXX"
    dump.write_bytes(bytes(blob))

    records = list(iter_pages(str(dump)))
    assert [p.page_id for p in pages_of(records)] == list(range(1, 7))
    assert [d.reason for d in dead_of(records)] == ["corrupt_compressed"]

    # A range read spanning the damaged stream does not expect </mediawiki>: only the check reports it.
    records = list(iter_pages(str(dump), sizes[0], sum(sizes[:4])))
    assert [p.page_id for p in pages_of(records)] == list(range(1, 7))
    (dead,) = dead_of(records)
    assert dead.reason == "corrupt_compressed" and "do not start another stream" in dead.detail


def test_zstd_dump_cut_at_a_frame_boundary_is_a_truncated_document_not_a_cut_stream(tmp_path):
    xml = dump_xml(simple_pages(40, text_size=500)).encode()
    cut_at = xml.index(b"<page>", len(xml) // 2)
    path = tmp_path / "frames.xml.zst"
    path.write_bytes(COMPRESS["zst"](xml[:cut_at]) + COMPRESS["zst"](xml[cut_at:])[:-50])
    records = list(iter_pages(str(path)))
    assert [d.reason for d in dead_of(records)] == ["truncated_compressed"]
    path.write_bytes(COMPRESS["zst"](xml[:cut_at]))  # whole frames, but the document stops
    records = list(iter_pages(str(path)))
    assert [d.reason for d in dead_of(records)] == ["truncated_xml"]
    assert len(pages_of(records)) == xml[:cut_at].count(b"</page>")
