"""Cut a tokenised article into fixed-size, overlapping passages.

Window ``k`` starts at token ``k * (window - overlap)``, so consecutive
windows share exactly ``overlap`` tokens (EDMem: 128-token passages with a
10-token overlap, so that an entity is less often split between passages).
The last window may be shorter; no window lies wholly inside the previous one
because cutting stops as soon as a window reaches the article's end. No
special tokens are added here.

A mention is copied, re-based to window coordinates, into every window that
contains it whole, and is never cut: a mention straddling a window edge is
absent from that window (and present in the neighbour that holds it whole,
if any; one longer than the window fits nowhere).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from wikiedm.tokenizer import TokenMention


@dataclass(slots=True)
class Window:
    """One passage: ``token_ids`` are the article's tokens from ``token_start``."""

    index: int  # 0-based position of the window in its article
    token_start: int  # offset of the window's first token in the article
    token_ids: list[int]
    mentions: list[TokenMention] = field(default_factory=list)  # window-relative, sorted


def window_starts(n_tokens: int, window: int, overlap: int) -> list[int]:
    """Start offsets of the windows of an article of ``n_tokens`` tokens."""
    _check_window_args(window, overlap)
    if n_tokens <= 0:
        return []
    step = window - overlap
    starts = [0]
    while starts[-1] + window < n_tokens:
        starts.append(starts[-1] + step)
    return starts


def cut_windows(
    token_ids: Sequence[int],
    mentions: Sequence[TokenMention],
    *,
    window: int = 128,
    overlap: int = 10,
) -> list[Window]:
    """Split ``token_ids`` into overlapping windows, each with its whole mentions."""
    n_tokens = len(token_ids)
    starts = window_starts(n_tokens, window, overlap)
    windows = [
        Window(index=k, token_start=s, token_ids=list(token_ids[s : s + window]))
        for k, s in enumerate(starts)
    ]
    if not windows:
        _check_mentions(mentions, n_tokens)
        return windows
    step = window - overlap
    last = len(windows) - 1
    for m in sorted(_check_mentions(mentions, n_tokens), key=_mention_order):
        # Windows holding m whole: k*step <= m.token_start and m.token_end <= k*step + window.
        first_k = max(0, -(-(m.token_end - window) // step))  # ceil division
        last_k = min(last, m.token_start // step)
        for k in range(first_k, last_k + 1):
            w = windows[k]
            w.mentions.append(TokenMention(m.token_start - w.token_start, m.token_end - w.token_start, m.mention))
    return windows


def _mention_order(m: TokenMention) -> tuple[int, int]:
    return (m.token_start, m.token_end)


def _check_window_args(window: int, overlap: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < window:
        raise ValueError(f"overlap must be an int with 0 <= overlap < window ({window}), got {overlap!r}")


def _check_mentions(mentions: Sequence[TokenMention], n_tokens: int) -> Sequence[TokenMention]:
    for m in mentions:
        if not 0 <= m.token_start < m.token_end <= n_tokens:
            raise ValueError(
                f"mention token span [{m.token_start}, {m.token_end}) is empty or outside "
                f"the article's {n_tokens} tokens: {m.mention!r}"
            )
    return mentions
