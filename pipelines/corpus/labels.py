"""Heuristic labels for unlinked mentions (EDMem §3.3.1).

Wikipedia links an entity once or twice per article; later mentions are
plain text. EDMem labels them with the alias table T: in each page, an
unlinked occurrence of an alias of

(a) an entity hyperlinked anywhere in the same page -> ``"same_page_alias"``,
(b) the page's own (title) entity                  -> ``"title_alias"``,

becomes a mention of that entity. A further, separately versioned rule:

(c) an unlinked occurrence of a page's own anchor text that has no letter
    (a year, a number: "[[1880]]" then "1880 року")  -> ``"same_page_number"``.
    Such aliases are refused by ``require_letter`` for (a), since a number
    read from the global alias table means little; one the page itself links
    is labelled with the page's entity, at number boundaries ("1880" is not
    found in "1,880", "1880.5" or "1880-х"). ``label_numbers`` switches it off. The Beam job joins each page with the
alias-table rows of its candidate entities and hands them here as
:class:`AliasCandidate`; everything in this module is pure and per page.

Matching rules
--------------
* Whole words only. A word character is a letter, digit, combining mark,
  connector punctuation (``_``) or ZWJ/ZWNJ, in any script (Unicode
  categories, so Cyrillic, Greek, Devanagari, accented Latin... all work).
  A match may not continue a word at either end: "Paris" is not found in
  "Parisian", but is found in "(Paris)", "Paris's" and "Paris-based".
* Scripts written without spaces (Han, Hiragana, Katakana, Thai, Lao, Khmer,
  Myanmar, Tibetan) have no word boundaries to check. With
  ``match_unspaced_scripts`` (default) an alias is matched at any character
  there; otherwise those characters count as word characters and a match
  must be delimited by spaces or punctuation like elsewhere. Hangul is
  treated as a spaced script (Korean separates words with spaces), so an
  alias followed by an attached particle ("서울에서") is not matched.
* Whitespace characters are compared as plain spaces (a no-break space in the
  text matches a space in the alias); runs of spaces are not collapsed.
* Longest first, greedily: all occurrences of all aliases are found, then
  taken longest first (ties: leftmost), skipping any that overlaps a
  hyperlink or an already accepted label. "New York City" wins over
  "New York"; a hyperlink's span is never relabelled.
* One alias string naming two usable candidate entities of the page is
  resolved by ``ambiguity``: ``"prior"`` takes the higher p(entity | alias),
  ties to the alphabetically first entity title; ``"skip"`` labels nothing;
  ``"page"`` (default) first asks the page: when the page links the alias
  text itself to just one of them, that one; to several, at each occurrence
  the entity of the nearest such link before it (else the first after), as
  an author who wrote "[[Doric order|Doric]]" in one section and
  "[[Dorians|Doric]]" in another means; otherwise the prior.
  Before any policy, the page's own entity wins for its own title (with or
  without qualifier) and trusted redirects: in "Georgia (country)", "Georgia"
  is the country even though the linked U.S. state has a higher prior.

An entity can be both linked in the page and its title entity: the caller
may send one candidate per origin; they are merged, and the label's source
is ``"title_alias"`` (the title rule is the more specific reason), unless
``label_title_entity`` is off, when it is ``"same_page_alias"``.

Speed: one Aho-Corasick pass (pyahocorasick, in C) over the folded text
finds every occurrence of every alias of the page in time linear in the text
and the hits; only hits are checked in Python, for whole-word boundaries.
Aliases and variants whose tokens are not in the page in a row never reach the
automaton (most variants), and what depends only on an alias (its tokens, its
variants) is cached across pages.
"""
from __future__ import annotations

import bisect
import functools
import operator
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, fields
from typing import Iterable, Sequence

import ahocorasick

from pipelines.corpus.alias_table import SOURCE_REDIRECT, SOURCE_TITLE
from schemas.corpus import MentionSource
from wikiedm.fields import option
from wikiedm.records import Mention
from wikiedm.stopwords import resolve_stopwords, stopword_spec_for_language

LINKED = "linked"
TITLE = "title"
ORIGINS = (LINKED, TITLE)

SAME_PAGE_ALIAS = MentionSource.SAME_PAGE_ALIAS
TITLE_ALIAS = MentionSource.TITLE_ALIAS
SAME_PAGE_NUMBER = MentionSource.SAME_PAGE_NUMBER
ALIAS_FIRST_LETTER_CASE = MentionSource.ALIAS_FIRST_LETTER_CASE
ALIAS_PLURAL_EN = MentionSource.ALIAS_PLURAL_EN
ALIAS_POSSESSIVE_EN = MentionSource.ALIAS_POSSESSIVE_EN
VARIANT_SOURCES = (ALIAS_FIRST_LETTER_CASE, ALIAS_PLURAL_EN, ALIAS_POSSESSIVE_EN)
LABEL_SOURCES = (SAME_PAGE_ALIAS, TITLE_ALIAS, SAME_PAGE_NUMBER, *VARIANT_SOURCES)

# Languages whose text the English morphology rules (plural, possessive) fit: English Wikipedia and
# Simple English Wikipedia. Other languages inflect otherwise; those rules stay off there.
ENGLISH_LANGUAGES = frozenset({"en", "simple"})
FIRST_LETTER = "first-letter"  # siteinfo <case>: titles ignore their first letter's case

AMBIGUITY_POLICIES = ("page", "prior", "skip")

# Languages written (mostly) without spaces or with short names: 2-character aliases are real names there.
SHORT_NAME_LANGUAGES = frozenset(
    {"zh", "ja", "ko", "th", "lo", "km", "my", "bo", "dz", "wuu", "gan", "yue", "lzh", "zh-yue", "zh-classical"}
)

# Blocks of scripts written without spaces: Thai, Lao, Tibetan, Myanmar, Khmer, Kana, CJK ideographs.
_UNSPACED_RANGES = (
    "\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u19e0-\u19ff\ua9e0-\ua9ff\uaa60-\uaa7f"
    "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0002fa1f\U00030000-\U000323af"
)
_UNSPACED_CHAR = re.compile(rf"[{_UNSPACED_RANGES}]")
# Word tokens as the matcher's word rules see them: a whole-word occurrence of an alias
# starts at a token of the text equal to the alias's first token, so aliases whose first
# token is not in the page are skipped before the automaton is built (exact, and cheap).
_TOKENS_SPLITTING_UNSPACED = re.compile(rf"[^\W{_UNSPACED_RANGES}]+|[{_UNSPACED_RANGES}]|[^\w\s]")
_TOKENS_WHOLE_WORDS = re.compile(r"\w+|[^\w\s]")
_DISAMBIGUATION_SUFFIX = re.compile(r"\s+\([^()]+\)$")
_JOINERS = frozenset("\u200c\u200d")  # ZWNJ/ZWJ sit inside Persian and Indic words
# Spaces and ASCII punctuation never join a word: most match edges, decided without _joins.
_ASCII_NON_WORD = frozenset(chr(cp) for cp in range(128) if not (chr(cp).isalnum() or chr(cp) == "_"))

# Every single-code-point Unicode space maps to " ", so a text's &nbsp; matches an alias's space.
_SPACE_TO_BLANK = {cp: " " for cp in range(0x3000 + 1) if chr(cp).isspace() and cp != 0x20}
_OTHER_SPACE = re.compile("[" + "".join(map(chr, _SPACE_TO_BLANK)) + "]")  # sub() is ~10x translate()
assert not any(chr(cp).isprintable() for cp in _SPACE_TO_BLANK)  # what _fold's quick test relies on


@dataclass(frozen=True, slots=True)
class AliasCandidate:
    """One alias of one candidate entity of a page, joined from the alias table."""

    alias: str
    entity: str
    count: int  # hyperlinks in the whole corpus with anchor text == alias to this entity
    prior: float  # p(entity | alias) over hyperlinks; 0 when the alias was never an anchor
    origin: str  # "linked": hyperlinked in this page; "title": the page's own entity
    sources: tuple[str, ...] = ()  # alias-table sources (anchor, title, redirect); () when unknown


@dataclass(frozen=True, slots=True)
class LabelConfig:
    """Switches and thresholds of the missing-mention labeller (CLI flags)."""

    min_alias_chars: int = option(
        3,
        "Aliases shorter than this many characters are never used. 3 keeps 'USA', 'BBC', 'Ulm' and "
        "drops 'US', 'UK', 'Li', which collide with abbreviations and words; use 2 for Chinese, "
        "Japanese, Korean, Thai (LabelConfig.for_language does).",
    )
    min_alias_count: int = option(
        1,
        "An alias used fewer times than this as anchor text for the entity is rare and not used. "
        "1 = every anchor in the alias table, as in EDMem. The entity's own title (also without a "
        "'(qualifier)') and, with trust_redirects, its redirects are exempt: they are curated names.",
    )
    min_prior: float = option(
        0.01,
        "Aliases with p(entity | alias) below this are not used for that entity (same default as "
        "wikipedia2vec): drops anchors that almost always mean something else. Titles and trusted "
        "redirects are exempt.",
    )
    stopwords: str = option(
        "en",
        "Aliases that are stopwords (case-insensitively) are never used. Comma-separated built-in "
        "language codes (en, de, fr, es, it, pt, nl, ru, uk, pl, sv) and/or paths of UTF-8 files "
        "with one word per line; 'none' for no list. LabelConfig.for_language picks 'en,<lang>'.",
    )
    ambiguity: str = option(
        "page",
        "When one alias fits two candidate entities of the page: 'page' labels the one the page itself "
        "links with that text (several: the nearest such link before the occurrence), else as 'prior'; "
        "'prior' labels the entity with the higher p(entity | alias) (ties: first title alphabetically); "
        "'skip' labels neither.",
    )
    case_sensitive: bool = option(
        True,
        "Match aliases with their exact case. True avoids labelling common words ('bush', 'apple') "
        "with the entities their capitalised forms name.",
    )
    hyperlinks_only: bool = option(
        False,
        "Keep only the editors' hyperlinks: no labeller runs (every label_* switch and variant rule is off). "
        "The pages, split, windows and entity vocabulary are those of the labelled corpus of the same dump; "
        "the ablation's hyperlinks-only corpus (docs/ablation.md).",
    )
    label_title_entity: bool = option(True, "Label aliases of the page's own title entity ('title_alias').")
    label_linked_entities: bool = option(
        True, "Label aliases of entities hyperlinked in the same page ('same_page_alias')."
    )
    label_numbers: bool = option(
        True,
        "Label unlinked occurrences of the page's own letterless anchor texts ('[[1880]]', then "
        "'1880 року') with the entity the page links them to ('same_page_number'), at number "
        "boundaries. Only matters with require_letter, which keeps numbers out of the other rules.",
    )
    trust_redirects: bool = option(
        True,
        "Redirect names of an entity (alias-table source 'redirect') are used even when never an "
        "anchor (count 0, prior 0), like the title: 'NYC' -> 'New York City'.",
    )
    require_letter: bool = option(
        True,
        "Skip aliases without any letter ('1990', '3:16', '100'): numbers are linked inconsistently "
        "and labelling every occurrence mostly adds noise.",
    )
    top_aliases_per_page: int = option(
        64,
        "Each page receives this many aliases of every entity it refers to, the best first (its title, "
        "then the most-used anchor texts: pipelines.corpus.candidates.alias_rank), plus every alias the "
        "page itself uses as anchor text for that entity. Bounds the label join's volume per page.",
    )
    max_aliases_per_entity: int = option(
        65536,
        "At most this many aliases of one entity (the best by alias_rank, after the filters) are used for "
        "labels at all: the bound of the label join's table side (a hub entity of full English Wikipedia "
        "has thousands of anchor texts). A page's own anchors are looked up among them.",
    )
    language: str = option(
        "",
        "The wiki's language code ('en', 'uk', 'simple'; '' = unknown). The job sets it from the dump's "
        "siteinfo. Gates the English-only variant rules (label_plural_variants, label_possessive_variants): "
        "they run only for 'en' and 'simple'.",
    )
    title_case: str = option(
        FIRST_LETTER,
        "The wiki's title case rule, siteinfo <case>: 'first-letter' (titles ignore their first letter's "
        "case: [[cultivar]] is the page Cultivar) or 'case-sensitive'. The job sets it from the dump. "
        "label_case_variants runs only on first-letter wikis.",
    )
    label_case_variants: bool = option(
        True,
        "On first-letter wikis, also label an alias of a same-page or title entity with its first letter's "
        "case swapped ('cultivar' -> 'Cultivar', 'Epilepsy' -> 'epilepsy'), in any script with case "
        "('alias_first_letter_case'). Only in text the exact rules left free.",
    )
    label_plural_variants: bool = option(
        True,
        "English wikis only (language): also label the singular or plural of an alias whose last word is "
        "a lower-case noun ('rootstocks' -> 'rootstock', 'cultivar' -> 'cultivars'), also after a "
        "first-letter case swap ('alias_plural_en'). Only in text the exact rules left free.",
    )
    label_possessive_variants: bool = option(
        True,
        "English wikis only (language): an alias ending in 's ('Pinckney's') also labels its base "
        "('Pinckney') ('alias_possessive_en'); 'Paris' is found in 'Paris's' without it.",
    )
    match_unspaced_scripts: bool = option(
        True,
        "In scripts written without spaces (Han, Kana, Thai, Lao, Khmer, Myanmar, Tibetan) match "
        "aliases at any character, since there are no word boundaries to check; when False such "
        "matches need spaces or punctuation around them.",
    )

    def __post_init__(self) -> None:
        if self.min_alias_chars < 1:
            raise ValueError(f"min_alias_chars must be >= 1, got {self.min_alias_chars}")
        if self.min_alias_count < 0:
            raise ValueError(f"min_alias_count must be >= 0, got {self.min_alias_count}")
        if not 0.0 <= self.min_prior <= 1.0:
            raise ValueError(f"min_prior must be in [0, 1], got {self.min_prior}")
        if self.max_aliases_per_entity < 1:
            raise ValueError(f"max_aliases_per_entity must be >= 1, got {self.max_aliases_per_entity}")
        if not 1 <= self.top_aliases_per_page <= self.max_aliases_per_entity:
            raise ValueError(f"top_aliases_per_page must be in [1, max_aliases_per_entity = "
                             f"{self.max_aliases_per_entity}], got {self.top_aliases_per_page}")
        if self.ambiguity not in AMBIGUITY_POLICIES:
            raise ValueError(f"ambiguity must be one of {AMBIGUITY_POLICIES}, got {self.ambiguity!r}")
        try:
            resolve_stopwords(self.stopwords)  # fail at construction, not in a worker
        except ValueError as exc:
            raise ValueError(f"stopwords: {exc}") from exc

    @property
    def stopword_set(self) -> frozenset[str]:
        return resolve_stopwords(self.stopwords)

    @property
    def variant_rules(self) -> tuple[str, ...]:
        """The variant sources that run under this config (its switches, language and case rule)."""
        english = self.language.lower() in ENGLISH_LANGUAGES
        rules = []
        if self.label_case_variants and self.case_sensitive and self.title_case == FIRST_LETTER:
            rules.append(ALIAS_FIRST_LETTER_CASE)
        if self.label_plural_variants and english:
            rules.append(ALIAS_PLURAL_EN)
        if self.label_possessive_variants and english:
            rules.append(ALIAS_POSSESSIVE_EN)
        return tuple(rules)

    @classmethod
    def for_language(cls, language: str, **overrides) -> "LabelConfig":
        """Defaults adapted to a wiki's language code ("en", "uk", "zh"...); overrides win."""
        lang = language.lower()
        adapted: dict = {"stopwords": stopword_spec_for_language(lang), "language": lang}
        if lang in SHORT_NAME_LANGUAGES or lang.split("-", 1)[0] in SHORT_NAME_LANGUAGES:
            adapted["min_alias_chars"] = 2
        adapted.update(overrides)
        return cls(**adapted)

    @staticmethod
    def help_texts() -> dict[str, str]:
        """Field name -> help text, for building CLI flags."""
        return {f.name: f.metadata["help"] for f in fields(LabelConfig)}


# --------------------------------------------------------------------------- alias filters


def strip_disambiguation(title: str) -> str:
    """'Paris (band)' -> 'Paris'; other titles unchanged."""
    if not title.endswith(_CLOSING):  # most titles: no regex (its $ also matches before a final newline)
        return title
    return _DISAMBIGUATION_SUFFIX.sub("", title)


_CLOSING = (")", ")\n")


def is_curated_name(candidate: AliasCandidate, config: LabelConfig) -> bool:
    """True for the entity's title (with or without its qualifier) or a trusted redirect."""
    return curated_name(candidate.alias.strip(), candidate.entity, candidate.sources, config)


def is_own_title(alias: str, entity: str) -> bool:
    """Whether a (stripped) alias is the entity's own title, with or without its qualifier."""
    return alias == entity or alias == strip_disambiguation(entity)


def curated_by_sources(sources: tuple[str, ...], config: LabelConfig) -> bool:
    """Whether an alias with these alias-table sources is curated by them (a title, or a trusted redirect)."""
    return SOURCE_TITLE in sources or (config.trust_redirects and SOURCE_REDIRECT in sources)


def curated_name(alias: str, entity: str, sources: tuple[str, ...], config: LabelConfig) -> bool:
    """:func:`is_curated_name` of a (stripped) alias of ``entity`` with these alias-table sources."""
    return is_own_title(alias, entity) or curated_by_sources(sources, config)


def rejection_reason(candidate: AliasCandidate, config: LabelConfig) -> str | None:
    """Why ``candidate`` is not usable (a short code), or None when it is."""
    reason = alias_rejection_reason(candidate.alias.strip(), config)
    if reason is not None:
        return reason
    return evidence_rejection_reason(is_curated_name(candidate, config), candidate.count, candidate.prior, config)


def evidence_rejection_reason(curated: bool, count: int, prior: float, config: LabelConfig) -> str | None:
    """The reasons of :func:`rejection_reason` that depend on one (alias, entity) row's evidence: a curated
    name is never rare nor of low prior."""
    if curated:
        return None
    if count < config.min_alias_count:
        return "rare"
    if prior < config.min_prior:
        return "low_prior"
    return None


def alias_rejection_reason(alias: str, config: LabelConfig) -> str | None:
    """The reasons of :func:`rejection_reason` that depend on the (stripped) alias alone, checked first: one
    answer for all the alias's entities."""
    if not alias:
        return "empty"
    if len(alias) < config.min_alias_chars:
        return "too_short"
    if config.require_letter and not _has_letter(alias):
        return "no_letter"
    if alias.casefold() in config.stopword_set:
        return "stopword"
    return None


def usable_candidates(cands: Iterable[AliasCandidate], config: LabelConfig) -> list[AliasCandidate]:
    """Candidates passing the length, letter, stopword, rarity and prior filters.

    Aliases come back stripped of surrounding whitespace. Origin switches are
    not applied here, so this can also run on alias-table rows before the join.
    """
    kept = []
    for c in cands:
        if rejection_reason(c, config) is None:
            alias = c.alias.strip()
            kept.append(c if alias == c.alias else AliasCandidate(alias, c.entity, c.count, c.prior, c.origin, c.sources))
    return kept


# --------------------------------------------------------------------------- matching


@dataclass(slots=True)
class _Target:
    """The entity one alias string labels in this page (``entity``/``source``), or, when the page
    links that text to several candidates, the choice by position: ``by_position`` holds
    (link start, entity, source) sorted by start, and :meth:`at` picks the nearest link before."""

    entity: str
    source: str
    by_position: tuple[tuple[int, str, str], ...] = ()

    def at(self, start: int) -> tuple[str, str]:
        if not self.by_position:
            return self.entity, self.source
        i = bisect.bisect_right(self.by_position, start, key=_link_start) - 1
        _start, entity, source = self.by_position[max(i, 0)]
        return entity, source


def _link_start(choice: tuple[int, str, str]) -> int:
    return choice[0]


# A pre-filtered alias as the job hands it to a page: (alias, prior, curated name (see is_curated_name),
# first token of the folded alias, its shape (_alias_shape)). The shape is made once per alias-table row
# (pack_alias), not once per page that may hold the alias: a hub's aliases come back for every page, more
# than any per-process cache holds on a large wiki. See pipelines.corpus.candidates.
PackedAlias = tuple[str, float, bool, str, tuple]


def pack_alias(alias: str, prior: float, curated: bool, config: "LabelConfig") -> PackedAlias:
    """A usable alias as :func:`label_page` reads it, for ``config``'s folding and tokens."""
    first, shape = alias_form(alias, config)
    return (alias, prior, curated, first, shape)


def alias_form(alias: str, config: "LabelConfig") -> tuple[str, "_AliasShape"]:
    """(first token, shape) of a packed alias (:func:`pack_alias`): what depends on the alias alone, so the
    job makes it once per alias, not once per (alias, entity) row."""
    token_re = _TOKENS_SPLITTING_UNSPACED if config.match_unspaced_scripts else _TOKENS_WHOLE_WORDS
    folded = alias if config.case_sensitive else _fold(alias, False)
    # first_token's text has its spaces unified, the shape's not: the same tokens (spaces are in no token).
    tokens = token_re.findall(folded)
    return (tokens[0] if tokens else ""), _shape_of_tokens(folded, tokens, token_re)


def first_token(alias: str, config: LabelConfig) -> str:
    """The first matching token of ``alias`` as folded for ``config`` ("" when it has none)."""
    token_re = _TOKENS_SPLITTING_UNSPACED if config.match_unspaced_scripts else _TOKENS_WHOLE_WORDS
    match = token_re.search(_fold(alias, config.case_sensitive))
    return match.group() if match else ""


def label_missing_mentions(
    text: str,
    hyperlinks: Sequence[Mention],
    candidates: Sequence[AliasCandidate],
    config: LabelConfig,
) -> list[Mention]:
    """New mentions ("same_page_alias" / "title_alias") of the page, sorted by start.

    ``candidates`` are filtered here (:func:`usable_candidates`); the Beam job
    filters once per alias row instead and calls :func:`label_page`.
    """
    return label_page(text, hyperlinks, _packed(candidates, config), config)


def _packed(candidates: Sequence[AliasCandidate], config: LabelConfig):
    """Usable AliasCandidates as label_page's (entity, origins, packed aliases) triples."""
    return [(c.entity, (c.origin,), (pack_alias(c.alias, c.prior, is_curated_name(c, config), config),))
            for c in usable_candidates(candidates, config)]


def targets_for_candidates(candidates: Sequence[AliasCandidate], config: LabelConfig) -> dict[str, "_Target"]:
    """Folded alias -> the entity it labels, for AliasCandidates (tests and benchmarks)."""
    return _resolve_targets(_packed(candidates, config), None, config)


@dataclass(frozen=True, slots=True)
class PreparedPage:
    """A page's folded text and tokens as :func:`label_page` reads them, made once per page
    (:func:`prepare_page`): the job also asks :meth:`may_admit` of each stored alias before it is decoded."""

    folded: str
    present: "_PageTokens"
    loose: set[str] | None  # _loose_forms of the page's tokens, when variant rules run

    def may_admit(self, gate: Iterable[str]) -> bool:
        """Can an alias with these :func:`alias_gate` keys pass the labeller's filters on this page? False
        only when it cannot: the alias would be dropped by :func:`_resolve_targets` before any other use."""
        return not self.present.adjacent.isdisjoint(gate)

    def keys_in(self, gates: Iterable[str]) -> set[str]:
        """Those of the gate keys of stored aliases that this page holds (one set operation in C)."""
        return self.present.adjacent.intersection(gates)


def prepare_page(text: str, config: LabelConfig) -> PreparedPage | None:
    """The page as :func:`label_page` reads it (None: a page it labels nothing in)."""
    if not text or config.hyperlinks_only:
        return None
    folded = _fold(text, config.case_sensitive)
    token_re = _TOKENS_SPLITTING_UNSPACED if config.match_unspaced_scripts else _TOKENS_WHOLE_WORDS
    present, joined = _PageTokens._made(folded, token_re)
    rules = config.variant_rules
    loose = _loose_forms(present.present, rules, joined) if rules else None
    if loose is not None:
        present.adjacent.update(loose)  # the gate keys' third kind (see _PageTokens.adjacent)
    return PreparedPage(folded, present, loose)


def alias_gate(packed: PackedAlias) -> tuple[str, ...]:
    """Keys of a packed alias of which a page must hold one (a token pair, a token or a loose form of one:
    :meth:`PreparedPage.may_admit`) for the alias to pass :meth:`_PageTokens.admits` and the first-token test
    under any config: the last pair of the alias, or its first token when it has one token; each variant's last
    pair (:func:`_variant_ends`), or the first token's loose forms when a variant has one token; the last pair
    of its possessive base. Made once per stored alias, so that a page skips most aliases undecoded."""
    first, (_folded, pairs, _inner, base_pairs, ends) = packed[3], packed[4]
    keys = {pairs[-1] if pairs else first}
    if ends is None:
        keys.add(first)
        keys.update(_loose_keys(first))
    else:
        keys.update(ends)
    if base_pairs is not None:
        keys.add(base_pairs[-1] if base_pairs else first)
    return tuple(sorted(keys))


def label_page(
    text: str,
    hyperlinks: Sequence[Mention],
    entities: Iterable[tuple[str, tuple[str, ...], Sequence[PackedAlias]]],
    config: LabelConfig,
    page: PreparedPage | None = None,
) -> list[Mention]:
    """New mentions of the page from (entity, origins, usable packed aliases) triples.

    The aliases must already pass :func:`rejection_reason`; an entity may come
    more than once (its evidence is merged). ``page``: :func:`prepare_page` of ``text``, when the caller made it.
    """
    if not text or config.hyperlinks_only:
        return []
    if page is None:
        page = prepare_page(text, config)
    folded, present, loose = page.folded, page.present, page.loose
    rules = config.variant_rules
    anchors = _page_anchors(folded, hyperlinks)
    forms: dict[str, int] = {}
    targets = _resolve_targets(entities, present, config, anchors, loose, forms)
    if config.label_numbers and config.require_letter:
        _add_number_targets(targets, anchors, config)
    variants = (_variant_targets(targets, rules, config, _positional_capitals(folded, anchors), present, forms)
                if rules else {})
    if not targets:
        return []
    automaton = _alias_automaton(targets, present, variants, forms)
    if automaton is None:
        return []  # nothing the page can hold
    occurrences = _find_occurrences(folded, automaton, config.match_unspaced_scripts)
    n = len(text)  # that of folded too: folding keeps lengths
    occupied = bytearray(n)
    for link in hyperlinks:
        start, end = link.start, link.end
        if start < 0:
            start = 0
        if end > n:
            end = n
        if start < end:
            occupied[start:end] = b"\x01" * (end - start)
    labels = []
    # Exact aliases first, then variants (so the exact rules' labels are the same with or without
    # them); within each, longest first, then leftmost: greedy, never overlapping links or labels.
    # The occurrences' keys (_find_occurrences) sort in that order; the target of one is that of its text.
    occurrences.sort()
    for key in occurrences:
        variant, start, end = _occurrence(key, n)
        if occupied.find(1, start, end) != -1:
            continue
        target = (variants if variant else targets)[folded[start:end]]
        if target.source == SAME_PAGE_NUMBER and not _whole_number(text, start, end):
            continue
        occupied[start:end] = b"\x01" * (end - start)
        entity, source = target.at(start)
        labels.append(Mention(start, end, text[start:end], entity, source))
    labels.sort(key=_mention_start)
    return labels


# --------------------------------------------------------------------------- variant rules


def swap_first_letter(alias: str) -> str | None:
    """'cultivar' -> 'Cultivar', 'Epilepsy' -> 'epilepsy'; None when the first character has no
    one-character other case (digits, Han, 'ß')."""
    first = alias[:1]
    other = first.lower() if first.isupper() else first.upper()
    if len(other) != 1 or other == first:
        return None
    return other + alias[1:]


_SIBILANT_ES = re.compile(r"(?:ss|x|z|ch|sh)es$")


def english_number_variant(alias: str) -> str | None:
    """The English singular of an alias whose last word looks plural, else its plural; None
    when the last word is not a lower-case word of at least 4 letters. Capitalised words are
    left alone: a people's plural is not its adjective ('Fatimids', 'Republicans', 'Tats')."""
    head, _, word = alias.rpartition(" ")
    if len(word) < 4 or not word.isalpha() or not word.islower() or word.endswith("ics"):
        return None
    singular = english_singular(word)
    if singular is not None:
        return head + (" " if head else "") + singular
    if word.endswith(("s", "x", "z", "ch", "sh")):
        plural = word + "es"
    elif word.endswith("y") and word[-2] not in "aeiou":
        plural = word[:-1] + "ies"
    else:
        plural = word + "s"
    return head + (" " if head else "") + plural


def english_singular(word: str) -> str | None:
    """'cities' -> 'city', 'boxes' -> 'box', 'rootstocks' -> 'rootstock'; None for a word that does
    not look plural ('class', 'genus', 'analysis', 'linguistics', 'city')."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if _SIBILANT_ES.search(word):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "ics")):
        return word[:-1]
    return None


def english_possessive_base(alias: str) -> str | None:
    """"Pinckney's" -> 'Pinckney', "Jesus'" -> 'Jesus'; None when the alias is not possessive."""
    for suffix in ("'s", "\u2019s"):
        if alias.endswith(suffix) and len(alias) > len(suffix):
            return alias[: -len(suffix)]
    if alias.endswith(("s'", "s\u2019")) and len(alias) > 2:
        return alias[:-1]
    return None


_SENTENCE_END = frozenset(".!?\n")


def _positional_capitals(folded: str, anchors: dict[str, list[tuple[int, str]]]) -> set[str]:
    """The page's capitalised anchor texts that it only ever links at the start of a sentence or
    line ('[[Epilepsy]] is...'): their capital is the position's, not the name's."""
    capitals = set()
    for surface, links in anchors.items():
        if surface[:1].isupper() and all(_at_sentence_start(folded, start) for start, _e in links):
            capitals.add(surface)
    return capitals


_OPENERS = " \t\"'“‘«("
_OPENER_SET = frozenset(_OPENERS)


def _at_sentence_start(text: str, start: int) -> bool:
    """Is ``start`` at the start of the text, a sentence or a line, but for spaces, quotes, brackets?"""
    if not 0 <= start <= len(text):  # as text[:start] reads it
        before = text[:start].rstrip(_OPENERS)
        return not before or before[-1] in _SENTENCE_END
    i = start - 1  # scanned back, not text[:start].rstrip(): that copies the text before every link
    while i >= 0 and text[i] in _OPENER_SET:
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def _variants(alias: str, rules: tuple[str, ...], lowerable: bool) -> list[tuple[str, str]]:
    """(variant text, source) of one alias under the variant rules that run.

    The first letter is upper-cased for any alias ('cultivar' -> 'Cultivar'), but lower-cased only
    when ``lowerable`` (a capital the wiki or the position explains): 'Apple' stays 'Apple'."""
    out = []
    swapped = None
    if ALIAS_FIRST_LETTER_CASE in rules and (lowerable or not alias[:1].isupper()):
        swapped = swap_first_letter(alias)
    if swapped is not None:
        out.append((swapped, ALIAS_FIRST_LETTER_CASE))
    if ALIAS_PLURAL_EN in rules:
        # 'weeds' -> 'weed', 'Weed'; 'Alkene' -> (via 'alkene') 'alkenes'.
        number = english_number_variant(alias)
        forms = [number, english_number_variant(swapped) if swapped is not None else None]
        if number is not None and ALIAS_FIRST_LETTER_CASE in rules:
            forms.append(swap_first_letter(number))
        out.extend((form, ALIAS_PLURAL_EN) for form in forms if form is not None)
    if ALIAS_POSSESSIVE_EN in rules:
        base = english_possessive_base(alias)
        if base is not None:
            out.append((base, ALIAS_POSSESSIVE_EN))
    return out


def _variant_targets(targets: dict[str, "_Target"], rules: tuple[str, ...], config: LabelConfig,
                     lowerable: set[str], present: "_PageTokens | None" = None,
                     forms: dict[str, int] | None = None) -> dict[str, "_Target"]:
    """Variant text -> the entity it labels, from the page's resolved aliases.

    A variant equal to an alias of the page is left to the exact rules; one that two aliases
    with different entities produce ('Apple' from 'apple' and from 'Apples') is dropped; one that two
    aliases of the same entity produce keeps the source of the alphabetically first (deterministic
    on any runner: candidates reach the page in any order). With ``present`` (the page's tokens),
    variants that cannot occur in the page (:meth:`_PageTokens.may_hold`) are left out: they would
    label nothing, and most variants are such. ``forms`` (:meth:`_PageTokens.forms` of the aliases that have
    it): an alias without :data:`_VARIED` has no variant that may occur, and none is made."""
    variants: dict[str, _Target | None] = {}
    min_chars, stopwords = config.min_alias_chars, config.stopwords
    token_re = _TOKENS_SPLITTING_UNSPACED if config.match_unspaced_scripts else _TOKENS_WHOLE_WORDS
    by_rule = _usable_variants_cache(rules, min_chars, stopwords, True, token_re)
    by_text = _usable_variants_cache(rules, min_chars, stopwords, False, token_re)
    # may_hold inlined, with each variant's shape cached beside it (most variants are made for many pages)
    page_tokens = present.present if present is not None else None
    adjacent = present.adjacent if present is not None else None
    for alias in sorted(targets):  # by text, not by the order the page's candidates arrived in
        target = targets[alias]
        if target.source == SAME_PAGE_NUMBER or (forms is not None and not forms.get(alias, _VARIED) & _VARIED):
            continue  # (a variant that cannot occur would be skipped below: skipping all of them is the same)
        # A capital is lowered only where it says nothing: the entity's exact title (MediaWiki
        # capitalises every title on first-letter wikis; 'Time (magazine)' keeps 'Time') or an
        # anchor the page only links at sentence starts.
        capital_by_rule = alias in lowerable or (
            alias == target.entity and all(alias == entity for _start, entity, _s in target.by_position))
        cache = by_rule if capital_by_rule else by_text
        usable = cache.get(alias)
        if usable is None:
            usable = cache[alias] = _usable_variants(alias, rules, capital_by_rule, min_chars, stopwords, token_re)
        for text, source, first, pairs in usable:
            if text in targets:
                continue
            if text in variants:
                known = variants[text]
                if known is not None and _entities_of(known) != _entities_of(target):
                    variants[text] = None
                continue
            if page_tokens is not None and first is not None and (
                    first not in page_tokens or not adjacent.issuperset(pairs)):
                continue  # _PageTokens.may_hold(text) is False
            if target.by_position:
                variants[text] = _Target(target.entity, source,
                                         tuple((start, entity, source) for start, entity, _s in target.by_position))
            else:
                variants[text] = _Target(target.entity, source)
    return {text: target for text, target in variants.items() if target is not None}


# (variant text, source, its first token or None, its token pairs): a variant and its _word_shape
_Variant = tuple[str, str, "str | None", tuple[str, ...]]
_VARIANT_CACHES: dict[tuple, dict[str, tuple[_Variant, ...]]] = {}


def _usable_variants_cache(rules: tuple[str, ...], min_alias_chars: int, stopwords: str,
                           lowerable: bool, token_re: re.Pattern) -> dict[str, tuple[_Variant, ...]]:
    """alias -> :func:`_usable_variants` under these arguments: one dict lookup per alias and page
    (a hub's aliases come back for every page that links it)."""
    key = (rules, min_alias_chars, stopwords, lowerable, token_re)
    cache = _VARIANT_CACHES.get(key)
    if cache is None or len(cache) >= _CACHE_MAX:
        cache = _VARIANT_CACHES[key] = {}
    return cache


def _usable_variants(alias: str, rules: tuple[str, ...], lowerable: bool, min_alias_chars: int,
                     stopwords: str, token_re: re.Pattern) -> tuple[_Variant, ...]:
    """:func:`_variants` of one alias without those too short or stopwords (``stopwords``: the spec), each
    with its :func:`_word_shape` (``token_re``), which :meth:`_PageTokens.may_hold` reads."""
    stopword_set = resolve_stopwords(stopwords)
    return tuple((text, source, *_word_shape(text, token_re)) for text, source in _variants(alias, rules, lowerable)
                 if len(text.strip()) >= min_alias_chars and text.casefold() not in stopword_set)


def _entities_of(target: "_Target") -> tuple[str, ...]:
    return (target.entity,) + tuple(entity for _start, entity, _source in target.by_position)


def _loose_forms(tokens: set[str], rules: tuple[str, ...], joined: str | None = None) -> set[str]:
    """Forms of the page's tokens under which a variant's first token meets its alias's: first letter
    lower-cased (case rule), an English plural ending removed (plural rule). ``joined``: the tokens joined
    by spaces, when the caller has them."""
    if not tokens:
        return set()
    # All in C on the tokens joined by spaces (a token holds none): the first character of each token that
    # may change is cut out (a superset of those lower() changes: lowering the others keeps them), lowered,
    # and put back; then the plural stems are found in the lowered text.
    parts = _LOWERABLE_FIRST.split(" " + (" ".join(tokens) if joined is None else joined))
    parts[1::2] = map(str.lower, parts[1::2])
    lowered = "".join(parts)
    forms = set(lowered[1:].split(" "))
    if ALIAS_PLURAL_EN in rules:
        stems = _PLURAL_STEM.findall(lowered)  # the forms ending in "s", without it
        forms.update(stems)
        stems = [stem[:-1] for stem in stems if stem.endswith("e")]
        forms.update(stems)
        forms.update([stem[:-1] + "y" for stem in stems if stem.endswith("i")])
    return forms


# The first character of a token with the space before it, unless it is one that lower() keeps for sure.
_LOWERABLE_FIRST = re.compile(r"( [^a-z0-9 ])")
_PLURAL_STEM = re.compile(r" ([^ ]*)s(?![^ ])")


def _page_anchors(folded: str, hyperlinks: Sequence[Mention]) -> dict[str, list[tuple[int, str]]]:
    """Folded anchor text -> [(link start, entity)] of the page's hyperlinks, by start."""
    anchors: dict[str, list[tuple[int, str]]] = {}
    for link in sorted(hyperlinks, key=_mention_start):
        surface = folded[max(0, link.start):link.end].strip()
        if surface:
            anchors.setdefault(surface, []).append((link.start, link.entity))
    return anchors


_mention_start = operator.attrgetter("start")


def _has_letter(s: str) -> bool:
    """Has ``s`` a letter (Unicode category L*)? str.isalpha is exactly that test, in C."""
    return any(map(str.isalpha, s))


def _add_number_targets(targets: dict[str, "_Target"], anchors: dict[str, list[tuple[int, str]]],
                        config: LabelConfig) -> None:
    """Rule (c): the page's letterless anchor texts with a digit, labelled as the page links them."""
    for surface, links in anchors.items():
        if surface in targets or len(surface) < config.min_alias_chars or _has_letter(surface):
            continue
        if not any(ch.isdigit() for ch in surface):
            continue
        entities = {entity for _start, entity in links}
        if len(entities) == 1:
            targets[surface] = _Target(links[0][1], SAME_PAGE_NUMBER)
        elif config.ambiguity == "page":
            targets[surface] = _Target(links[0][1], SAME_PAGE_NUMBER,
                                       tuple((start, entity, SAME_PAGE_NUMBER) for start, entity in links))


_NUMBER_SEPARATORS = frozenset(".,:/")
_HYPHENS = frozenset("-\u2010\u2011")
_SIGNS = frozenset("\u2212\u00b1+")


def _whole_number(text: str, start: int, end: int) -> bool:
    """Is text[start:end] a whole number, not part of '1,880', '1880.5', '−1880' or '1880-х'?"""
    n = len(text)
    if start:
        before = text[start - 1]
        if before in _SIGNS:
            return False
        if start >= 2 and ((before in _NUMBER_SEPARATORS and text[start - 2].isdigit())
                           or (before in _HYPHENS and text[start - 2].isalpha())):
            return False
    if end < n:
        after = text[end]
        if end + 1 < n and ((after in _NUMBER_SEPARATORS and text[end + 1].isdigit())
                            or (after in _HYPHENS and text[end + 1].isalpha())):
            return False
    return True


def count_by_source(mentions: Iterable[Mention]) -> dict[str, int]:
    """Number of mentions per source, keys sorted (only sources that occur)."""
    counts = Counter(m.source for m in mentions)
    return {source: counts[source] for source in sorted(counts)}


def _fold(s: str, case_sensitive: bool) -> str:
    """Same-length normal form for matching: spaces unified, optionally lower-cased."""
    # A page's only other space is mostly "\n": replaced in C, and then each of _OTHER_SPACE's characters is one
    # that str.isprintable() rejects (a quick scan in C), so a printable rest needs no regex pass.
    s = s.replace("\n", " ")
    if not s.isprintable():
        s = _OTHER_SPACE.sub(" ", s)
    if case_sensitive:
        return s
    lowered = s.lower()
    if len(lowered) == len(s):  # lower() never shrinks, so equal length means aligned
        return lowered
    # Rare characters lower-case to two ('İ'): keep those as they are to keep offsets aligned.
    return "".join(low if len(low) == 1 else ch for ch, low in zip(s, map(str.lower, s)))


@dataclass(frozen=True, slots=True)
class _PageTokens:
    """The page's folded tokens and the pairs of them that are adjacent in its text.

    An alias can occur as whole words only where its own tokens occur in a row (the
    same token pattern splits alias and text, and a match never cuts a token), so an
    alias that fails :meth:`admits` is dropped before it costs any matching work:
    a hub entity's many anchor texts mostly share a first word with the page ("Paris
    Saint-Germain" in a page saying "Paris"), rarely the rest. :meth:`may_hold` is
    the same test for the automaton's words: most variants fail it.
    """

    present: set[str]
    # "a b" for every two tokens a, b in a row (tokens hold no space: one cut), and also the page's tokens and
    # (prepare_page) their loose forms: a pair has a space and those none, so a pair is in it only when it is in
    # the page, and the store's gate keys of all three kinds are answered by one set (PreparedPage.keys_in).
    adjacent: set[str]
    token_re: re.Pattern
    words: dict[str, tuple[str | None, tuple[str, ...]]]  # the cache of _word_shape for token_re

    @classmethod
    def of(cls, folded: str, token_re: re.Pattern) -> "_PageTokens":
        return cls._made(folded, token_re)[0]

    @classmethod
    def _made(cls, folded: str, token_re: re.Pattern) -> "tuple[_PageTokens, str | None]":
        """:meth:`of`, and the distinct tokens joined by spaces when it made them (:func:`_loose_forms` reads
        them too)."""
        # Without a character of an unspaced script (most pages), the plain pattern splits the same way, and
        # _whole_word_tokens splits as it does, faster. Every character but a space is in one of its tokens: the
        # page's distinct tokens (a third of its text) are searched for one, not the whole text.
        plain = token_re is _TOKENS_SPLITTING_UNSPACED or token_re is _TOKENS_WHOLE_WORDS
        tokens = _whole_word_tokens(folded) if plain else token_re.findall(folded)
        present = set(tokens)
        joined = None
        if plain and token_re is _TOKENS_SPLITTING_UNSPACED and not folded.isascii():
            joined = " ".join(present)
            if _UNSPACED_CHAR.search(joined) is not None:
                tokens = token_re.findall(folded)
                present = set(tokens)
                joined = None
        # A pair is one string, not a tuple: a page has thousands of them, and strings give the garbage
        # collector nothing to track (tuples made it a good part of the labeller's time).
        adjacent = set(map(_PAIR, zip(tokens, tokens[1:])))
        adjacent.update(present)
        return cls(present, adjacent, token_re, _word_shapes(token_re)), joined

    def in_a_row(self, folded_alias: str, inner_only: bool = False) -> bool:
        """Are the alias's tokens adjacent pairs of the page (its first token checked by the caller)?
        ``inner_only``: only the pairs that no variant rule changes (not the first or last token)."""
        pairs = _token_pairs(self.token_re.findall(folded_alias))
        if inner_only:
            pairs = pairs[1:-1]  # the pairs of tokens[1:-1]
        return self.adjacent.issuperset(pairs)

    def may_hold(self, word: str) -> bool:
        """Can the (folded) text occur in the page as whole words: its first token is in the page and its
        tokens are in a row? A whole-word match starts and ends at token boundaries, so its tokens are
        the page's, in a row. True for a text without tokens (not decided here)."""
        shape = self.words.get(word)
        if shape is None:
            shape = self.words[word] = _word_shape(word, self.token_re)
        first, pairs = shape
        return first is None or (first in self.present and self.adjacent.issuperset(pairs))

    def admits(self, exact_first: bool, shape: "_AliasShape", variants: bool, possessive: bool) -> bool:
        """Can the alias (or, with ``variants``, a variant of it) occur in the page as whole words,
        its first token being in the page (``exact_first``) or else a variant's (the caller checked
        that one: :func:`_loose_forms`)? Its tokens must be in a row; with ``variants`` its inner
        tokens suffice (the variant rules change only the first and the last word) when one of its
        variants' last pairs is in the page too, with ``possessive`` also its possessive base's."""
        return self.forms(exact_first, shape, variants, possessive) != 0

    def forms(self, exact_first: bool, shape: "_AliasShape", variants: bool, possessive: bool) -> int:
        """:meth:`admits`, told apart: :data:`_EXACT` when the alias itself may occur in the page (its
        :meth:`may_hold`), plus :data:`_VARIED` when (with ``variants``) one of its variants may; 0: neither.
        The automaton skips the first test and :func:`_variant_targets` the second for the aliases they fail."""
        _folded, pairs, inner, base_pairs, variant_ends = shape
        adjacent = self.adjacent
        forms = _EXACT if exact_first and adjacent.issuperset(pairs) else 0
        if variants and (self._variant_may_hold(inner, variant_ends) or (
                exact_first and possessive and base_pairs is not None and adjacent.issuperset(base_pairs))):
            forms |= _VARIED
        return forms

    def _variant_may_hold(self, inner: tuple[str, ...], variant_ends: "tuple[str, ...] | None") -> bool:
        # A variant holds only where its last pair does: an alias "Paris 2" whose first word the page has
        # stops here, not after its variants are made and looked for (a hub's numbered aliases were ~15k
        # checks per page on the replicated scale input).
        adjacent = self.adjacent
        return adjacent.issuperset(inner) and (variant_ends is None or not adjacent.isdisjoint(variant_ends))


# The bits of _PageTokens.forms: the alias itself may occur in the page; one of its variants may.
_EXACT = 1
_VARIED = 2

_PAIR = " ".join
_PUNCTUATION = re.compile(r"([^\w\s])")


def _whole_word_tokens(text: str) -> list[str]:
    """``_TOKENS_WHOLE_WORDS.findall(text)``, in a third less time: each character that is neither a word
    character nor a space is cut out as its own token, and the rest split at spaces (str.split's spaces are
    the pattern's \\s, both Py_UNICODE_ISSPACE), all in C with no per-token match."""
    return " ".join(_PUNCTUATION.split(text)).split()


_CACHE_MAX = 1 << 16  # entries of each per-config cache below (~15 MB each when full): most words come from the shapes the store hands over
_WORD_SHAPES: dict[re.Pattern, dict[str, tuple[str | None, tuple[str, ...]]]] = {}


def _word_shapes(token_re: re.Pattern) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    shapes = _WORD_SHAPES.get(token_re)
    if shapes is None or len(shapes) >= _CACHE_MAX:
        shapes = _WORD_SHAPES[token_re] = {}
    return shapes


def _word_shape(word: str, token_re: re.Pattern) -> tuple[str | None, tuple[str, ...]]:
    """(first token or None, token pairs) of a text as the page's tokens are compared with it."""
    tokens = token_re.findall(word)
    return (tokens[0] if tokens else None), _token_pairs(tokens)


def _token_pairs(tokens: list[str]) -> tuple[str, ...]:
    """The adjacent pairs of tokens, in order, as "a b" (see _PageTokens.adjacent)."""
    return tuple(map(_PAIR, zip(tokens, tokens[1:])))


# (folded alias, its token pairs, those of tokens[1:-1], those of its possessive base or None, the last pair of
# each of its variants (None: a variant of fewer than two tokens, which no pair rules out))
_AliasShape = tuple[str, tuple[str, ...], tuple[str, ...], "tuple[str, ...] | None", "tuple[str, ...] | None"]


def _alias_shape(alias: str, case_sensitive: bool, token_re: re.Pattern) -> _AliasShape:
    folded = alias if case_sensitive else _fold(alias, False)
    return _shape_of_tokens(folded, token_re.findall(folded), token_re)


def _shape_of_tokens(folded: str, tokens: list[str], token_re: re.Pattern) -> _AliasShape:
    """:func:`_alias_shape` of ``folded``, whose tokens (``token_re``) are ``tokens``."""
    pairs = _token_pairs(tokens)
    # english_possessive_base cuts "'s" (tokens "'", "s") or the "'" of "s'" (token "'"): one token per character.
    base = english_possessive_base(folded)
    base_pairs = None if base is None else pairs[:len(base) - len(folded)]
    # One token: its variants have one token too (a case or number rule keeps a cased word whole).
    if not pairs:
        ends = None
    elif token_re is _TOKENS_SPLITTING_UNSPACED or token_re is _TOKENS_WHOLE_WORDS:
        ends = _variant_ends_of_tokens(folded, tokens, pairs, base_pairs, token_re)
    else:
        ends = _variant_ends(folded, token_re)
    return (folded, pairs, pairs[1:-1], base_pairs, ends)


_ALL_VARIANT_RULES = (ALIAS_FIRST_LETTER_CASE, ALIAS_PLURAL_EN, ALIAS_POSSESSIVE_EN)


def _variant_ends(folded: str, token_re: re.Pattern) -> tuple[str, ...] | None:
    """The last token pair of each variant that any rules may make of the folded alias (all rules, lowerable:
    every variant a page of any config may ask for), sorted; None when one has fewer than two tokens."""
    ends = set()
    for text, _source in _variants(folded, _ALL_VARIANT_RULES, True):
        pairs = _token_pairs(token_re.findall(text))
        if not pairs:
            return None
        ends.add(pairs[-1])
    return tuple(sorted(ends))


def _variant_ends_of_tokens(folded: str, tokens: list[str], pairs: tuple[str, ...],
                            base_pairs: tuple[str, ...] | None, token_re: re.Pattern) -> tuple[str, ...] | None:
    """:func:`_variant_ends` of an alias of two tokens or more, from its tokens instead of tokenising each variant.

    The variants (:func:`_variants`, all rules, lowerable) change only the first letter (case rule), the last
    word (number rule, when that word is the last token: letters cut off or added) and the end (possessive
    rule: its last one or two tokens cut off), so their tokens are the alias's, so changed. Where that is not
    sure (a first letter outside ASCII whose case swaps, a last word that is not the last token, a word
    that only the case-swapped alias makes plural), the variants are tokenised as :func:`_variant_ends` does.
    """
    if base_pairs is not None and not base_pairs:
        return None  # the possessive base has one token
    first = folded[0]
    other = first.lower() if first.isupper() else first.upper()  # as swap_first_letter
    swaps = len(other) == 1 and other != first
    if swaps and not first.isascii():
        return _variant_ends(folded, token_re)
    ends = set()
    if swaps:  # an ASCII letter: the first token starts with it, and with its other case
        ends.add(pairs[-1] if len(tokens) > 2 else f"{other}{tokens[0][1:]} {tokens[1]}")
    number = english_number_variant(folded)
    head, space, word = folded.rpartition(" ")
    if number is not None:
        if tokens[-1] != word:
            return _variant_ends(folded, token_re)
        changed = number[len(head) + 1:]  # the last word, singular or plural: still one token
        ends.add(f"{tokens[-2]} {changed}")
        if swaps:  # the plural of the swapped alias, and the swapped plural: the same text
            ends.add(f"{tokens[-2] if len(tokens) > 2 else other + tokens[0][1:]} {changed}")
    elif swaps and not space and english_number_variant(other + folded[1:]) is not None:
        return _variant_ends(folded, token_re)
    if base_pairs is not None:
        ends.add(base_pairs[-1])
    return tuple(sorted(ends))


@functools.lru_cache(maxsize=1 << 16)
def _loose_keys(first: str) -> tuple[str, ...]:
    """The forms of an alias's first token of which one is in :func:`_loose_forms` of a page where a
    variant of the alias may start a word: the token with its first letter lower-cased, and with an
    English plural ending cut off."""
    token = first[:1].lower() + first[1:]
    if token.endswith("s"):
        return token, token[:-1], token[:-2], token[:-3] + "y"
    return (token,)


@dataclass(slots=True)
class _EntityEvidence:
    """What the page's candidates say about one (alias, entity) pair."""

    entity: str
    prior: float = 0.0
    title: bool = False  # a candidate of the page's own entity ("title" origin) gave it
    own_name: bool = False  # the page's own entity, and the alias is its title or a trusted redirect

    def add(self, prior: float, title_origin: bool, curated: bool) -> None:
        """Merge one more candidate of the pair."""
        if prior > self.prior:
            self.prior = prior
        if title_origin:
            self.title = True
            if curated:
                self.own_name = True


def _resolve_targets(entities, present: _PageTokens | None, config: LabelConfig,
                     anchors: dict[str, list[tuple[int, str]]] | None = None,
                     loose: set[str] | None = None, forms: dict[str, int] | None = None) -> dict[str, _Target]:
    """Folded alias -> the one entity it labels, after switches and ambiguity.

    With ``present`` (the page's tokens), only aliases whose tokens occur there
    in a row are considered: the others cannot occur in the page as whole words.
    With ``loose`` (:func:`_loose_forms` of those tokens, when variant rules run),
    also those whose first token may occur as a variant and whose inner tokens
    (the ones no variant rule changes) occur in a row. ``forms`` (with ``present``) receives
    each kept alias's :meth:`_PageTokens.forms`.
    """
    # Folded alias -> its one candidate entity's evidence (most aliases), or entity -> evidence.
    by_alias: dict[str, _EntityEvidence | dict[str, _EntityEvidence]] = {}
    allowed = {LINKED: config.label_linked_entities, TITLE: config.label_title_entity}
    case_sensitive = config.case_sensitive
    # The possessive rule cuts the alias's last two tokens ("'", "s"), which inner_only keeps.
    possessive = loose is not None and ALIAS_POSSESSIVE_EN in config.variant_rules
    page_tokens = present.present if present is not None else set()
    if forms is None:
        forms = {}
    for entity, origins, aliases in entities:
        for origin in origins:
            if origin not in ORIGINS:
                raise ValueError(f"unknown candidate origin {origin!r} (expected one of {ORIGINS})")
        origins = [o for o in origins if allowed[o]]
        if not origins:
            continue
        title_origin = TITLE in origins
        for alias, prior, curated, first, shape in aliases:
            if present is not None:
                exact_first = first in page_tokens
                if not exact_first and (loose is None or loose.isdisjoint(_loose_keys(first))):
                    continue  # the cheap test first: most of a hub's aliases stop here
            folded_alias = shape[0]
            if present is not None:
                alias_forms = present.forms(exact_first, shape, loose is not None, possessive)
                if not alias_forms:
                    continue
                forms[folded_alias] = alias_forms  # the same for every row of the alias: a function of its shape
            known = by_alias.get(folded_alias)
            if known is None:
                by_alias[folded_alias] = _EntityEvidence(entity, prior if prior > 0.0 else 0.0, title_origin,
                                                         title_origin and curated)
                continue
            if type(known) is not dict:
                if known.entity == entity:
                    known.add(prior, title_origin, curated)
                    continue
                known = by_alias[folded_alias] = {known.entity: known}
            evidence = known.get(entity)
            if evidence is None:
                known[entity] = _EntityEvidence(entity, prior if prior > 0.0 else 0.0, title_origin,
                                                title_origin and curated)
            else:
                evidence.add(prior, title_origin, curated)
    targets = {}
    for alias, entities in by_alias.items():
        if type(entities) is not dict:  # one candidate entity
            targets[alias] = _Target(entities.entity, TITLE_ALIAS if entities.title else SAME_PAGE_ALIAS)
            continue

        def source_of(entity: str) -> str:
            return TITLE_ALIAS if entities[entity].title else SAME_PAGE_ALIAS

        if config.ambiguity == "page" and len(entities) > 1 and not _single_owner(entities):
            # Wikipedia's primary-topic convention: the candidate titled exactly with the text.
            named = _titled(alias, entities, case_sensitive)
            if named is not None:
                targets[alias] = _Target(named, source_of(named))
                continue
            # Then the page's own use of the text: links with it to candidate entities, by position.
            links = [(start, e) for start, e in (anchors or {}).get(alias, ()) if e in entities]
            linked = {e for _start, e in links}
            if len(linked) == 1:
                entity = links[0][1]
                targets[alias] = _Target(entity, source_of(entity))
                continue
            if len(linked) > 1:
                choices = tuple((start, e, source_of(e)) for start, e in links)
                targets[alias] = _Target(choices[0][1], choices[0][2], choices)
                continue
        entity = _pick_entity(entities, config.ambiguity)
        if entity is not None:
            targets[alias] = _Target(entity, source_of(entity))
    return targets


def _titled(alias: str, entities, case_sensitive: bool) -> str | None:
    """The one candidate whose title is ``alias`` (exactly, else but for the first letter's case)."""
    if case_sensitive:
        exact = [e for e in entities if e == alias]
        if len(exact) == 1:
            return exact[0]
        upper_first = alias[:1].upper() + alias[1:]
        near = [e for e in entities if e == upper_first]
    else:
        near = [e for e in entities if _fold(e, False) == alias]
    return near[0] if len(near) == 1 else None


def _single_owner(entities: dict[str, _EntityEvidence]) -> bool:
    return sum(ev.own_name for ev in entities.values()) == 1


def _pick_entity(entities: dict[str, _EntityEvidence], policy: str) -> str | None:
    """The entity an alias labels in this page, or None when ``policy`` skips it."""
    if len(entities) == 1:
        return next(iter(entities))
    # In its own article, a page's title (or redirect) names the page's entity ("Georgia" in
    # "Georgia (country)"), whatever the global prior of a linked namesake.
    owners = [e for e, ev in entities.items() if ev.own_name]
    if len(owners) == 1:
        return owners[0]
    if policy == "skip":
        return None
    return min(entities, key=lambda e: (-entities[e].prior, e))


def _alias_automaton(targets: dict[str, _Target], present: _PageTokens | None = None,
                     variants: dict[str, _Target] | None = None,
                     forms: dict[str, int] | None = None) -> "ahocorasick.Automaton | None":
    """An Aho-Corasick automaton of the page's folded aliases; each hit gives 2 * length + (1 for a variant, 0
    for an alias): ints, which the garbage collector does not track (a tuple per word and per hit made a good
    part of the labeller's time, in collections).

    With ``present`` (the page's tokens), only the aliases that may occur there
    (:meth:`_PageTokens.may_hold`; some are targets for their variants only); ``variants`` are
    added as they are (:func:`_variant_targets` checked them). ``forms``: :meth:`_PageTokens.forms` of the
    aliases that have it, whose :data:`_EXACT` bit is their may_hold. None when no word is left."""
    automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
    known = forms if forms is not None else {}
    for alias in targets:
        alias_forms = known.get(alias)
        if present is None or (present.may_hold(alias) if alias_forms is None else alias_forms & _EXACT):
            automaton.add_word(alias, 2 * len(alias))
    for text in variants or ():
        automaton.add_word(text, 2 * len(text) + 1)
    if not len(automaton):
        return None
    automaton.make_automaton()
    return automaton


def _find_occurrences(folded: str, automaton: "ahocorasick.Automaton | None", split_unspaced: bool) -> list[int]:
    """Every whole-word occurrence of every alias (:func:`_alias_automaton`), as one int each, a key that sorts
    as (is a variant, -length, start) does: ((is a variant << b) + len(folded) - length << b) + start, b the bit
    length of len(folded) (:func:`_occurrence` reads it back). Unique: one text per (length, start).

    The automaton reports every occurrence, overlapping ones included; those
    that continue a word at either end are dropped. None (no words): none.
    """
    found = []
    if automaton is None:
        return found
    n = len(folded)
    shift = n.bit_length()
    joins, separator = _joins, _ASCII_NON_WORD
    for last, word in automaton.iter(folded):
        length = word >> 1
        start, end = last + 1 - length, last + 1
        if start and (before := folded[start - 1]) not in separator and joins(before, folded[start], split_unspaced):
            continue
        if end < n and (after := folded[end]) not in separator and joins(folded[last], after, split_unspaced):
            continue
        found.append((((word & 1) << shift | n - length) << shift) | start)
    return found


def _occurrence(key: int, n: int) -> tuple[bool, int, int]:
    """(is a variant, start, end) of a :func:`_find_occurrences` key in a text of length ``n``."""
    shift = n.bit_length()
    mask = (1 << shift) - 1
    start = key & mask
    return bool(key >> shift >> shift), start, start + n - ((key >> shift) & mask)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in _JOINERS or unicodedata.category(ch) in ("Pc", "Mn", "Mc", "Me")


@functools.lru_cache(maxsize=1 << 16)  # called for every alias hit, on few distinct character pairs
def _joins(left: str, right: str, split_unspaced: bool) -> bool:
    """Do two adjacent characters belong to one word (so a match may not cut between them)?"""
    if not (_is_word_char(left) and _is_word_char(right)):
        return False
    if unicodedata.category(right).startswith("M"):
        return True  # never separate a combining mark from its base
    if split_unspaced and (_UNSPACED_CHAR.match(left) or _UNSPACED_CHAR.match(right)):
        return False
    return True
