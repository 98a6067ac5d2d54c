"""Disambiguation pages, recognised by their templates or ``__DISAMBIG__``.

A page is a disambiguation page when it uses one of the wiki's disambiguation
templates (matched after normalisation: ``Template:``/local prefix removed,
``_`` = space, first letter case-insensitive, parameters ignored, so
``{{disambig|geo}}`` and ``{{Template:Disambiguation}}`` both match) or the
``__DISAMBIG__`` magic word (Extension:Disambiguator).

The lists are exact names, not prefixes: "Disambiguation needed" and
"Dablinks" are maintenance templates used on ordinary articles. Deliberately
NOT in the English list: set-index templates ({{Surname}}, {{Given name}},
{{Set index article}}, {{Ship index}}): Wikipedia treats those pages as
articles (lists of things sharing a name), not as disambiguation pages.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from pipelines.records import SiteInfo
from pipelines.wikitext.namespaces import NS_TEMPLATE, NamespaceTable, namespace_table, prefix_key
from pipelines.wikitext.textparts import contains
from pipelines.wikitext.titles import clean_title_text

_ENGLISH = (
    "Disambiguation", "Disambig", "Dab", "Disamb", "DAB", "Dis", "Disambiguation page",
    "Hndis", "Human name disambiguation", "Geodis", "Geo-dis", "Place name disambiguation",
    "Hospital disambiguation", "School disambiguation", "Letter disambiguation",
    "LetterDis", "Letter-NumberCombDisambig", "Number disambiguation", "Numberdis",
    "Airport disambiguation", "Call sign disambiguation", "Church disambiguation",
    "Genus disambiguation", "Species Latin name disambiguation", "Taxonomy disambiguation",
    "Chinese title disambiguation", "Mathematical disambiguation", "Math dab",
    "Road disambiguation", "Mil-unit-dis", "Military unit disambiguation",
    "Molecular formula disambiguation",
)

DEFAULT_DISAMBIGUATION_TEMPLATES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "en": _ENGLISH,
    "simple": _ENGLISH,
    "de": ("Begriffsklärung", "BKL", "Begriffsklärungsseite"),
    "fr": ("Homonymie", "Bandeau standard pour page d'homonymie", "Patronymie",
           "Toponymie", "Homonymie de personnes", "Homonymie de toponyme", "Paronymie"),
    "uk": ("Неоднозначність", "Багатозначність", "Disambig", "Disambiguation",
           "Неоднозначність-геопункт", "Багатозначні геопункти"),
    "ru": ("Неоднозначность", "Многозначность", "Disambig", "Disambiguation",
           "Неоднозначность/Фамилии", "Неоднозначность/Топонимы"),
    "es": ("Desambiguación", "Desambiguacion", "Desambig", "Des", "Disambig", "Dab"),
    "it": ("Disambigua", "Disambiguazione", "Disambig", "Dis"),
    "pt": ("Desambiguação", "Desambig", "Dab", "Disambig"),
    "nl": ("Dp", "Dpintro", "Disambig", "Doorverwijspagina"),
    "pl": ("Strona ujednoznaczniająca", "Disambig", "DisambigR"),
    "sv": ("Förgrening", "Gren", "Disambig", "Förgreningssida"),
    "ja": ("Aimai", "曖昧さ回避", "Disambig"),
    "zh": ("Disambig", "消歧义", "消歧義", "Dab"),
})

# Names understood on every wiki (old English templates are common everywhere).
UNIVERSAL_DISAMBIGUATION_TEMPLATES = ("Disambig", "Disambiguation")
DISAMBIGUATION_MAGIC_WORDS = ("__DISAMBIG__",)

# Template names: "{{" then the name up to "|", "}}", a newline or a nested "{{".
_TEMPLATE_NAME = re.compile(r"\{\{\s*([^{}|<>\[\]\n]+?)\s*(?=\||\}\}|\n|<!--)")
_TRANSCLUSION_MODIFIERS = ("subst:", "safesubst:", "msg:", "msgnw:", "raw:")


@dataclass(frozen=True, slots=True)
class DisambiguationConfig:
    """Which templates mark a disambiguation page, per language code or dbname.

    ``templates`` maps a language code ("en") or a dbname ("enwiki") to names;
    a dbname entry wins over its language. Languages with no entry use
    ``default_language``'s list. ``UNIVERSAL_DISAMBIGUATION_TEMPLATES`` and
    ``magic_words`` apply everywhere.
    """

    templates: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: DEFAULT_DISAMBIGUATION_TEMPLATES)
    default_language: str = "en"
    magic_words: tuple[str, ...] = DISAMBIGUATION_MAGIC_WORDS

    def names_for(self, site: SiteInfo) -> frozenset[str]:
        """Normalised template names (first letter folded) that mark a disambiguation page."""
        names = self.templates.get(site.dbname)
        if names is None:
            names = self.templates.get(site.language)
        if names is None:
            names = self.templates.get(self.default_language, ())
        return frozenset(_name_key(name) for name in (*names, *UNIVERSAL_DISAMBIGUATION_TEMPLATES))


def _name_key(name: str) -> str:
    """Template names are compared with ``_`` = space and the first letter case-folded."""
    name = clean_title_text(name)
    return name[:1].casefold() + name[1:]


MAX_CACHED_NAMES = 50_000  # per wiki; the same template names recur across pages
# id(table) -> (table, {name as written -> normalised name, or None: not a template})
_name_cache: dict[int, tuple[NamespaceTable, dict[str, str | None]]] = {}


def template_names(wikitext: str, site: SiteInfo) -> list[str]:
    """Normalised names of the templates ``wikitext`` uses, namespace prefix removed."""
    table = namespace_table(site)
    entry = _name_cache.get(id(table))
    if entry is None or entry[0] is not table:  # the entry holds the table: ids are not reused
        entry = _name_cache[id(table)] = (table, {})
    cache = entry[1]
    names = []
    for written in _TEMPLATE_NAME.findall(wikitext):
        name = cache.get(written, cache)
        if name is cache:
            if len(cache) >= MAX_CACHED_NAMES:
                cache.clear()
            name = cache[written] = _normalised_name(written, table)
        if name is not None:
            names.append(name)
    return names


def _normalised_name(name: str, table: NamespaceTable) -> str | None:
    """The key of the template named ``name`` (as written); None for a parser function
    ({{#if:}}, {{lc:}}) or a page of another namespace."""
    lowered = name.lower()
    for modifier in _TRANSCLUSION_MODIFIERS:
        if lowered.startswith(modifier):
            name = name[len(modifier):]
            break
    prefix, colon, rest = name.partition(":")
    if colon and table.by_name.get(prefix_key(prefix)) == NS_TEMPLATE:
        name = rest
    elif colon:
        return None
    return _name_key(name)


_DEFAULT_CONFIG = DisambiguationConfig()
MAX_CACHED_NAME_SETS = 16
# (id(config), id(site)) -> (config, site, config.names_for(site)): built once per job step, not per page
# (the entry holds both objects, so their ids are not reused while it lives).
_names_for_cache: dict[tuple[int, int], tuple[DisambiguationConfig, SiteInfo, frozenset[str]]] = {}


def _wanted_names(config: DisambiguationConfig, site: SiteInfo) -> frozenset[str]:
    entry = _names_for_cache.get((id(config), id(site)))
    if entry is None or entry[0] is not config or entry[1] is not site:
        if len(_names_for_cache) >= MAX_CACHED_NAME_SETS:
            _names_for_cache.clear()
        entry = _names_for_cache[id(config), id(site)] = (config, site, config.names_for(site))
    return entry[2]


def is_disambiguation(wikitext: str, site: SiteInfo,
                      config: DisambiguationConfig | None = None) -> bool:
    """True when the page uses a disambiguation template or magic word."""
    config = config or _DEFAULT_CONFIG
    upper = wikitext.upper() if contains(wikitext, "__") else ""  # (a two-character `in` is slow)
    if any(word.upper() in upper for word in config.magic_words):
        return True
    if "{{" not in wikitext:
        return False
    wanted = _wanted_names(config, site)
    return any(name in wanted for name in template_names(wikitext, site))
