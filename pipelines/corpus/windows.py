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

import numpy as np

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
    return list(range(0, window_count(n_tokens, window, overlap) * (window - overlap), window - overlap))


def window_count(n_tokens: int, window: int, overlap: int) -> int:
    """How many windows an article of ``n_tokens`` tokens has: window k starts at ``k * (window - overlap)``,
    and cutting stops at the first window that reaches the end (``start + window >= n_tokens``)."""
    _check_window_args(window, overlap)
    if n_tokens <= 0:
        return 0
    return 1 + max(0, -(-(n_tokens - window) // (window - overlap)))


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
    _check_mentions(mentions, n_tokens)
    windows = [
        Window(index=k, token_start=s, token_ids=list(token_ids[s : s + window]))
        for k, s in enumerate(starts)
    ]
    if not windows or not mentions:
        return windows
    spans = window_mentions(
        n_tokens,
        np.array([m.token_start for m in mentions], dtype=np.int64),
        np.array([m.token_end for m in mentions], dtype=np.int64),
        window=window,
        overlap=overlap,
    )
    for k, i, start, end in zip(spans.window.tolist(), spans.mention.tolist(), spans.token_start.tolist(),
                                spans.token_end.tolist()):
        windows[k].mentions.append(TokenMention(start, end, mentions[i].mention))
    return windows


@dataclass(frozen=True, slots=True)
class WindowMentions:
    """Which windows hold which mentions whole (:func:`window_mentions`): one entry per (window, mention)
    pair, by window, and in each window by the mention's (token_start, token_end)."""

    window: np.ndarray  # int64: the window's index
    mention: np.ndarray  # int64: the mention's position in the given arrays
    token_start: np.ndarray  # int64: the mention's token span, window-relative
    token_end: np.ndarray


def window_mentions(
    n_tokens: int,
    token_start: np.ndarray,
    token_end: np.ndarray,
    *,
    window: int = 128,
    overlap: int = 10,
) -> WindowMentions:
    """:func:`cut_windows`'s placement of mentions, as arrays: the windows of an article of ``n_tokens``
    tokens that hold each mention ``[token_start, token_end)`` whole (spans within the article, non-empty)."""
    n_windows = window_count(n_tokens, window, overlap)
    step = window - overlap
    order = np.lexsort((token_end, token_start))  # stable: mentions with equal spans keep their order
    # Windows holding m whole: k*step <= m.token_start and m.token_end <= k*step + window.
    first_k = np.maximum(0, -((window - token_end[order]) // step))  # ceil((token_end - window) / step)
    last_k = np.minimum(n_windows - 1, token_start[order] // step)
    counts = np.maximum(0, last_k - first_k + 1)
    total = int(counts.sum())
    mention = np.repeat(order, counts)
    pair_offsets = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.repeat(first_k, counts) + (np.arange(total, dtype=np.int64) - pair_offsets)
    by_window = np.argsort(k, kind="stable")
    k, mention = k[by_window], mention[by_window]
    window_start = k * step
    return WindowMentions(k, mention, token_start[mention] - window_start, token_end[mention] - window_start)


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
