"""Write the project's own sample dump: a small fictional wiki in MediaWiki XML.

    wikiedm sample --output data/sample/samplewiki-pages-articles.xml.bz2
    python -m pipelines.sample_dump ...   (the same command line)

The demo and the tests that must run without ../shared use it. It is made
here, deterministically from a seed, so the repository carries no third-party
text. It exercises what the job must handle: a ``<siteinfo>`` with namespaces,
links with labels, link trails and the pipe trick, section links, redirects
(one hop, two hops, a loop, a redirect to a section), a disambiguation page,
templates, refs, tables, files, categories, interlanguage links, a talk page
and a template page, and enough text per article for a tiny model to learn.
"""
from __future__ import annotations

import bz2
import random
import sys
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from wikiedm.config import ConfigError, command_error

SITEINFO = """  <siteinfo>
    <sitename>Samplewiki</sitename>
    <dbname>samplewiki</dbname>
    <base>https://sample.invalid/wiki/Main_Page</base>
    <generator>wikiedm sample_dump</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="-1" case="first-letter">Special</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="2" case="first-letter">User</namespace>
      <namespace key="4" case="first-letter">Samplewiki</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""

SYLLABLES = ["ar", "bel", "cor", "dun", "el", "fa", "gor", "hal", "ith", "jor", "kel", "lum",
             "mar", "nor", "ost", "pel", "quar", "ros", "sel", "tor", "ul", "vin", "wes", "yar", "zen"]
KINDS = {
    "town": ("is a town in {region}", "{name} lies on the banks of the {river}.", "The town is known for its {thing}."),
    "river": ("is a river that flows through {region}", "The {name} passes the town of {town}.", "Its waters feed the {thing} of the valley."),
    "person": ("was a {job} born in {town}", "{name} studied in {town2} and later worked for the {org}.", "{pronoun} is remembered for {pronoun_pos} work on {thing}."),
    "org": ("is an organisation based in {town}", "The {name} was founded by {person}.", "It is best known for its {thing}."),
    "region": ("is a region of the Sample Republic", "Its largest town is {town}.", "The {river} runs through {name}."),
}
THINGS = ["bridges", "wool trade", "glass making", "old library", "spring festival", "clockworks",
          "salt mines", "orchards", "printing presses", "stone towers", "river ferries", "observatory"]
JOBS = ["painter", "engineer", "poet", "mapmaker", "astronomer", "merchant", "composer", "physician"]


@dataclass(slots=True)
class Entity:
    title: str
    kind: str
    short: str  # a shorter alias used in running text


def _name(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()


def make_entities(rng: random.Random, n_per_kind: int) -> list[Entity]:
    seen: set[str] = set()
    out: list[Entity] = []
    for kind in KINDS:
        made = 0
        while made < n_per_kind:
            base = _name(rng, rng.choice((2, 3)))
            if kind == "person":
                title = f"{base} {_name(rng, 2)}"
                short = title.split()[-1]
            elif kind == "river":
                title, short = f"{base} River", base
            elif kind == "org":
                title, short = f"{base} Guild", f"the {base} Guild"
            else:
                title, short = base, base
            if title in seen or short in seen:
                continue
            seen.update((title, short))
            out.append(Entity(title, kind, short))
            made += 1
    return out


def _link(rng: random.Random, e: Entity) -> str:
    """One of the link forms the extractor must handle, chosen at random."""
    style = rng.random()
    if style < 0.55:
        return f"[[{e.title}]]"
    if style < 0.75 and e.short != e.title:
        return f"[[{e.title}|{e.short.removeprefix('the ')}]]"
    if style < 0.82:
        return f"[[{e.title.replace(' ', '_')}|{e.title}]]"
    if style < 0.9:
        return f"[[{e.title}#History|{e.title}]]"
    return f"[[{e.title[0].lower() + e.title[1:]}]]"  # first-letter case folding


def article_text(rng: random.Random, e: Entity, by_kind: dict[str, list[Entity]], n_paragraphs: int) -> str:
    pick = lambda kind: rng.choice(by_kind[kind])  # noqa: E731
    first, *rest = KINDS[e.kind]
    fill = lambda tpl, linked: tpl.format(  # noqa: E731
        name=e.short if e.kind != "org" else e.title,
        region=_link(rng, pick("region")) if linked else pick("region").title,
        river=_link(rng, pick("river")) if linked else pick("river").title,
        town=_link(rng, pick("town")) if linked else pick("town").title,
        town2=pick("town").title,
        org=_link(rng, pick("org")).replace("[[", "[[", 1) if linked else pick("org").title,
        person=_link(rng, pick("person")) if linked else pick("person").title,
        thing=rng.choice(THINGS),
        job=rng.choice(JOBS),
        pronoun=rng.choice(("He", "She")),
        pronoun_pos=rng.choice(("his", "her")),
    )
    lines = [
        "{{Infobox " + e.kind + " | name = " + e.title + " | image = " + e.short + ".jpg }}",
        f"'''{e.title}''' {fill(first, True)}.<ref>{{{{cite book |title=The {e.short} Almanac |year={rng.randint(1900, 2020)}}}}}</ref>"
        f" {fill(rest[0], True)} {fill(rest[1], False)}",
    ]
    for i in range(n_paragraphs):
        lines.append("")
        if i == 0:
            lines.append("== History ==")
        tpl = rng.choice(KINDS[e.kind][1:])
        other = pick(rng.choice(list(by_kind)))
        lines.append(
            f"{fill(tpl, rng.random() < 0.6)} In later years {e.short} was often compared with "
            f"{other.title}, which {rng.choice(['shares', 'lacks', 'celebrates'])} the same {rng.choice(THINGS)}. "
            f"Visitors to {e.short} still speak of the {rng.choice(THINGS)}.<!-- editor note -->"
        )
    lines += [
        "",
        "{| class=\"wikitable\"\n! Year !! Event\n|-\n| 1901 || [[" + pick("town").title + "]] fair\n|}",
        f"[[File:{e.short}.jpg|thumb|A view of [[{pick('town').title}]]]]",
        "",
        "== See also ==",
        f"* {_link(rng, pick(rng.choice(list(by_kind))))}",
        "",
        "{{Reflist}}",
        f"[[Category:{e.kind.capitalize()}s]]",
        f"[[de:{e.title}]]",
    ]
    return "\n".join(lines)


def page_xml(page_id: int, ns: int, title: str, text: str, redirect: str | None = None) -> str:
    """One <page> of a dump in the 0.11 export schema (one revision); also used by benchmarks/synth_dump.py."""
    redirect_el = f"    <redirect title={quoteattr(redirect)} />\n" if redirect else ""
    return (
        "  <page>\n"
        f"    <title>{escape(title)}</title>\n"
        f"    <ns>{ns}</ns>\n"
        f"    <id>{page_id}</id>\n"
        f"{redirect_el}"
        "    <revision>\n"
        f"      <id>{page_id * 10}</id>\n"
        "      <timestamp>2026-01-01T00:00:00Z</timestamp>\n"
        "      <model>wikitext</model>\n"
        "      <format>text/x-wiki</format>\n"
        f"      <text bytes=\"{len(text.encode())}\" xml:space=\"preserve\">{escape(text)}</text>\n"
        "    </revision>\n"
        "  </page>\n"
    )


def build_sample(n_per_kind: int = 60, n_paragraphs: int = 4, seed: int = 7) -> str:
    """The sample dump as one XML string (small: ~1-2 MB for the defaults)."""
    rng = random.Random(seed)
    entities = make_entities(rng, n_per_kind)
    by_kind: dict[str, list[Entity]] = {}
    for e in entities:
        by_kind.setdefault(e.kind, []).append(e)
    pages: list[str] = []
    page_id = 10
    for e in entities:
        pages.append(page_xml(page_id, 0, e.title, article_text(rng, e, by_kind, n_paragraphs)))
        page_id += 1
    # Redirects: short names of rivers and guilds, a two-hop chain, a loop, one to a section.
    for e in by_kind["river"][:10] + by_kind["org"][:10]:
        alias = e.title.removesuffix(" River").removesuffix(" Guild")
        pages.append(page_xml(page_id, 0, alias, f"#REDIRECT [[{e.title}]]", redirect=e.title))
        page_id += 1
    town = by_kind["town"][0]
    pages.append(page_xml(page_id, 0, "Old " + town.title, f"#REDIRECT [[{town.title} (town)]]", redirect=f"{town.title} (town)"))
    pages.append(page_xml(page_id + 1, 0, f"{town.title} (town)", f"#redirect [[{town.title}#History]]", redirect=town.title))
    pages.append(page_xml(page_id + 2, 0, "Loop one", "#REDIRECT [[Loop two]]", redirect="Loop two"))
    pages.append(page_xml(page_id + 3, 0, "Loop two", "#REDIRECT [[Loop one]]", redirect="Loop one"))
    page_id += 4
    # A disambiguation page and an article that links to it and to the redirects.
    p0, p1 = by_kind["person"][0], by_kind["person"][1]
    dab = f"'''{p0.short}''' may refer to:\n* [[{p0.title}]], a {rng.choice(JOBS)}\n* [[{p1.title}]]\n\n{{{{disambiguation}}}}"
    pages.append(page_xml(page_id, 0, f"{p0.short} (disambiguation)", dab))
    links_page = (
        f"'''Sample Republic''' is the country of [[Old {town.title}]] and of [[Loop one|a loop]]. "
        f"See [[{p0.short} (disambiguation)]], [[{by_kind['river'][0].short}]] and [[#Geography|below]].\n\n"
        "== Geography ==\n" + " ".join(f"[[{e.title}]] lies in the republic." for e in by_kind["region"][:10])
    )
    pages.append(page_xml(page_id + 1, 0, "Sample Republic", links_page))
    pages.append(page_xml(page_id + 2, 1, "Talk:Sample Republic", "Discussion about [[Sample Republic]]."))
    pages.append(page_xml(page_id + 3, 10, "Template:Infobox town", "{| class=\"infobox\"\n| {{{name}}}\n|}"))
    body = "".join(pages)
    return (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" version="0.11" xml:lang="en">\n'
        + SITEINFO + body + "</mediawiki>\n"
    )


def write_sample(path: str, **kwargs) -> str:
    """Write the sample dump to ``path`` (bz2-compressed when it ends in .bz2)."""
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = build_sample(**kwargs).encode("utf-8")
    if path.endswith(".bz2"):
        data = bz2.compress(data, 9)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import sample_parser

    try:
        args, _, _ = sample_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm sample", str(exc))
    write_sample(args.output, n_per_kind=args.per_kind, n_paragraphs=args.paragraphs, seed=args.seed)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
