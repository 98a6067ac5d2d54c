"""Typed records shared by the corpus job and the tools that read its output (tokenizer, linker).

Slotted dataclasses that pickle as (class, field values) (:class:`_PicklesAsTuple`): about four
times faster than the default pickling of slotted dataclasses, which matters for records that cross
Beam shuffles by the hundred million. The corpus job's own records are in :mod:`pipelines.records`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass


class _PicklesAsTuple:
    """Pickle a slotted dataclass as (class, its field values), like a tuple."""

    __slots__ = ()
    _field_values: operator.attrgetter

    def __reduce__(self):
        return type(self), self._field_values(self)


def _pickles_as_tuple(cls):
    """Class decorator (outermost, after @dataclass): set up the fast __reduce__."""
    names = tuple(cls.__dataclass_fields__)
    getter = operator.attrgetter(*names)
    cls._field_values = staticmethod((lambda obj: (getter(obj),)) if len(names) == 1 else getter)
    return cls


@_pickles_as_tuple
@dataclass(slots=True)
class Mention(_PicklesAsTuple):
    """A labelled mention in character offsets of the article text."""

    start: int
    end: int
    surface: str
    entity: str  # resolved entity title
    source: str  # one of schemas.corpus.MENTION_SOURCES
