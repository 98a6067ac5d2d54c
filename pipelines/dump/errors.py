"""Exceptions raised while opening or decoding a MediaWiki dump.

Errors that make a whole file unusable (missing, not a dump) are raised to the
caller. Damage found mid-stream (a cut or corrupt compressed stream) is raised
by the low-level decoders and turned into a ``DeadLetter`` by the page reader,
after every page decoded before the damage has been delivered.
"""
from __future__ import annotations


class DumpError(Exception):
    """Base class of every error about a dump file; the message is one line."""


class DumpNotFoundError(DumpError):
    """The path does not exist on its filesystem."""


class NotAMediaWikiDumpError(DumpError):
    """The file (once decompressed) is not a MediaWiki XML export."""


class TruncatedCompressedError(DumpError):
    """The compressed bytes ended before the decompressor reached end of stream."""


class CorruptCompressedError(DumpError):
    """The decompressor rejected the data (bad magic, CRC error, garbage)."""


class BadEncodingError(DumpError):
    """The decompressed bytes are not valid in the encoding announced by the BOM."""
