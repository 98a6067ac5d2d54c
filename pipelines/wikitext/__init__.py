"""Wikitext -> plain text with hyperlink mentions; titles, redirects, disambiguation.

Pure functions, no Beam. The public API:

* :func:`extract_article` -> :class:`Extraction` (text, links, counts);
  :class:`ExtractConfig`; :class:`ExtractionError` (with a ``reason`` code).
* :func:`parse_link_target` -> :class:`LinkTarget`; :func:`normalize_title`.
* :func:`redirect_target`; :func:`is_disambiguation`, :class:`DisambiguationConfig`.
* :func:`prepass` (used by ``extract_article``; exposed for benchmarks).
"""
from pipelines.wikitext.disambiguation import (
    DEFAULT_DISAMBIGUATION_TEMPLATES,
    DisambiguationConfig,
    is_disambiguation,
    template_names,
)
from pipelines.wikitext.errors import ExtractionError
from pipelines.wikitext.extract import ExtractConfig, Extraction, extract_article
from pipelines.wikitext.namespaces import NamespaceTable, namespace_table
from pipelines.wikitext.prepass import PrepassResult, prepass
from pipelines.wikitext.redirects import REDIRECT_MAGIC_WORDS, redirect_target
from pipelines.wikitext.titles import LinkTarget, normalize_title, parse_link_target

__all__ = [
    "DEFAULT_DISAMBIGUATION_TEMPLATES", "DisambiguationConfig", "ExtractConfig",
    "Extraction", "ExtractionError", "LinkTarget", "NamespaceTable", "PrepassResult",
    "REDIRECT_MAGIC_WORDS", "extract_article", "is_disambiguation", "namespace_table",
    "normalize_title", "parse_link_target", "prepass", "redirect_target", "template_names",
]
