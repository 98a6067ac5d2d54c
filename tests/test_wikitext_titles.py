"""Titles, link targets, namespaces, redirects and disambiguation pages."""
from __future__ import annotations

import pytest

from pipelines.records import Namespace, SiteInfo
from pipelines.wikitext import (
    DisambiguationConfig,
    is_disambiguation,
    normalize_title,
    parse_link_target,
    redirect_target,
    template_names,
)
from pipelines.wikitext.namespaces import WIKIPEDIA_LANGUAGE_CODES

EN = SiteInfo(dbname="enwiki", namespaces=(
    Namespace(0, ""), Namespace(4, "Wikipedia"), Namespace(6, "File"),
    Namespace(10, "Template"), Namespace(14, "Category"),
))
UK = SiteInfo(dbname="ukwiki", namespaces=(
    Namespace(0, ""), Namespace(6, "Файл"), Namespace(10, "Шаблон"), Namespace(14, "Категорія"),
))
WIKTIONARY_LIKE = SiteInfo(dbname="enwiktionary", case="case-sensitive",
                           namespaces=(Namespace(0, "", case="case-sensitive"),
                                       Namespace(14, "Category", case="first-letter")))
NO_SITEINFO = SiteInfo(from_dump=False)


def target(raw: str, site: SiteInfo = EN):
    return parse_link_target(raw, site)


# -- normalisation --------------------------------------------------------------
@pytest.mark.parametrize(("raw", "title"), [
    ("foo_bar", "Foo bar"),  # underscores -> spaces, first letter upper
    ("  Foo \t  bar  ", "Foo bar"),  # whitespace collapsed and trimmed
    ("Foo\u00a0bar", "Foo bar"),  # non-breaking space is a space
    ("AT&amp;T", "AT&T"),  # named entity
    ("Caf&#233;", "Café"),  # decimal reference
    ("Caf&#xE9;", "Café"),  # hex reference
    ("Foo&nbsp;bar", "Foo bar"),
    ("Caf%C3%A9", "Café"),  # percent-escape of valid UTF-8
    ("100%_sure", "100% sure"),  # a lone % is not an escape
    ("\u200eFoo", "Foo"),  # directional mark removed
    ("éclair", "Éclair"),  # Unicode-aware upper-casing
    ("ßtraße", "ßtraße"),  # upper() would give two chars: keep as is
    ("ǆungla", "Ǆungla"),
    ("iPod", "IPod"),  # first-letter wiki
])
def test_article_titles_are_normalised(raw, title):
    parsed = target(raw)
    assert parsed.kind == "article"
    assert parsed.title == title


def test_invalid_utf8_percent_escape_is_an_invalid_title():
    assert target("Foo%FF").kind == "invalid"


def test_case_sensitive_wiki_keeps_first_letter():
    assert target("iPod", WIKTIONARY_LIKE).title == "iPod"
    # The namespace's own case wins over the wiki-wide default.
    assert target("Category:nouns", WIKTIONARY_LIKE).title == "Nouns"


def test_fragment_is_split_off_and_kept_aside():
    parsed = target("Paris#History_of_Paris")
    assert (parsed.kind, parsed.title, parsed.fragment) == ("article", "Paris", "History of Paris")


def test_section_self_link():
    parsed = target("#Early life")
    assert (parsed.kind, parsed.title, parsed.fragment) == ("section", "", "Early life")


# -- namespaces -------------------------------------------------------------------
def test_category_link_vs_leading_colon():
    plain = target("Category:Pears")
    colon = target(":Category:Pears")
    assert (plain.kind, plain.ns, plain.title, plain.leading_colon) == ("namespace", 14, "Pears", False)
    assert (colon.kind, colon.ns, colon.leading_colon) == ("namespace", 14, True)


def test_leading_colon_article_link():
    parsed = target(":Foo")
    assert (parsed.kind, parsed.title, parsed.leading_colon) == ("article", "Foo", True)


@pytest.mark.parametrize(("raw", "ns"), [
    ("category:X", 14), ("CATEGORY:X", 14), ("Category_talk:X", 15),  # case-insensitive prefix
    ("Image:X.jpg", 6), ("image talk:X", 7), ("File:X.jpg", 6), ("Media:X.ogg", -2),
    ("WP:NPOV", 4), ("Wikipedia:NPOV", 4), ("Project:X", 4), ("Special:Random", -1),
    ("Template:Infobox", 10), ("Help:X", 12), ("Portal:Science", 100), ("Draft:X", 118),
    ("Module:Arguments", 828), ("TimedText:X", 710), ("User talk:X", 3), ("MediaWiki:X", 8),
])
def test_canonical_names_and_aliases(raw, ns):
    parsed = target(raw)
    assert (parsed.kind, parsed.ns) == ("namespace", ns)


def test_canonical_names_work_on_every_wiki():
    assert target("Image:Київ.jpg", UK).ns == 6
    assert target("Category:Міста", UK).ns == 14
    assert target("Файл:Київ.jpg", UK).ns == 6  # local name from <siteinfo>
    assert target("файл:Київ.jpg", UK).prefix == "Файл"  # shown with the local name


def test_localised_aliases_from_the_builtin_table():
    assert target("Зображення:X.jpg", UK).ns == 6
    assert target("Bild:X.jpg", SiteInfo(dbname="dewiki")).ns == 6


def test_siteinfo_aliases_are_recognised():
    site = SiteInfo(dbname="xxwiki", namespaces=(Namespace(6, "Fiile", aliases=("Pilt",)),))
    assert target("Pilt:X.png", site).ns == 6


def test_no_siteinfo_still_knows_canonical_names():
    assert target("Category:X", NO_SITEINFO).ns == 14
    assert target("Foo", NO_SITEINFO).kind == "article"


def test_namespace_with_empty_name_is_invalid():
    assert target("Category:").kind == "invalid"


def test_colon_in_article_title_is_not_a_prefix():
    parsed = target("Star Wars: Episode IV")
    assert (parsed.kind, parsed.title) == ("article", "Star Wars: Episode IV")


# -- interwiki / interlanguage ------------------------------------------------------
@pytest.mark.parametrize("raw", ["de:Birne", "fr:Poire", "uk:Груша", "simple:Pear",
                                 "zh-yue:梨", "be-tarask:Груша", "ZH:梨"])
def test_interlanguage(raw):
    parsed = target(raw)
    assert parsed.kind == "interlanguage"
    assert parsed.prefix == raw.split(":")[0].lower()


@pytest.mark.parametrize("raw", ["wikt:pear", "wiktionary:pear", "commons:Pyrus", "c:Pyrus",
                                 "s:Text", "q:Quote", "b:Book", "n:News", "v:Course",
                                 "voy:Paris", "species:Pyrus", "meta:Main", "m:Main",
                                 "mw:Help", "d:Q42", "wikidata:Q42", "foundation:Policy",
                                 "phab:T1", "doi:10.1000/1"])
def test_interwiki(raw):
    assert target(raw).kind == "interwiki"


def test_own_language_prefix_is_a_local_link():
    parsed = target("en:Pear")
    assert (parsed.kind, parsed.title) == ("article", "Pear")


def test_language_list_is_complete_enough():
    assert len(WIKIPEDIA_LANGUAGE_CODES) >= 330
    assert {"en", "de", "uk", "zh", "simple", "zh-yue", "be-tarask", "nds-nl"} <= WIKIPEDIA_LANGUAGE_CODES


# -- invalid ---------------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["", "   ", "a<b", "a>b", "a[b", "a]b", "a{b", "a}b", "a|b",
                                 "a\x01b", "x" * 256, "é" * 128, "../x", "a/./b", "~~~~"])
def test_invalid_titles(raw):
    assert target(raw).kind == "invalid"


def test_255_bytes_is_still_valid():
    assert target("x" * 255).kind == "article"


# -- page titles ------------------------------------------------------------------------
def test_normalize_title_of_pages():
    assert normalize_title("Foo_bar", EN) == "Foo bar"
    assert normalize_title("category:pears", EN) == "Category:Pears"
    assert normalize_title("Категорія:Груші", UK) == "Категорія:Груші"
    assert normalize_title("Star Wars: A", EN) == "Star Wars: A"
    assert normalize_title("iPod", WIKTIONARY_LIKE) == "iPod"


# -- redirects ----------------------------------------------------------------------------
@pytest.mark.parametrize(("wikitext", "expected"), [
    ("#REDIRECT [[Foo_bar]]", "Foo bar"),
    ("#redirect [[foo#History]]", "Foo"),  # case-insensitive; section dropped
    ("  #REDIRECT:[[Foo]]", "Foo"),  # leading space, colon after the word
    ("#REDIRECT[[Foo|label]] {{R from move}}", "Foo"),
    ("#REDIRECT [[Wikipedia:Foo]]", "Wikipedia:Foo"),
    ("#WEITERLEITUNG [[Birne]]", "Birne"),
    ("#REDIRECTION [[Poire]]", "Poire"),
    ("#ПЕРЕНАПРАВЛЕННЯ [[Груша]]", "Груша"),
    ("#перенаправление [[Груша]]", "Груша"),
    ("#REDIRECCIÓN [[Pera]]", "Pera"),
    ("#RINVIA [[Pera]]", "Pera"),
    ("#DOORVERWIJZING [[Peer]]", "Peer"),
    ("#PRZEKIERUJ [[Grusza]]", "Grusza"),
    ("#転送 [[ナシ]]", "ナシ"),
    ("#重定向 [[梨]]", "梨"),
    ("Pear is a fruit. #REDIRECT [[Foo]]", None),  # not at the start
    ("#REDIRECT [[de:Birne]]", None),  # interlanguage target
    ("#REDIRECT [[#Section]]", None),
    ("#REDIRECT no link", None),
    ("", None),
])
def test_redirect_target(wikitext, expected):
    assert redirect_target(wikitext, EN) == expected


# -- disambiguation ---------------------------------------------------------------------------
@pytest.mark.parametrize(("wikitext", "expected"), [
    ("'''Mercury''' may refer to:\n{{disambiguation}}", True),
    ("{{Disambiguation|geo|surname}}", True),  # parameters ignored
    ("{{Template:Disambig}}", True),  # namespace prefix
    ("{{ disambig }}", True),  # spaces around the name
    ("{{Human_name_disambiguation}}", True),  # underscores
    ("{{hndis|Smith, John}}", True),
    ("{{geodis}}", True),
    ("Text __DISAMBIG__", True),
    ("{{Surname}}", False),  # set index, an article
    ("{{Disambiguation needed|date=May 2020}}", False),  # maintenance, not a prefix match
    ("{{Infobox fruit}} '''Pear'''", False),
    ("no templates", False),
])
def test_is_disambiguation_english(wikitext, expected):
    assert is_disambiguation(wikitext, EN, DisambiguationConfig()) is expected


def test_is_disambiguation_per_language_defaults():
    assert is_disambiguation("{{Неоднозначність}}", UK)
    assert is_disambiguation("{{Шаблон:Неоднозначність}}", UK)
    assert is_disambiguation("{{Begriffsklärung}}", SiteInfo(dbname="dewiki"))
    assert is_disambiguation("{{Homonymie}}", SiteInfo(dbname="frwiki"))
    assert is_disambiguation("{{неоднозначность}}", SiteInfo(dbname="ruwiki"))
    assert is_disambiguation("{{Desambiguación}}", SiteInfo(dbname="eswiki"))
    assert is_disambiguation("{{Disambigua}}", SiteInfo(dbname="itwiki"))
    assert is_disambiguation("{{Disambiguation}}", SiteInfo(dbname="simplewiki"))
    assert not is_disambiguation("{{Begriffsklärung}}", EN)


def test_disambiguation_list_is_configurable():
    config = DisambiguationConfig(templates={"enwiki": ("Homonyms",)})
    assert is_disambiguation("{{homonyms}}", EN, config)
    assert not is_disambiguation("{{Dab}}", EN, config)  # replaced the English list
    assert is_disambiguation("{{Disambig}}", EN, config)  # universal names stay


def test_template_names_skip_parser_functions_and_subst():
    names = template_names("{{#if:x|y}} {{subst:Dab}} {{lc:X}} {{Infobox|a={{b}}}}", EN)
    assert names == ["dab", "infobox", "b"]
