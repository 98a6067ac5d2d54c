"""Alias-table and entity-vocabulary rules (pure functions; Beam wiring in transforms.tables: BuildTables).

An alias row is (alias, entity, count, prior, sources):
  count   hyperlinks in the corpus whose anchor text is ``alias`` and that resolve to ``entity``
  prior   p(entity | alias) = count / (hyperlinks with that anchor text to any entity); 0.0
          for an alias never used as anchor text (a title or redirect title only)
  sources sorted subset of "anchor", "title", "redirect"
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from schemas import SPECIAL_ENTITIES

SOURCE_ANCHOR = "anchor"
SOURCE_TITLE = "title"
SOURCE_REDIRECT = "redirect"

MAX_ALIAS_CHARS = 256  # longer anchor texts are sentences, not names
_WS = re.compile(r"\s+")


def clean_alias(text: str) -> str | None:
    """Whitespace-collapsed alias, or None when empty or too long to be a name."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        alias = text  # the common case: no whitespace but single ASCII spaces inside (no other is printable)
    else:
        alias = _WS.sub(" ", text).strip()
    if not alias or len(alias) > MAX_ALIAS_CHARS:
        return None
    return alias


def merge_alias_evidence(values: Iterable[tuple[int, frozenset]]) -> tuple[int, frozenset]:
    """Sum hyperlink counts and unite sources (associative: usable as a Beam combiner)."""
    total = 0
    sources: frozenset = frozenset()
    for count, srcs in values:
        total += count
        sources = sources | srcs
    return total, sources


def alias_rows(alias: str, per_entity: Iterable[tuple[str, int, frozenset]]) -> list[dict]:
    """Rows of one alias, sorted by entity, with p(entity | alias) from anchor counts."""
    entries = sorted(per_entity)
    total = sum(count for _, count, _ in entries)
    return [
        {
            "alias": alias,
            "entity": entity,
            "count": int(count),
            "prior": (count / total) if total else 0.0,
            "sources": sorted(sources),
        }
        for entity, count, sources in entries
    ]


def vocab_order_key(entity_count: tuple[str, int]) -> tuple[int, str]:
    """Most-linked first; ties broken by title, so the same input gives the same ids."""
    entity, count = entity_count
    return (-count, entity)


def vocab_cutoff(histogram: dict[int, int], size: int) -> tuple[int, int]:
    """Where the ``size`` most-linked entities end, from {link count: entities with it}.

    Returns ``(c, ties)``: every entity with more than ``c`` links is in; of
    those with exactly ``c``, the first ``ties`` by title are, or all of them
    when ``ties`` is -1. ``(0, -1)`` when all entities fit.
    """
    if sum(histogram.values()) <= size:
        return 0, -1
    taken = 0
    for count in sorted(histogram, reverse=True):
        n = histogram[count]
        if taken + n >= size:
            need = size - taken
            return count, (need if need < n else -1)
        taken += n
    return 0, -1  # unreachable: the total exceeds size


def vocab_rows(top: Iterable[tuple[str, int]]) -> list[dict]:
    """Entity-vocabulary rows: the reserved ids 0..2, then entities by vocab_order_key."""
    rows = [{"entity_id": i, "entity": name, "count": 0} for i, name in enumerate(SPECIAL_ENTITIES)]
    for offset, (entity, count) in enumerate(sorted(top, key=vocab_order_key)):
        rows.append({"entity_id": len(SPECIAL_ENTITIES) + offset, "entity": entity, "count": int(count)})
    return rows
