"""Variant rules of the missing-mention labeller: first-letter case, English plural and possessive.

Each is its own versioned source; they label only text the exact rules left free, so the exact
rules' labels are the same with or without them.
"""
from __future__ import annotations

import dataclasses

import pytest

from pipelines.corpus.labels import (
    ALIAS_FIRST_LETTER_CASE,
    ALIAS_PLURAL_EN,
    ALIAS_POSSESSIVE_EN,
    SAME_PAGE_ALIAS,
    TITLE_ALIAS,
    VARIANT_SOURCES,
    AliasCandidate,
    LabelConfig,
    english_number_variant,
    english_possessive_base,
    english_singular,
    label_missing_mentions,
    swap_first_letter,
)
from pipelines.records import Mention, SiteInfo
from pipelines.wiki_mentions import labels_for_site
from schemas.corpus import MENTION_SOURCES

EN = LabelConfig.for_language("en")
UK = LabelConfig.for_language("uk")
NO_VARIANTS = dataclasses.replace(EN, label_case_variants=False, label_plural_variants=False,
                                  label_possessive_variants=False)


def link(text: str, surface: str, entity: str, occurrence: int = 0) -> Mention:
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(surface, start + 1)
    return Mention(start, start + len(surface), surface, entity, "hyperlink")


def anchor(alias: str, entity: str) -> AliasCandidate:
    return AliasCandidate(alias, entity, 1, 1.0, "linked", ("anchor",))


def spans(mentions):
    return [(m.surface, m.entity, m.source) for m in mentions]


def test_variant_sources_are_mention_sources():
    assert set(VARIANT_SOURCES) <= set(MENTION_SOURCES)
    assert len(set(MENTION_SOURCES)) == len(MENTION_SOURCES)


# --------------------------------------------------------------------------- first-letter case


def test_first_letter_case_variant_both_ways_on_a_first_letter_wiki():
    text = "Epilepsy is common. Many have epilepsy. A cultivar is bred; Cultivar names vary."
    links = [link(text, "Epilepsy", "Epilepsy"), link(text, "cultivar", "Cultivar")]
    cands = [anchor("Epilepsy", "Epilepsy"), anchor("cultivar", "Cultivar")]
    assert spans(label_missing_mentions(text, links, cands, EN)) == [
        ("epilepsy", "Epilepsy", ALIAS_FIRST_LETTER_CASE), ("Cultivar", "Cultivar", ALIAS_FIRST_LETTER_CASE)]
    # A case-sensitive wiki (its titles' first letters matter), or the rule off: nothing.
    assert label_missing_mentions(text, links, cands, dataclasses.replace(EN, title_case="case-sensitive")) == []
    assert label_missing_mentions(text, links, cands, dataclasses.replace(EN, label_case_variants=False)) == []


def test_first_letter_case_works_in_any_cased_script_and_not_in_uncased_ones():
    text = "Ландшафтознавство вивчає ландшафти. Ландшафтознавство, а також ландшафтознавство."
    links = [link(text, "Ландшафтознавство", "Ландшафтознавство")]
    out = label_missing_mentions(text, links, [anchor("Ландшафтознавство", "Ландшафтознавство")], UK)
    assert spans(out) == [("Ландшафтознавство", "Ландшафтознавство", SAME_PAGE_ALIAS),
                          ("ландшафтознавство", "Ландшафтознавство", ALIAS_FIRST_LETTER_CASE)]
    assert swap_first_letter("北京") is None and swap_first_letter("1990s") is None
    assert swap_first_letter("ßeta") is None  # 'ß'.upper() is two letters: offsets would move


def test_the_exact_rules_win_and_keep_their_labels():
    # "Apple" is an exact alias of Apple Inc.; the variant of the fruit's "apple" never takes it.
    text = "An apple grows. Apple sells phones. Apple was founded in 1976."
    links = [link(text, "apple", "Apple"), link(text, "Apple", "Apple Inc.")]
    cands = [anchor("apple", "Apple"), anchor("Apple", "Apple Inc.")]
    assert spans(label_missing_mentions(text, links, cands, EN)) == [("Apple", "Apple Inc.", SAME_PAGE_ALIAS)]


def test_a_variant_that_two_entities_produce_is_dropped():
    # "city" is the singular of City's "cities" and the lowered "City" of a magazine: neither wins.
    text = "City was launched in 1990. Many cities grew. A city is big. More cities came."
    links = [link(text, "City", "City (magazine)"), link(text, "cities", "City")]
    cands = [anchor("City", "City (magazine)"), anchor("cities", "City")]
    assert spans(label_missing_mentions(text, links, cands, EN)) == [("cities", "City", SAME_PAGE_ALIAS)]


def test_a_capital_is_lowered_only_where_the_page_links_it_at_a_sentence_start():
    """'bush', 'apple' are words: a capitalised alias is lowered only when every link of the page
    with that text starts a sentence or line (the capital is the position's)."""
    text = "He met Bush in Texas. A bush grew there."
    links = [link(text, "Bush", "George W. Bush")]
    assert label_missing_mentions(text, links, [anchor("Bush", "George W. Bush")], EN) == []
    text = "Bush grew up in Texas.\nA bush grew there."
    links = [link(text, "Bush", "George W. Bush")]
    assert spans(label_missing_mentions(text, links, [anchor("Bush", "George W. Bush")], EN)) == [
        ("bush", "George W. Bush", ALIAS_FIRST_LETTER_CASE)]  # the rule's reading: a sentence-start anchor
    # A title with a qualifier keeps its capital: 'Time (magazine)' does not label 'time'.
    text = "Time was founded in 1923. It is time to go."
    cands = [AliasCandidate("Time", "Time (magazine)", 0, 0.0, "title", ("title",))]
    assert [m.surface for m in label_missing_mentions(text, [], cands, EN)] == ["Time"]
    # An alias from the alias table that the page does not link with is never lowered.
    text = "An apple fell on Apple headquarters."
    assert [m.surface for m in label_missing_mentions(text, [], [anchor("Apple", "Apple Inc.")], EN)] == ["Apple"]


def test_title_entity_variants_label_the_page_itself():
    text = "Italic type is a font style. Most fonts have an italic type."
    cands = [AliasCandidate("Italic type", "Italic type", 0, 0.0, "title", ("title",))]
    out = label_missing_mentions(text, [], cands, EN)
    assert spans(out) == [("Italic type", "Italic type", TITLE_ALIAS),
                          ("italic type", "Italic type", ALIAS_FIRST_LETTER_CASE)]


# --------------------------------------------------------------------------- English plural


@pytest.mark.parametrize("alias, variant", [
    ("rootstocks", "rootstock"), ("cultivar", "cultivars"), ("city", "cities"), ("cities", "city"),
    ("box", None), ("boxes", "box"), ("church", "churches"), ("class", "classes"), ("final cause", "final causes"),
    ("Phoenicians", None), ("Fatimids", None), ("linguistics", None), ("Baltic Tigers", None), ("Ulm", None), ("DVDs", None), ("monkey", "monkeys"), ("day", None),
])
def test_english_number_variant(alias, variant):
    assert english_number_variant(alias) == variant


def test_english_singular_leaves_singular_words_alone():
    assert [english_singular(w) for w in ("genus", "analysis", "glass", "city")] == [None] * 4


def test_plural_variant_only_on_english_wikis():
    text = "Pears are grafted onto rootstocks. The rootstock decides the size."
    links = [link(text, "rootstocks", "Rootstock")]
    cands = [anchor("rootstocks", "Rootstock")]
    assert spans(label_missing_mentions(text, links, cands, EN)) == [("rootstock", "Rootstock", ALIAS_PLURAL_EN)]
    for config in (UK, LabelConfig(), dataclasses.replace(EN, label_plural_variants=False)):
        assert label_missing_mentions(text, links, cands, config) == []  # LabelConfig(): language unknown


def test_plural_of_a_case_swapped_alias():
    text = "Alkenes react. Cycloalkanes too. Some alkenes burn."
    links = [link(text, "alkenes", "Alkene")]
    out = label_missing_mentions(text, links, [anchor("alkenes", "Alkene")], EN)
    assert spans(out) == [("Alkenes", "Alkene", ALIAS_FIRST_LETTER_CASE)]
    text = "Weed grows. Gardeners pull weeds."
    links = [link(text, "weeds", "Weed")]
    assert spans(label_missing_mentions(text, links, [anchor("weeds", "Weed")], EN)) == [
        ("Weed", "Weed", ALIAS_PLURAL_EN)]


# --------------------------------------------------------------------------- English possessive


def test_possessive_alias_labels_its_base():
    assert english_possessive_base("Pinckney's") == "Pinckney"
    assert english_possessive_base("Jesus'") == "Jesus" and english_possessive_base("Jesus") is None
    text = "Charles Pinckney's plan was read. Charles Pinckney spoke."
    links = [link(text, "Charles Pinckney's", "Charles Pinckney (governor)")]
    cands = [anchor("Charles Pinckney's", "Charles Pinckney (governor)")]
    assert spans(label_missing_mentions(text, links, cands, EN)) == [
        ("Charles Pinckney", "Charles Pinckney (governor)", ALIAS_POSSESSIVE_EN)]
    assert label_missing_mentions(text, links, cands, UK) == []


# --------------------------------------------------------------------------- the job's settings


def test_the_job_takes_language_and_case_rule_from_siteinfo_unless_set():
    uk = labels_for_site(LabelConfig(), SiteInfo(dbname="ukwiki", case="first-letter"))
    assert (uk.language, uk.title_case) == ("uk", "first-letter") and uk.variant_rules == (ALIAS_FIRST_LETTER_CASE,)
    en = labels_for_site(LabelConfig(), SiteInfo(dbname="enwiktionary", case="case-sensitive"))
    assert (en.language, en.title_case, en.variant_rules) == ("en", "case-sensitive", (ALIAS_PLURAL_EN, ALIAS_POSSESSIVE_EN))
    simple = labels_for_site(LabelConfig(), SiteInfo(dbname="simplewiki"))
    assert simple.variant_rules == VARIANT_SOURCES
    unknown = labels_for_site(LabelConfig(), SiteInfo(from_dump=False))  # no <siteinfo>: no English rules
    assert unknown.variant_rules == (ALIAS_FIRST_LETTER_CASE,)
    forced = labels_for_site(LabelConfig(language="en"), SiteInfo(from_dump=False))
    assert forced.language == "en"


def test_alias_shapes_made_from_the_alias_tokens_equal_those_made_by_tokenising_each_variant():
    """pack_alias derives its variants' last pairs from the alias's tokens (once per alias-table row, the
    bulk of pass 1's label work); they must be those of tokenising every variant, in any script and case."""
    import random

    from pipelines.corpus.labels import (
        _TOKENS_SPLITTING_UNSPACED,
        _TOKENS_WHOLE_WORDS,
        _alias_shape,
        _fold,
        _token_pairs,
        _variant_ends,
        alias_form,
        first_token,
    )

    def by_variant(alias: str, case_sensitive: bool, token_re) -> tuple:
        folded = alias if case_sensitive else _fold(alias, False)
        pairs = _token_pairs(token_re.findall(folded))
        base = english_possessive_base(folded)
        return (folded, pairs, pairs[1:-1], None if base is None else _token_pairs(token_re.findall(base)),
                _variant_ends(folded, token_re) if pairs else None)

    pieces = list("aAbsSeEyYxzcChH '’-.&_1éÉßİǅⒶ\u0345ไ北\u00a0\u2009") + ["ies", "es", "'s", "s'", "ics", " cats"]
    rng = random.Random(29)
    aliases = ["Paris 2", "two rootstocks", "Apple pies", "AT&T", "Jesus'", "Pinckney's", "Aไทยa", "É cities",
               "New York City's", "x-rays", "Ⓐbcd efgs", "İstanbul parks", "ßeta cats", "a b", "Ab's"]
    aliases += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 7))) for _ in range(3000)]
    for alias in aliases:
        for token_re in (_TOKENS_SPLITTING_UNSPACED, _TOKENS_WHOLE_WORDS):
            for case_sensitive in (True, False):
                assert _alias_shape(alias, case_sensitive, token_re) == by_variant(alias, case_sensitive, token_re), alias
        for config in (EN, dataclasses.replace(EN, case_sensitive=False, match_unspaced_scripts=False)):
            assert alias_form(alias, config)[0] == first_token(alias, config), alias
