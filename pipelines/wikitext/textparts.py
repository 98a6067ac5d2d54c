"""Pieces shared by the two wikitext renderers (:mod:`pipelines.wikitext.extract`'s mwparserfromhell walk
and :mod:`pipelines.wikitext.fastrender`'s fast path): the output builder, the block and dropped HTML
tags, the Unicode link-trail rule and a quick substring test. Both renderers import this module; neither imports the other's
internals, so there is no import circle."""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

BLOCK_TAGS = frozenset((
    "p", "div", "blockquote", "center", "ul", "ol", "li", "dl", "dt", "dd", "h1", "h2",
    "h3", "h4", "h5", "h6", "tr", "td", "th", "caption", "figure", "figcaption", "poem",
    "hr", "br",
))
DROPPED_HTML_TAGS = {"table": "links_in_table", "style": "links_in_tag", "script": "links_in_tag"}


def contains(text: str, needle: str) -> bool:
    """``needle in text``, for a needle whose first character is rare in ``text``: found by memchr.

    (CPython searches for a short needle character by character; on a page this is ~10x faster
    when the first character occurs a few dozen times, as "&" and "_" do.)
    """
    first = needle[0]
    find = text.find
    at = find(first)
    while at >= 0:
        if text.startswith(needle, at):
            return True
        at = find(first, at + 1)
    return False


@dataclass(slots=True)
class Builder:
    """Output pieces with a running length, and the mention spans recorded so far."""

    parts: list[str] = field(default_factory=list)
    size: int = 0
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, target

    def emit(self, piece: str) -> None:
        if piece:
            self.parts.append(piece)
            self.size += len(piece)

    def text(self) -> str:
        return "".join(self.parts)


_SCRIPTS_WITHOUT_TRAILS = (
    (0x0E00, 0x0EFF), (0x0F00, 0x0FFF), (0x1000, 0x109F), (0x1100, 0x11FF), (0x1780, 0x17FF),
    (0x2E80, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F), (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x20000, 0x3FFFF),
)


def _is_trail_char(char: str, previous_is_letter: bool) -> bool:
    if char.isalpha():
        if char.isupper() or char.istitle():
            return False
        code = ord(char)
        return not any(low <= code <= high for low, high in _SCRIPTS_WITHOUT_TRAILS)
    # Combining marks (Devanagari vowel signs, ...) continue a word.
    return previous_is_letter and unicodedata.category(char)[0] == "M"


def unicode_trail_length(text: str) -> int:
    """Length of the link trail at the start of ``text`` under the Unicode rule."""
    length = 0
    for char in text:
        if not _is_trail_char(char, length > 0):
            break
        length += 1
    return length
