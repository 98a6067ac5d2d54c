"""The fast path renders exactly what mwparserfromhell + the renderer render, or declines.

Both paths run on every article of the shared dumps and on random markup;
their outputs (text, mentions with offsets, counts, template names) must be
identical. The whitespace tidy's fast form is checked against its offset-
mapping form the same way.
"""
from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.records import Namespace, SiteInfo
from pipelines.wikitext import ExtractConfig, ExtractionError, extract_article
from pipelines.wikitext.extract import _MARK, _fold_lines, _tidy, _tidy_mapped

EN = SiteInfo(dbname="enwiki", namespaces=(Namespace(0, ""), Namespace(6, "File"),
                                           Namespace(14, "Category")))
SLOW = ExtractConfig(fast_path=False)


def both(wikitext: str, site: SiteInfo = EN, title: str = "Page"):
    """(fast-path result, parser-only result); an ExtractionError's reason stands for a result."""
    results = []
    for config in (ExtractConfig(), SLOW):
        try:
            result = extract_article(wikitext, site, title=title, config=config)
            results.append((result.text, result.links, result.counts, result.template_names))
        except ExtractionError as err:
            results.append(("error", err.reason))
    return results


def parser_used(wikitext: str) -> str:
    return extract_article(wikitext, EN, title="Page").parser


@pytest.mark.parametrize("wikitext", [
    "The '''[[pear]]''' is a ''fruit''&nbsp;&amp; [[apple|apple]]s and [[Pyrus|''Pyrus'' genus]].",
    "== History ==\n* one [[a|b]]s\n# two\n; term : def\n: indent\n----\nend",
    "See [http://x.org the site], [http://y.org] and http://z.org/a_(b), then mailto:a@b.c.",
    "a <b>bold</b> <span style=\"x\">[[Q]]</span> x<sup>2</sup><br/>y<br>z <div>block</div>",
    "x [[de:Birne]] [[wikt:pear|pear]] [[:Category:Fruit|fruits]] [[#Uses|uses]] [[Category:P]] "
    "[[File:P.jpg|thumb|A [[pear]] tree]] [[A (b)|]] [[foo_bar]]",
    "''a\nb'' and an unclosed ''italic\n* item\n== H ==\nmore",
    "l''''arbre''' and '''''both''''' and '''''b''' i'' and ''''''x'''''' ",
])
def test_fast_path_matches_the_parser_on_common_markup(wikitext):
    fast, slow = both(wikitext)
    assert fast == slow


@pytest.mark.parametrize("wikitext", [
    "''a [[b|c'']] d''",  # a style closing inside a link label
    "[[a|''b]] c",  # an unclosed style inside a label
    "== A == [[b]] x\ntext",  # markup after a heading's closing "="
    "[[http://x.org a]]",
    "[[a|b\n* c]]",
])
def test_fast_path_declines_what_it_cannot_promise(wikitext):
    assert parser_used(wikitext) == "mwparserfromhell"
    fast, slow = both(wikitext)
    assert fast == slow


@pytest.mark.slow
@pytest.mark.needs_shared
def test_fast_path_matches_the_parser_on_every_shared_article():
    from tests.test_wikitext_real_dumps import ARTICLE_DUMPS, articles

    total = fast_pages = 0
    for dump in ARTICLE_DUMPS:
        site, pages = articles(dump)
        for title, wikitext in pages:
            fast, slow = both(wikitext, site, title)
            assert fast == slow, (dump, title)
            total += 1
            try:
                fast_pages += extract_article(wikitext, site, title=title).parser == "fast"
            except ExtractionError:
                pass
    assert fast_pages >= 0.85 * total, (fast_pages, total)


FRAGMENTS = ["[[", "]]", "|", "{{", "}}", "{|", "|}", "\n", " ", "  ", "''", "'''", "'", "'''''",
             "''''", "<ref>", "</ref>", "<b>", "</b>", "<span class=\"a\">", "</span>", "<br>", "<br/>",
             "<div>", "</div>", "<", ">", "[http://x.org ", "[//y.org]", "]", "[", "http://z.org/a",
             "mailto:x@y", "News:", "==", "=", "*", "#", ":", ";", "----", "Foo", "bar_baz", "é", "市",
             "&amp;", "&nbsp;", "&#91;", "&bogus;", "&", "%C3%A9", "File:", "Category:", "de:",
             "wikt:", "(", ")", ",", ".", "__TOC__", "[[A]]", "[[B|c]]", "[[D]]s", "[[E (x)|]]",
             "[[File:F.jpg|thumb|[[G]] ''g'']]", "[[H|''h'']]", "\ufdd0", "<nowiki>", "</nowiki>",
             "{{nowrap|x}}", "{{lang|fr|[[Paris]]}}"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_random_markup_renders_the_same_on_both_paths(fragments):
    fast, slow = both("".join(fragments))
    assert fast == slow


def test_parser_takes_over_at_a_clean_line_start():
    # Long clean prose, then a style left open in a link label, which the fast path declines:
    # only the tail goes to mwparserfromhell, and the result is the parser's for the whole page.
    prose = "".join(f"Line {i} with a [[link {i}|label]] and ''italic'' words.\n" for i in range(60))
    wikitext = prose + "Then [[a|''tangle]] of styles [[x]]s.\nAnd a last line."
    result = extract_article(wikitext, EN, title="Page")
    assert result.parser == "fast+mwparserfromhell"
    fast, slow = both(wikitext)
    assert fast == slow


@pytest.mark.parametrize("wikitext", [
    "'''a ''b''' c''",  # improperly nested styles
    "Swift'''s satire [[Vietnam War]]s and ''more'' text",  # a bold left open
    "'''''a''' b and '''''c'' d''' e",
    "''''x'' y ''''' z '''''' w",
    "''a '''b ''c '''d ''e",  # alternating runs, none closed
    "; a ''b : c'' : d\n; e : f",  # a style in a definition term
    "; a ''b\nc : d'' e : f\ng : h",  # the term's ":" after the style closes, lines later
    "''a\n; b : c\n''d : e",
    "'''a\n== H ''i'' ==\n* [[l|m]]s <span>''x''</span> b'''c",
    "x [''[y]''] '''[[z]]'''s ''[[w]]''s",
    "''\n* ''[''[",  # a loose '' between brackets: text, so "[" + "[" meet and are removed
    "'''''>'':'''\n;''''']''''':",  # the ";" sets the term of an open bold, not the top level's
])
def test_top_level_styles_are_paired_as_the_parser_pairs_them(wikitext):
    assert parser_used(wikitext) == "fast"
    fast, slow = both(wikitext)
    assert fast == slow


def test_style_pairing_declines_beyond_its_depth():
    # 60 style contexts nested open (each '' opens in a ''' and vice versa): past MAX_STYLE_DEPTH.
    wikitext = "''a '''b " * 30
    assert parser_used(wikitext) == "mwparserfromhell"
    fast, slow = both(wikitext)
    assert fast == slow


TOP_STYLES = ["''", "'''", "'''''", "''''", "''''''", "'", "x", " y", "\n", "\n* ", "\n; ", "\n;", ":",
              " : ", "\n: ", "\n== h ==\n", "\n----\n", "[[a|b]]", "[[c]]s", "[[d|''e'']]", "<b>q</b>",
              "<span>''r''</span>", "[http://q.org r]", "http://s.org", "&amp;", "[", "]", "{", "}",
              "z:"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOP_STYLES), max_size=40))
def test_random_top_level_styles_render_the_same_on_both_paths(pieces):
    fast, slow = both("".join(pieces))
    assert fast == slow


STYLES = ["''", "'''", "'''''", "''''", "x", " y", "\n", "\n* ", "\n== h ==\n", "[[a|b]]",
          "[[d|''e'']]", "<b>q</b>", "]", "[", "'", "[http://q.org r]", ":", "\n; t : d"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STYLES), max_size=40))
def test_random_styles_render_the_same_with_resume_points_everywhere(pieces):
    from pipelines.wikitext import fastrender

    saved = fastrender.CHECKPOINT_EVERY
    fastrender.CHECKPOINT_EVERY = 1  # a resume point at every clean line start
    try:
        fast, slow = both("".join(pieces))
    finally:
        fastrender.CHECKPOINT_EVERY = saved
    assert fast == slow


SPACES = [" ", "  ", "\n", "\t", "(", ")", ",", ".", ";", ":", "a", "b", "xy", "\xa0", "\uff08",
          "\uff09", " \n "]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SPACES), max_size=20), st.data())
def test_tidy_by_marks_equals_tidy_by_offset_mapping(pieces, data):
    raw = "".join(pieces)
    # Mentions start and end on non-space characters and do not overlap, as the renderer makes them.
    solid = [index for index, char in enumerate(raw) if not char.isspace()]
    spans = []
    position = 0
    for _ in range(data.draw(st.integers(0, 3))):
        starts = [index for index in solid if index >= position]
        if not starts:
            break
        start = data.draw(st.sampled_from(starts))
        end = data.draw(st.sampled_from([index + 1 for index in solid if index >= start]))
        spans.append((start, end, "T"))
        position = end
    counts_fast: dict = {}
    counts_mapped: dict = {}
    assert _tidy(raw, spans, counts_fast) == _tidy_mapped(raw, spans, counts_mapped)
    assert counts_fast == counts_mapped


PUNCTUATION = [" ", "  ", "\n", "\t", "(", ")", ",", ".", ";", ":", "a", "\xa0", "\uff08", "\uff09",
               _MARK]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PUNCTUATION), max_size=20))
def test_punctuation_tidy_equals_its_regex(pieces):
    from pipelines.wikitext.extract import _TIDY_PUNCT_MARKED, _tidy_punctuation

    text = "".join(pieces)
    if any(  # at most two marks touch in a real text (an end, then a start)
            text[i] == _MARK and text[i + 1] == _MARK and text[i + 2] == _MARK
            for i in range(len(text) - 2)):
        return
    assert _tidy_punctuation(text) == _TIDY_PUNCT_MARKED.sub(r"\1", text)


def test_only_the_space_is_printable_whitespace():
    """_fold_lines' premise: a printable line holds no whitespace but " "."""
    assert [hex(code) for code in range(sys.maxunicode + 1)
            if chr(code).isspace() and chr(code).isprintable() and chr(code) != " "] == []
    assert _MARK.isprintable() and not _MARK.isspace()


FOLDED = [" ", "  ", "\n", "\n\n", "\t", "\r", "\xa0", "\u2028", "\x0b", "\u3000", "\x1f", "\xad", "a", "b",
          _MARK, "\ue000"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(FOLDED), max_size=24))
def test_fold_lines_equals_split_and_join(pieces):
    text = "".join(pieces)
    assert _fold_lines(text) == "\n".join(filter(None, (" ".join(line.split()) for line in text.split("\n"))))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="&#_l;t'\ufdd0a", max_size=30), st.sampled_from(["&#", "&lt;", "__", "'\ufdd0", "\ufdd0'", "a"]))
def test_contains_is_in(text, needle):
    from pipelines.wikitext.textparts import contains

    assert contains(text, needle) == (needle in text)
