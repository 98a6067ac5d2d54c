"""The one error raised when a page's wikitext cannot be turned into text."""
from __future__ import annotations


class ExtractionError(ValueError):
    """The wikitext could not be processed; ``reason`` is a stable snake_case code.

    Reason codes: ``input_too_large``, ``nesting_too_deep``, ``parser_error``
    (mwparserfromhell raised, e.g. "C tokenizer exited with non-empty token
    stack"), ``recursion_error``, ``render_error`` (an unexpected parse-tree shape).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.detail = message
