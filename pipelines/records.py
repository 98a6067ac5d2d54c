"""Typed records that flow between the pipeline's steps.

Slotted dataclasses, explicit about their fields. They pickle as (class,
field values) (:class:`_PicklesAsTuple`): about four times faster than the
default pickling of slotted dataclasses, which matters for an Article with
hundreds of links crossing two shuffles. Pure logic modules
(``pipelines.dump``, ``pipelines.wikitext``, ``pipelines.corpus``) produce and
consume these; the Beam transforms in ``pipelines.transforms`` only move them
around. The records shared with the trainer and the linker (:class:`Mention`)
live in :mod:`wikiedm.records`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from wikiedm.records import Mention, _pickles_as_tuple, _PicklesAsTuple  # noqa: F401 - re-exported


@_pickles_as_tuple
@dataclass(frozen=True, slots=True)
class Namespace(_PicklesAsTuple):
    """One namespace of a wiki, as declared in the dump's ``<siteinfo>``."""

    id: int
    name: str  # the wiki's local name ("" for the main namespace), e.g. "Datei"
    case: str = "first-letter"  # "first-letter" or "case-sensitive"
    aliases: tuple[str, ...] = ()  # other names that resolve here ("Image", "Bild", ...)


@_pickles_as_tuple
@dataclass(frozen=True, slots=True)
class SiteInfo(_PicklesAsTuple):
    """What the dump says about its wiki; drives title and link parsing."""

    dbname: str = ""  # "enwiki", "ukwiki"; "" when unknown
    sitename: str = ""
    base: str = ""  # URL of the main page
    generator: str = ""  # "MediaWiki 1.41.0-wmf.1"
    case: str = "first-letter"  # the wiki-wide default of <case>
    namespaces: tuple[Namespace, ...] = ()
    schema_version: str = ""  # "0.10", "0.11" from the export element
    from_dump: bool = True  # False when <siteinfo> was missing and defaults are used

    @property
    def language(self) -> str:
        """Language code from the dbname ("enwiki" -> "en", "zh_yuewiki" -> "zh-yue")."""
        db = self.dbname
        for suffix in ("wiki", "wiktionary", "wikibooks", "wikinews", "wikiquote",
                       "wikisource", "wikiversity", "wikivoyage"):
            if db.endswith(suffix) and len(db) > len(suffix):
                return db[: -len(suffix)].replace("_", "-")
        return ""


@_pickles_as_tuple
@dataclass(slots=True)
class RawPage(_PicklesAsTuple):
    """One ``<page>`` of the dump, before any wikitext processing."""

    page_id: int
    ns: int
    title: str  # as in the dump, e.g. "Kategorie:Foo"
    text: str  # wikitext of the latest revision in the file ("" when absent)
    redirect: str | None = None  # the <redirect title="..."/> attribute, when present
    revision_id: int | None = None
    timestamp: str | None = None


@_pickles_as_tuple
@dataclass(slots=True)
class DeadLetter(_PicklesAsTuple):
    """A unit of input the job could not use; written to OUT/dead_letters/."""

    stage: str  # "read", "extract", "label", "tokenize", ...
    reason: str  # a short stable code: "truncated_compressed", "parser_error", ...
    page_id: int | None = None
    title: str | None = None
    detail: str = ""  # the error message, truncated
    source: str = ""  # file (and byte range) the unit came from


@_pickles_as_tuple
@dataclass(slots=True)
class LinkMention(_PicklesAsTuple):
    """A hyperlink in an article's plain text: ``text[start:end] == surface``."""

    start: int
    end: int
    surface: str
    target: str  # normalised title of the linked page (main namespace, no #fragment)


@_pickles_as_tuple
@dataclass(slots=True)
class Article(_PicklesAsTuple):
    """An article's plain text and its hyperlink mentions, targets not yet resolved."""

    page_id: int
    title: str  # normalised title
    text: str
    links: list[LinkMention] = field(default_factory=list)
    revision_id: int | None = None  # picks the latest of duplicate page ids in a broken dump


@_pickles_as_tuple
@dataclass(slots=True)
class LabeledArticle(_PicklesAsTuple):
    """An article with all its mentions resolved and labelled, ready to tokenise."""

    page_id: int
    title: str
    text: str
    mentions: list[Mention] = field(default_factory=list)  # sorted by start, non-overlapping
