"""Read the ``<siteinfo>`` header of a dump: wiki name, case rule, namespaces, schema.

Only the head of the file is decompressed: reading stops at the first
``<page>``, at ``</siteinfo>``, or after ``MAX_HEADER_BYTES``, so this is cheap
even on a 100 GB dump (and on a multistream dump reads only its first stream).
"""
from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET

from pipelines.dump.errors import DumpError
from pipelines.dump.stream import open_xml_stream
from pipelines.records import Namespace, SiteInfo

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 4 << 20  # real headers are ~10 KB; this only bounds a damaged one

_ROOT_START_TAG = re.compile(rb"<(?:[\w.-]+:)?mediawiki(?=[\s/>])[^>]*>", re.S)
_XMLNS = re.compile(rb"""\sxmlns\s*=\s*(["'])(.*?)\1""", re.S)
_VERSION_ATTRIBUTE = re.compile(rb"""\sversion\s*=\s*(["'])(.*?)\1""", re.S)
_EXPORT_VERSION = re.compile(r"export-(\d+\.\d+)")
_SITEINFO = re.compile(rb"<siteinfo\s*>.*?</siteinfo\s*>", re.S)


def read_siteinfo(path: str) -> SiteInfo:
    """Read the header of the dump at ``path`` and return its ``SiteInfo``.

    A dump without a ``<siteinfo>`` (or with one too damaged to parse) gives
    ``SiteInfo(from_dump=False, namespaces=(), schema_version=...)``: the caller
    decides how to count it. Raises ``DumpNotFoundError`` /
    ``NotAMediaWikiDumpError`` like every reader.
    """
    stream = open_xml_stream(path)
    try:
        return parse_siteinfo(_read_header_bytes(stream.chunks), name=path)
    finally:
        stream.close()


def parse_siteinfo(head: bytes, *, name: str = "") -> SiteInfo:
    """Build a ``SiteInfo`` from the start of a dump (root tag up to before the first page)."""
    first_page = head.find(b"<page>")
    header = head if first_page < 0 else head[:first_page]
    schema_version = schema_version_of(header)
    match = _SITEINFO.search(header)
    if match is None:
        return SiteInfo(from_dump=False, namespaces=(), schema_version=schema_version)
    try:
        element = ET.fromstring(match.group(0))
    except ET.ParseError as error:
        log.warning("unparseable <siteinfo> in %s (%s); using defaults", name or "dump", error)
        return SiteInfo(from_dump=False, namespaces=(), schema_version=schema_version)
    return _siteinfo_from_element(element, schema_version)


def schema_version_of(header: bytes) -> str:
    """The export schema version ("0.10") from the root tag's xmlns or version attribute."""
    root = _ROOT_START_TAG.search(header)
    if root is None:
        return ""
    tag = root.group(0)
    xmlns = _XMLNS.search(tag)
    if xmlns:
        found = _EXPORT_VERSION.search(xmlns.group(2).decode("utf-8", "replace"))
        if found:
            return found.group(1)
    version = _VERSION_ATTRIBUTE.search(tag)
    return version.group(2).decode("utf-8", "replace").strip() if version else ""


def _siteinfo_from_element(siteinfo: ET.Element, schema_version: str) -> SiteInfo:
    fields = {_local(child.tag): (child.text or "").strip() for child in siteinfo}
    default_case = fields.get("case") or "first-letter"
    namespaces: list[Namespace] = []
    for container in siteinfo:
        if _local(container.tag) != "namespaces":
            continue
        for element in container:
            namespace = _namespace_from_element(element, default_case)
            if namespace is not None:
                namespaces.append(namespace)
    return SiteInfo(
        dbname=fields.get("dbname", ""),
        sitename=fields.get("sitename", ""),
        base=fields.get("base", ""),
        generator=fields.get("generator", ""),
        case=default_case,
        namespaces=tuple(namespaces),
        schema_version=schema_version,
        from_dump=True,
    )


def _namespace_from_element(element: ET.Element, default_case: str) -> Namespace | None:
    if _local(element.tag) != "namespace":
        return None
    try:
        key = int(element.get("key", ""))
    except ValueError:
        log.warning("namespace without an integer key skipped: %r", ET.tostring(element)[:200])
        return None
    return Namespace(id=key, name=(element.text or "").strip(), case=element.get("case") or default_case)


def _read_header_bytes(chunks) -> bytes:
    """Decompressed bytes up to the first page, ``</siteinfo>``, or the size bound."""
    parts: list[bytes] = []
    size = 0
    tail = b""
    try:
        for chunk in chunks:
            parts.append(chunk)
            size += len(chunk)
            window = tail + chunk
            if b"<page>" in window or b"</siteinfo>" in window or size >= MAX_HEADER_BYTES:
                break
            tail = window[-16:]
    except DumpError as error:
        # A header cut or damaged mid-way: parse what came; the page reader reports the damage.
        log.warning("dump header damaged: %s", error)
    return b"".join(parts)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
