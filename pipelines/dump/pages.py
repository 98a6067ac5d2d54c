"""Turn the bytes of one ``<page>...</page>`` element into a ``RawPage`` or a ``DeadLetter``.

Each page is parsed on its own with ElementTree, so broken XML costs that page
only. The page's last ``<revision>`` is used: history dumps list revisions
oldest first.
"""
from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from typing import Mapping

from pipelines.dump.stats import ReadStats
from pipelines.records import DeadLetter, RawPage, SiteInfo

DETAIL_LIMIT = 500  # characters of an error message kept in a dead letter

_ID_BEFORE_REVISION = re.compile(rb"<id>\s*([^<]*?)\s*</id>")
_TITLE = re.compile(rb"<title>(.*?)</title>", re.S)
# "#REDIRECT [[Target#Section|label]]" in any language ("#WEITERLEITUNG", "#ПЕРЕНАПРАВЛЕННЯ").
_REDIRECT_IN_TEXT = re.compile(r"\A\s*#[^\s\[]+\s*:?\s*\[\[\s*:?([^\]\|#\n]*)")


def namespace_prefixes(siteinfo: SiteInfo | None) -> dict[str, int]:
    """Map of normalised namespace names (and aliases) to ids, for titles without ``<ns>``."""
    prefixes: dict[str, int] = {}
    for namespace in (siteinfo.namespaces if siteinfo else ()):
        for name in (namespace.name, *namespace.aliases):
            if name:
                prefixes[_normalise_prefix(name)] = namespace.id
    return prefixes


def namespace_from_title(title: str, prefixes: Mapping[str, int]) -> int:
    """The namespace id a title's prefix names ("Category:X" -> 14), else 0 (main)."""
    prefix, colon, _ = title.partition(":")
    if not colon:
        return 0
    return prefixes.get(_normalise_prefix(prefix), 0)


def parse_page(
    page_xml: bytes,
    *,
    source: str = "",
    prefixes: Mapping[str, int] | None = None,
    stats: ReadStats | None = None,
) -> RawPage | DeadLetter:
    """Parse one ``<page>`` element (bytes, UTF-8) into a ``RawPage``.

    Returns a ``DeadLetter(stage="read")`` with reason ``bad_xml`` (not well
    formed), ``bad_page_id`` (missing or not a non-negative integer) or
    ``bad_title`` (missing or empty). ``prefixes`` (see ``namespace_prefixes``)
    resolves the namespace of pages without ``<ns>`` (old schemas); ``stats``
    counts what was derived or skipped.
    """
    try:
        page = ET.fromstring(page_xml)
    except ET.ParseError as error:
        return _dead_letter_from_bytes("bad_xml", page_xml, f"{error}", source)

    children = {}
    revisions = []
    redirect_element = None
    for child in page:
        tag = _local(child.tag)
        if tag == "revision":
            revisions.append(child)
        elif tag == "redirect":
            redirect_element = child
        elif tag not in children:
            children[tag] = child

    title = _text(children.get("title")).strip()
    page_id = _parse_int(_text(children.get("id")))
    if page_id is None or page_id < 0:
        shown = _text(children.get("id"))[:50] if "id" in children else "missing"
        return DeadLetter("read", "bad_page_id", None, title or None, f"page <id> is {shown!r}", source)
    if not title:
        return DeadLetter("read", "bad_title", page_id, None, "page has no <title>", source)

    ns = _parse_int(_text(children.get("ns")))
    if ns is None:
        if prefixes:
            ns = namespace_from_title(title, prefixes)
            if stats is not None:
                stats.ns_from_title += 1
        else:
            ns = 0
            if stats is not None:
                stats.ns_defaulted += 1

    revision = revisions[-1] if revisions else None
    if stats is not None and len(revisions) > 1:
        stats.older_revisions += len(revisions) - 1
    text, revision_id, timestamp = _revision_fields(revision)
    redirect = _redirect_target(redirect_element, text)
    return RawPage(page_id, ns, title, text, redirect, revision_id, timestamp)


def dead_letter_for_fragment(reason: str, page_head: bytes, detail: str, source: str) -> DeadLetter:
    """A dead letter for page bytes that cannot be parsed; id and title recovered by regex."""
    return _dead_letter_from_bytes(reason, page_head, detail, source)


def recover_page_id(page_head: bytes) -> int | None:
    """The page id from the raw bytes of a (possibly broken or partial) page, if readable."""
    revision_at = page_head.find(b"<revision")
    match = _ID_BEFORE_REVISION.search(page_head, 0, revision_at if revision_at >= 0 else len(page_head))
    return _parse_int(match.group(1).decode("utf-8", "replace")) if match else None


def recover_title(page_head: bytes) -> str | None:
    """The title from the raw bytes of a (possibly broken or partial) page, if readable."""
    match = _TITLE.search(page_head)
    if not match:
        return None
    return html.unescape(match.group(1).decode("utf-8", "replace")).strip() or None


def _dead_letter_from_bytes(reason: str, page_bytes: bytes, detail: str, source: str) -> DeadLetter:
    head = page_bytes[: 64 << 10]
    return DeadLetter("read", reason, recover_page_id(head), recover_title(head), detail[:DETAIL_LIMIT], source)


def _revision_fields(revision: ET.Element | None) -> tuple[str, int | None, str | None]:
    if revision is None:
        return "", None, None
    text, revision_id, timestamp = "", None, None
    for child in revision:
        tag = _local(child.tag)
        if tag == "text":
            text = "" if child.get("deleted") is not None else (child.text or "")
        elif tag == "id" and revision_id is None:
            revision_id = _parse_int(child.text or "")
        elif tag == "timestamp":
            timestamp = (child.text or "").strip() or None
    return text, revision_id, timestamp


def _redirect_target(element: ET.Element | None, text: str) -> str | None:
    if element is None:
        return None
    title = element.get("title")
    if title is not None:
        return title
    # Schemas before 0.5 wrote a bare <redirect/>: the target is only in the wikitext.
    match = _REDIRECT_IN_TEXT.match(text)
    return match.group(1).strip() if match else ""


def _normalise_prefix(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).casefold()


def _parse_int(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def _text(element: ET.Element | None) -> str:
    return "" if element is None else (element.text or "")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1] if "}" in tag else tag
