"""Wikitext -> plain text + link mentions, and the pre-pass, on small inputs."""
from __future__ import annotations

import pytest

from pipelines.records import Namespace, SiteInfo
from pipelines.wikitext import ExtractConfig, ExtractionError, extract_article, prepass
from pipelines.wikitext.extract import unicode_trail_length

EN = SiteInfo(dbname="enwiki", namespaces=(Namespace(0, ""), Namespace(6, "File"),
                                           Namespace(14, "Category")))
UK = SiteInfo(dbname="ukwiki", namespaces=(Namespace(0, ""), Namespace(6, "Файл"),
                                           Namespace(14, "Категорія")))


def extract(wikitext: str, site: SiteInfo = EN, **kwargs):
    result = extract_article(wikitext, site, **kwargs)
    for link in result.links:  # the invariant every caller relies on
        assert result.text[link.start:link.end] == link.surface
    return result


def mentions(wikitext: str, site: SiteInfo = EN) -> list[tuple[str, str]]:
    return [(link.surface, link.target) for link in extract(wikitext, site).links]


# -- links ---------------------------------------------------------------------------
def test_plain_link_surface_and_offsets():
    result = extract("The [[pear]] is a fruit.")
    assert result.text == "The pear is a fruit."
    [link] = result.links
    assert (link.start, link.end, link.surface, link.target) == (4, 8, "pear", "Pear")
    assert result.counts["links_kept"] == 1


def test_piped_link():
    assert mentions("A [[Pyrus communis|European pear]] tree") == [("European pear", "Pyrus communis")]


def test_link_trail():
    result = extract("Two [[bus]]es and [[apple|app]]les.")
    assert [link.surface for link in result.links] == ["buses", "apples"]
    assert result.text == "Two buses and apples."


def test_link_trail_is_unicode_aware_and_stops_at_non_letters():
    assert mentions("[[Київ]]ський район", UK) == [("Київський", "Київ")]
    assert mentions("[[bus]]'s [[car]]-park [[van]]Go") == [("bus", "Bus"), ("car", "Car"), ("van", "Van")]
    assert unicode_trail_length("市长") == 0  # Han: no trails
    assert unicode_trail_length("és x") == 2


def test_link_trail_rule_is_configurable():
    result = extract_article("[[bus]]és", EN, config=ExtractConfig(link_trail="[a-z]+"))
    assert result.links[0].surface == "bus"
    no_trails = extract_article("[[bus]]es", EN, config=ExtractConfig(link_trail=""))
    assert no_trails.links[0].surface == "bus"


def test_surface_is_the_visible_text():
    # Without a label, MediaWiki shows the target as written (colon removed,
    # escapes decoded); the target is normalised.
    assert mentions("[[foo_bar]]") == [("foo_bar", "Foo bar")]
    assert mentions("[[:Foo]]") == [("Foo", "Foo")]
    assert mentions("[[Caf%C3%A9]]") == [("Café", "Café")]
    assert mentions("[[AT&amp;T]]") == [("AT&T", "AT&T")]
    assert mentions("[[Paris#History]]") == [("Paris#History", "Paris")]


def test_target_normalisation_in_links():
    assert mentions("[[Paris#History|history of Paris]]") == [("history of Paris", "Paris")]
    assert mentions("[[paris|city]]") == [("city", "Paris")]
    assert mentions("[[New_York%20City|NYC]]") == [("NYC", "New York City")]


@pytest.mark.parametrize(("wikitext", "surface", "target"), [
    ("[[Pipe (computing)|]]", "Pipe", "Pipe (computing)"),
    ("[[Yale, Connecticut|]]", "Yale", "Yale, Connecticut"),
    ("[[Boston, Massachusetts (city)|]]", "Boston, Massachusetts", "Boston, Massachusetts (city)"),
])
def test_pipe_trick(wikitext, surface, target):
    assert mentions(wikitext) == [(surface, target)]


def test_pipe_trick_on_other_namespace_shows_the_name_but_is_no_mention():
    result = extract("See [[Wikipedia:Manual of Style|]].")
    assert result.links == []
    assert result.text == "See Manual of Style."
    assert result.counts["other_namespace"] == 1


def test_formatting_inside_labels_is_removed():
    assert mentions("[[Pyrus|''Pyrus'' genus]]") == [("Pyrus genus", "Pyrus")]
    assert mentions("[[A|<span>b</span> c]]") == [("b c", "A")]
    assert mentions("[[A|x\ny]]") == [("x y", "A")]  # newline in a label folded


def test_label_spaces_stay_outside_the_mention():
    result = extract("a[[B| b ]]c")
    assert result.text == "a b c"
    assert result.links[0].surface == "b"


def test_links_that_are_not_mentions_are_counted():
    result = extract(
        "x [[de:Birne]] [[wikt:pear|pear]] [[:Category:Fruit|fruits]] [[#Uses|uses]] "
        "[[#Uses]] [[../x|dots]] [[A|<ref>r</ref>]] [[Help:Editing|help]] [[Category:Pears]] "
        "[[File:P.jpg|thumb|A [[pear]] tree]]")
    assert result.links == []
    counts = result.counts
    assert counts["interlanguage"] == 1
    assert counts["interwiki"] == 1
    assert counts["other_namespace"] == 2
    assert counts["section_link"] == 2
    assert counts["invalid_target"] == 1
    assert counts["empty_surface"] == 1
    assert counts["categories"] == 1
    assert counts["files"] == 1
    assert counts["links_in_file"] == 1
    assert counts.get("links_kept", 0) == 0
    # Visible link text of non-mentions stays readable; sidebar links vanish.
    assert result.text == "x pear fruits uses #Uses dots help"


def test_leading_colon_interlanguage_link_is_inline_text():
    result = extract("see [[:de:Birne|Birne]]")
    assert result.text == "see Birne"
    assert result.counts["interlanguage"] == 1


def test_image_alias_on_another_language_wiki_is_a_file():
    result = extract("Текст [[Image:Київ.jpg|міні|Підпис [[Київ]]]] далі", UK)
    assert result.text == "Текст далі"
    assert result.counts["links_in_file"] == 1


def test_self_link_is_kept_and_counted():
    result = extract("'''[[Pear]]''' is [[pear|pears]]", title="Pear")
    assert [link.target for link in result.links] == ["Pear", "Pear"]
    assert result.counts["self_links"] == 2


def test_nested_link_in_label_is_text():
    result = extract("[[A|b [[C]] d]]")
    assert result.counts.get("nested_link") == 1
    assert "[[" not in result.text


# -- dropped markup, with the links it held counted by reason ------------------------------
def test_links_in_templates_are_counted():
    result = extract("A{{Infobox|x=[[B]]|y={{flag|[[C]]}}}} [[D]] {{unknown|1|m}}.")
    assert result.text == "A D."
    assert [link.target for link in result.links] == ["D"]
    assert result.counts["links_in_template"] == 2
    assert result.counts["templates_dropped"] == 2
    assert result.template_names == {"dropped/Infobox": 1, "dropped/Unknown": 1}


def test_parser_functions_and_parameters_are_templates():
    result = extract("a{{#if:{{{1|}}}|[[X]]|y}}b {{{param}}}c")
    assert result.text == "ab c"
    assert result.counts["links_in_template"] == 1


def test_refs_are_removed_and_their_links_counted():
    result = extract('Fact.<ref name="a">[[Source]] p. 1</ref> More<ref name="a"/>.<ref>x</ref>')
    assert result.text == "Fact. More."
    assert result.counts["links_in_ref"] == 1
    assert result.counts["refs"] == 3


def test_references_tag_is_removed():
    assert extract("== Notes ==\n<references/>\n<references>\n<ref>[[A]]</ref></references>").text == "Notes"


def test_tables_are_removed_and_their_links_counted():
    text = "Before\n{| class=wikitable\n|-\n| [[A]] || {{x|[[B]]}}\n{|\n|[[C]]\n|}\n|}\nAfter [[D]]"
    result = extract(text)
    assert result.text == "Before\nAfter D"
    assert result.counts["links_in_table"] == 3
    assert result.counts["tables"] == 1


def test_table_close_inside_template_does_not_end_the_table():
    result = extract("{|\n|{{a|\n|}}\n|x\n|}\nafter")
    assert result.text == "after"


def test_html_table_is_dropped():
    result = extract("a <table><tr><td>[[X]]</td></tr></table> b")
    assert result.text == "a\nb"
    assert result.counts["links_in_table"] == 1


def test_comments_are_removed():
    assert extract("a<!-- [[X]] {{ -->b<!-- unterminated").text == "ab"


def test_magic_words_are_removed():
    assert extract("__NOTOC__ a __TOC__ b __FORCETOC__").text == "a b"


@pytest.mark.parametrize("tag", ["math", "gallery", "timeline", "score", "syntaxhighlight",
                                 "source", "pre", "chem", "imagemap", "graph"])
def test_content_of_non_prose_tags_is_dropped(tag):
    assert extract(f"a <{tag} x=1>[[Y]] z = 1</{tag}> b").text == "a b"


def test_inner_text_of_formatting_tags_is_kept():
    result = extract("a <b>bold</b> <span style='x'>[[Q]]</span> x<sup>2</sup> <small>s</small>")
    assert result.text == "a bold Q x2 s"
    assert [link.surface for link in result.links] == ["Q"]


def test_nowiki_content_is_literal():
    result = extract("a <nowiki>''b'' [[c]]</nowiki> d")
    assert result.text == "a ''b'' [[c]] d"
    assert result.links == []


def test_bold_and_italic_quotes():
    assert extract("'''Pear''' is ''Pyrus'' and '''''both'''''.").text == "Pear is Pyrus and both."
    assert extract("l''''arbre''' x").text.startswith("l'arbre")


def test_external_links():
    result = extract("See [http://example.org the site] and [http://x.org] or http://bare.org now.")
    assert result.text == "See the site and or now."


def test_headings_lists_and_paragraphs():
    wikitext = "Intro [[A]].\n\n== History ==\n* one\n# two\n: three\n; term : def\n\nLast.\n----\nEnd"
    result = extract(wikitext)
    assert result.text == "Intro A.\nHistory\none\ntwo\nthree\nterm def\nLast.\nEnd"
    assert result.links[0].surface == "A"


def test_headings_can_be_switched_off():
    result = extract_article("a\n== H ==\nb", EN, config=ExtractConfig(keep_headings=False))
    assert result.text == "a\nb"


def test_html_entities_are_decoded():
    assert extract("a&nbsp;b &amp; c &#8212; d").text == "a b & c — d"


def test_whitespace_is_tidied_and_offsets_follow():
    result = extract("  a   [[B]]  {{x}}  ( {{y}} ) [[C]] .\n\n\n  [[D]]  ")
    assert result.text == "a B C.\nD"
    assert [link.surface for link in result.links] == ["B", "C", "D"]


def test_stray_markup_is_removed_and_counted():
    result = extract("a [[b c }} d")
    assert "[[" not in result.text and "}}" not in result.text
    assert result.counts["stray_markup"] == 1


def test_unbalanced_template_is_repaired():
    result = extract("a {{ b [[C]] {{x}} d")
    assert "{{" not in result.text
    assert [link.target for link in result.links] == ["C"]
    assert result.counts["unbalanced_braces"] == 1


def test_empty_input():
    result = extract("")
    assert (result.text, result.links) == ("", [])


# -- errors ----------------------------------------------------------------------------------------
def test_too_deep_template_nesting_is_a_clean_error():
    with pytest.raises(ExtractionError) as info:
        extract_article("{{" * 200 + "x" + "}}" * 200, EN, title="Deep",
                        config=ExtractConfig(max_nesting_depth=20))
    assert info.value.reason == "nesting_too_deep"
    assert "Deep" in str(info.value)


def test_too_large_input_is_a_clean_error():
    with pytest.raises(ExtractionError) as info:
        extract_article("x" * 101, EN, config=ExtractConfig(max_input_chars=100))
    assert info.value.reason == "input_too_large"


def test_pathological_inputs_finish_quickly():
    # Deep tag/link nesting and many unclosed braces: bounded work, no crash.
    for wikitext in ("<span>" * 5000 + "x", "[[" * 5000 + "x", "{{ " * 3000 + "x",
                     "'''''" * 5000, "<ref>" * 3000, "{|\n" * 50 + "x"):
        try:
            result = extract(wikitext)
        except ExtractionError as err:
            assert err.reason in {"nesting_too_deep", "parser_error", "recursion_error"}
        else:
            assert "[[" not in result.text and "{{" not in result.text


# -- the pre-pass alone ----------------------------------------------------------------------------
def test_prepass_counts_links_by_reason():
    result = prepass("a{{t|[[X]]}}<ref>[[Y]]</ref>\n{|\n|[[Z]]\n|}\n<gallery>F.jpg|[[W]]</gallery>b")
    assert result.text == "a\n\n\nb"  # the table leaves a paragraph break
    assert result.counts["links_in_template"] == 1
    assert result.counts["links_in_ref"] == 1
    assert result.counts["links_in_table"] == 1
    assert result.counts["links_in_file"] == 1


def test_prepass_ref_inside_template_is_opaque():
    # A "}}" inside a ref or comment does not close the template.
    assert prepass("a{{t|<ref>}}</ref><!-- }} -->}}b").text == "ab"


def test_prepass_unclosed_tag_drops_the_rest_of_its_line():
    result = prepass("a<ref name=x>b [[L]]\nnext line")
    assert result.text == "a\nnext line"
    assert result.counts["unclosed_tag"] == 1
    assert result.counts["links_in_ref"] == 1


def test_prepass_unclosed_nowiki_drops_only_the_tag():
    result = prepass("a<nowiki>b\nc")
    assert result.text == "ab\nc"
    assert result.counts["unclosed_tag"] == 1


def test_prepass_unclosed_table_runs_to_the_end():
    result = prepass("a\n{|\n|[[X]]")
    assert result.text.strip() == "a"
    assert result.counts["unclosed_table"] == 1
    assert result.counts["links_in_table"] == 1


def test_prepass_link_spanning_a_blank_line_is_broken():
    # A file whose caption lost its "]]" must not swallow the next paragraphs.
    result = prepass("[[File:x.jpg|thumb|caption [[A]]\n\nProse [[B]] more [[C]]]] end")
    assert result.text == "\n\nProse [[B]] more [[C]] end"
    assert result.counts["links_in_broken_link"] == 2


def test_prepass_stray_closing_braces_are_text():
    assert prepass("a }} b").text == "a }} b"


def test_parser_failure_becomes_a_clean_error(monkeypatch):
    import pipelines.wikitext.extract as extract_module

    def broken_parse(_text):
        raise SystemError("C tokenizer exited with non-empty token stack")
    monkeypatch.setattr(extract_module.mwparserfromhell, "parse", broken_parse)
    with pytest.raises(ExtractionError) as info:  # the parser runs where the fast path declines
        extract_article("text", EN, title="Broken", config=ExtractConfig(fast_path=False))
    assert info.value.reason == "parser_error"
    assert "non-empty token stack" in str(info.value) and "Broken" in str(info.value)


# -- property: any mix of markup keeps offsets exact and fails only cleanly ----------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FRAGMENTS = ["[[", "]]", "|", "{{", "}}", "{|", "|}", "\n", " ", "''", "'''", "<ref>", "</ref>",
             "<ref name=a/>", "<!--", "-->", "<b>", "</b>", "<span ", ">", "[http://x.org ", "]",
             "==", "*", "#", ":", "Foo", "bar_baz", "é", "市", "&amp;", "%C3%A9", "File:",
             "Category:", "de:", "wikt:", "<nowiki>", "</nowiki>", "<math>", "</math>", "__TOC__",
             "[[A]]", "[[B|c]]", "[[D]]s", "[[E (x)|]]", "[[File:F.jpg|thumb|[[G]]]]"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_random_markup_keeps_the_offset_invariant(fragments):
    wikitext = "".join(fragments)
    try:
        result = extract_article(wikitext, EN)
    except ExtractionError:
        return
    for link in result.links:
        assert result.text[link.start:link.end] == link.surface
        assert link.surface and link.surface == link.surface.strip()
    for markup in ("[[", "{{", "<ref"):
        assert markup not in result.text or "<nowiki>" in wikitext


# -- no markup residue: the forms refs and tables take on real pages ------------------------------
RESIDUE = ("[[", "]]", "{{", "}}", "<ref", "</ref", "{|", "|}")


@pytest.mark.parametrize(("wikitext", "expected"), [
    # refs: plain with markup inside, named, self-closing, quoted attributes, odd spacing/case
    ("A<ref>Smith, ''Book'', [http://x.org title] \"q\"</ref> b.", "A b."),
    ("A<ref name=\"x y\">c</ref> b<ref name=\"x y\"/> c<ref name='z' /> d", "A b c d"),
    ("A<ref group=\"note\" name=\"a>b\">c</ref> d", "A d"),
    ("A<ref name=\"x\"\n>y</ref> z", "A z"),
    ("Text <ref>a</ref >b <REF>c</REF> d <Ref Name=x>e</ref\n> f", "Text b d f"),
    # refs never closed: the rest of the line (the citation) goes, the next lines stay
    ("A<ref name=x>cite ''Book'' [http://x.org T]\n\nMore text.", "A\nMore text."),
    ("A b.<ref>{{cite web|url=http://x|title=T\n|date=2010}}", "A b."),
    ("A b.<ref>[http://x.org T] ''It''", "A b."),
    ("x <ref name=a", "x"),
    # refs written as entities
    ("x &lt;ref name=&quot;a&quot;&gt;y ''z''&lt;/ref&gt; w &lt;ref name=b /&gt;.", "x w."),
    # tables after indentation, comments or other markup on the line
    ("Text\n<!-- c -->:{| border=\"0\"\n|-\n| a || b\n|+ cap\n|}\nafter", "Text\nafter"),
    ("Text\n<!-- a comment\nover lines -->:{| border=\"0\"\n| a ||+ || b\n|}\nafter", "Text\nafter"),
    ("Text\n  {| class=\"x\"\n| a\n|}\nafter", "Text\nafter"),
    ("Text\n::{|\n| a\n|}\nafter", "Text\nafter"),
    ("Text\n{{clear}}{| class=\"x\"\n| a\n|}\nafter", "Text\nafter"),
    ("Text\n<div>{| class=\"x\"\n| a\n|}</div>\nafter", "Text\nafter"),
    ("Text\n__NOTOC__{|\n| a\n|}\nafter", "Text\nafter"),
    ("Text\n{|\n| a\n<!-- x -->|}\nafter", "Text\nafter"),
    # nested tables
    ("Text\n{|\n| a\n{|\n| b\n|}\n| c\n|}\nafter", "Text\nafter"),
    ("Text\n{|\n| a\n:{|\n| b\n  |}\n| c\n|}\nafter", "Text\nafter"),
    # tables inside templates (removed or rendered) and templates inside tables
    ("Text {{Infobox|x=\n{|\n| a\n|}\n}} after", "Text after"),
    ("Text {{nowrap|\n{|\n| a\n|}\n}} after", "Text after"),
    ("Text\n{|\n| {{nowrap|\n|}} b\n|}\nafter", "Text\nafter"),
    # table debris: a "|}" with no table open
    ("Text\n|}\nafter", "Text\nafter"),
    # "{|" inside a sentence is not a table
    ("the set {|x| : x > 0} here", "the set {|x| : x > 0} here"),
])
def test_no_markup_residue(wikitext, expected):
    result = extract(wikitext)
    assert result.text == expected
    if "{|x|" not in wikitext:
        assert not any(markup in result.text for markup in RESIDUE)


def test_unclosed_ref_at_page_end_counts_its_links():
    result = extract("Fact.<ref>See [[Source]] and [[Other]]")
    assert result.text == "Fact."
    assert result.counts["links_in_ref"] == 2 and result.counts["unclosed_tag"] == 1


def test_utf16_halves_written_as_entities_become_one_character_and_lone_halves_u_fffd():
    """`&#55357;&#56832;` is how some editors wrote emoji; decoded one entity at a time it leaves lone
    surrogates, which no UTF-8 (Parquet) writer accepts, so one such page would fail a whole shard."""
    result = extract("Smile &#55357;&#56832; and &#xD83D;&#xDE00;, lone &#xD800; then [[Paris]] &#65;.")
    assert result.text == "Smile 😀 and 😀, lone \ufffd then Paris A."
    result.text.encode("utf-8")  # strict: raises on any surrogate left
    (link,) = result.links
    assert result.text[link.start:link.end] == "Paris"
    assert result.counts["lone_surrogate_entities"] == 1


# -- balance_link_brackets takes simple pairs whole: the same edits as bracket by bracket ----------
def _balance_link_brackets_bracket_by_bracket(text: str, counts: dict, max_depth: int = 4) -> str:
    """The pairing scan one "[[" / "]]" at a time (as it was before it took simple pairs whole)."""
    import bisect
    import re

    from pipelines.wikitext.prepass import _apply_edits

    blank_lines = [match.start() for match in re.finditer(r"\n[ \t]*\n", text)]
    stack: list[int] = []
    edits = []
    for match in re.finditer(r"\[\[|\]\]", text):
        if match.group() == "[[":
            stack.append(match.start())
            continue
        if not stack:
            continue
        opener, closer = stack.pop(), match.start()
        next_blank = bisect.bisect_left(blank_lines, opener)
        if next_blank < len(blank_lines) and blank_lines[next_blank] < closer:
            line_end = text.find("\n", opener)
            edits.append((opener, line_end, ""))
            edits.append((closer, closer + 2, ""))
            counts["links_in_broken_link"] = counts.get("links_in_broken_link", 0) + text.count(
                "[[", opener, line_end)
        elif len(stack) >= max_depth:
            edits.append((opener, opener + 2, ""))
            edits.append((closer, closer + 2, ""))
            counts["stray_markup"] = counts.get("stray_markup", 0) + 1
    edits.extend((start, start + 2, "") for start in stack)
    if stack:
        counts["stray_markup"] = counts.get("stray_markup", 0) + len(stack)
    return _apply_edits(text, edits)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["[[", "]]", "[", "]", "\n", "\n\n", " \n", "a", "b|c", "[[a]]",
                                 "[[a|b]]", "[[[[", "]]]]"]), max_size=40),
       st.integers(1, 5))
def test_link_bracket_balance_equals_the_bracket_by_bracket_scan(pieces, max_depth):
    from pipelines.wikitext.prepass import balance_link_brackets

    text = "".join(pieces)
    counts: dict = {}
    expected_counts: dict = {}
    assert balance_link_brackets(text, counts, max_depth) == \
        _balance_link_brackets_bracket_by_bracket(text, expected_counts, max_depth)
    assert counts == expected_counts
