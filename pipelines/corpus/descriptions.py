"""Entity descriptions: the lead paragraph of an entity's article (BLINK's candidate text)."""
from __future__ import annotations

DEFAULT_MAX_CHARS = 2000
_SENTENCE_END = (".", "!", "?", ":", ";", "。", "！", "？", "।")


def first_paragraph(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The first prose line of an article's plain text, cut at a word boundary.

    The extracted text has one paragraph, heading or list item per line. A
    heading or a stray caption is short and does not end a sentence, so the
    lead paragraph is the first line that is long or ends like a sentence.
    """
    for line in text.split("\n"):
        paragraph = line.strip()
        if not paragraph:
            continue
        if len(paragraph) < 80 and not paragraph.endswith(_SENTENCE_END):
            continue
        if len(paragraph) <= max_chars:
            return paragraph
        cut = paragraph.rfind(" ", 0, max_chars)
        return paragraph[: cut if cut > max_chars // 2 else max_chars].rstrip()
    return ""
