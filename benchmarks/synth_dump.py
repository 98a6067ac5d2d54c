"""Synthetic, enwiki-shaped dumps for scaling benchmarks.

    python benchmarks/synth_dump.py OUT.xml.bz2 --articles 4000 [--seed 1]

The corpus job's cost depends on the *shape* of a wiki more than on its
prose: how skewed the link targets are, how many anchor texts a hub entity
collects, how long redirect chains get, how large the largest pages are.
This generator reproduces those shapes at any size, so the job can be
measured at several sizes whose ratios mean something:

* link targets drawn from a Zipf distribution over the articles (s = 1, as
  for Wikipedia's in-links), so the top entity receives a few percent of all
  links: the hot key of every join keyed by entity;
* anchor texts that grow with the corpus (Heaps' law): a link shows the
  title, a short form, or a variant drawn from a heavy-tailed, unbounded set,
  so a hub entity collects thousands of distinct anchors at the larger sizes;
  short forms are shared by several entities (ambiguous aliases);
* ~1 redirect per article, Zipf-skewed towards hubs (a hub has hundreds),
  5% of them in chains of 2-3 hops, one loop, and redirects to other
  namespaces (``#REDIRECT [[Category:...]]``) that links point at;
* "List of ..." pages with 10k+ links each, a disambiguation page with 1k
  entries, and 3 very large articles (~1 MB of wikitext each);
* unlinked repeats of linked names and of the page's own title in the prose,
  which the missing-mention labeller labels.

Pure standard library; deterministic for a seed. Page ids, titles and texts
are fictional.
"""
from __future__ import annotations

import argparse
import bisect
import bz2
import itertools
import os
import random
import re
import sys
from dataclasses import dataclass

from pipelines.sample_dump import page_xml

SITEINFO = """  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://synth.invalid/wiki/Main_Page</base>
    <generator>wikiedm synth_dump</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="-1" case="first-letter">Special</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="4" case="first-letter">Wikipedia</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""

_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "ch", "dr", "gr", "kl", "pr", "st", "th", "tr", "sh"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou"]
_CODAS = ["", "", "n", "r", "s", "l", "m", "nd", "rt", "st", "x"]
FUNCTION_WORDS = ("the", "of", "and", "in", "to", "a", "was", "is", "for", "on", "with", "by", "as",
                  "at", "from", "that", "which", "its", "an", "were")
LIST_PAGES = 3
LIST_PAGE_LINKS = 10_000
DISAMBIGUATION_ENTRIES = 1_000
LARGE_ARTICLES = 3
LARGE_ARTICLE_CHARS = 1_000_000


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))


@dataclass(slots=True)
class Entity:
    title: str
    short: str  # a short form used as anchor text; shared by several entities


class ZipfSampler:
    """Ranks 0..n-1 with p(r) ~ 1 / (r + 1)^s, drawn by bisection on the cumulative weights."""

    def __init__(self, n: int, s: float = 1.0) -> None:
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(n)))

    def draw(self, rng: random.Random) -> int:
        return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])


class SynthWiki:
    """All the wiki's names and distributions; ``pages()`` yields the dump's pages in id order."""

    def __init__(self, articles: int, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.words = sorted({_word(rng, rng.choice((1, 2, 2, 3))) for _ in range(max(4000, articles))})
        names: set[str] = set()
        self.entities: list[Entity] = []
        shorts = [w.capitalize() for w in rng.sample(self.words, max(50, articles // 4))]
        while len(self.entities) < articles:
            short = rng.choice(shorts)
            title = f"{short} {_word(rng, 2).capitalize()}"
            if rng.random() < 0.15:
                title += f" ({rng.choice(self.words)})"
            if title not in names:
                names.add(title)
                self.entities.append(Entity(title, short))
        # Zipf over a random order of the entities: popularity is not alphabetical.
        self.by_popularity = list(range(articles))
        rng.shuffle(self.by_popularity)
        self.targets = ZipfSampler(articles)
        self.variants = ZipfSampler(1_000_000, s=1.1)  # anchor variants: heavy tail, unbounded in practice
        self.redirects = self._make_redirects()

    def target(self) -> int:
        return self.by_popularity[self.targets.draw(self.rng)]

    def anchor(self, e: Entity) -> str | None:
        """None = show the title; else the anchor text of one link to ``e``."""
        r = self.rng.random()
        if r < 0.45:
            return None
        if r < 0.70:
            return e.short
        k = self.variants.draw(self.rng)
        return f"{e.short} {self.words[k % len(self.words)]}" + (f" {k // len(self.words)}" if k >= len(self.words) else "")

    def _make_redirects(self) -> list[tuple[str, str]]:
        """(redirect title, target title): ~1 per article, skewed to hubs; chains, a loop, other namespaces."""
        rng, n = self.rng, len(self.entities)
        taken = {e.title for e in self.entities}
        out: list[tuple[str, str]] = []
        self.redirects_of: dict[int, list[str]] = {}
        for _ in range(n):
            idx = self.target()
            target = self.entities[idx].title
            name = f"{_word(rng, 2).capitalize()} {target}"
            if name not in taken:
                taken.add(name)
                out.append((name, target))
                self.redirects_of.setdefault(idx, []).append(name)
        chained = []
        for name, _target in out[: max(2, len(out) // 20)]:  # chains: redirect -> redirect (-> redirect)
            hop = f"{name} {_word(rng, 1)}"
            if hop not in taken:
                taken.add(hop)
                chained.append((hop, name))
        out.extend(chained)
        out.extend([("Loop alpha", "Loop beta"), ("Loop beta", "Loop alpha")])
        for i in range(5):  # main-namespace titles that redirect to a category (mistyped category links)
            out.append((f"Kategory typo {i}", f"Category:{self.entities[i].short}"))
        return out

    # ------------------------------------------------------------------ prose

    def sentence(self, links: list[str], repeats: list[str]) -> str:
        rng = self.rng
        words = [rng.choice(FUNCTION_WORDS) if rng.random() < 0.45 else rng.choice(self.words)
                 for _ in range(rng.randint(8, 18))]
        for piece in links + repeats:
            words.insert(rng.randrange(len(words) + 1), piece)
        words[0] = words[0][:1].upper() + words[0][1:]
        return " ".join(words) + "."

    def link_markup(self, idx: int) -> tuple[str, str]:
        """(wikitext of one link to entity ``idx`` or one of its redirects, the name shown)."""
        e = self.entities[idx]
        anchor = self.anchor(e)
        target = e.title
        if idx in self.redirects_of and self.rng.random() < 0.08:  # some links go through a redirect
            target = self.rng.choice(self.redirects_of[idx])
        if anchor is None:
            return f"[[{target}]]", target
        return f"[[{target}|{anchor}]]", anchor

    def article(self, e: Entity, paragraphs: int, links_per_paragraph: int) -> str:
        rng = self.rng
        parts = [f"'''{e.title}''' is a {rng.choice(self.words)} of the {rng.choice(self.words)}."]
        shown: list[str] = []
        for p in range(paragraphs):
            if p and p % 3 == 0:
                parts.append(f"\n== {rng.choice(self.words).capitalize()} ==")
            sentences = []
            for _ in range(max(1, links_per_paragraph // 2)):
                links = []
                for _ in range(2):
                    markup, name = self.link_markup(self.target())
                    links.append(markup)
                    shown.append(name)
                repeats = []
                if shown and rng.random() < 0.5:
                    repeats.append(rng.choice(shown))  # an unlinked repeat of a linked name
                if rng.random() < 0.3:
                    repeats.append(e.short if rng.random() < 0.5 else e.title)  # the page's own entity
                sentences.append(self.sentence(links, repeats))
            if rng.random() < 0.2:
                sentences.append(f"{{{{convert|{rng.randint(1, 900)}|km}}}}<ref>{rng.choice(self.words)} {rng.randint(1900, 2020)}</ref>")
            if rng.random() < 0.1:
                sentences.append("{{cite web |url=https://synth.invalid/ |title=" + rng.choice(self.words) + "}}")
            parts.append(" ".join(sentences))
        parts.append(f"\n[[Category:{rng.choice(self.words).capitalize()}]]")
        return "\n\n".join(parts)

    # ------------------------------------------------------------------ pages

    def pages(self):
        """(page_id, ns, title, wikitext, redirect target or None) in id order."""
        rng = self.rng
        page_id = 10
        n = len(self.entities)
        large = set(rng.sample(range(n), min(LARGE_ARTICLES, n)))
        for i, e in enumerate(self.entities):
            if i in large:
                text = self.article(e, paragraphs=1, links_per_paragraph=2)
                while len(text) < LARGE_ARTICLE_CHARS:
                    text += "\n\n" + self.article(e, paragraphs=30, links_per_paragraph=6)
            else:
                text = self.article(e, paragraphs=rng.randint(2, 8), links_per_paragraph=rng.choice((2, 4, 6)))
            yield page_id, 0, e.title, text, None
            page_id += 1
        for source, target in self.redirects:
            yield page_id, 0, source, f"#REDIRECT [[{target}]]", target
            page_id += 1
        for k in range(LIST_PAGES):
            lines = [f"This is a list of {rng.choice(self.words)} things."]
            for _ in range(LIST_PAGE_LINKS):
                lines.append(f"* {self.link_markup(self.target())[0]}, {rng.choice(self.words)}")
            yield page_id, 0, f"List of {rng.choice(self.words)} things {k}", "\n".join(lines), None
            page_id += 1
        common = self.entities[0].short
        entries = [f"* [[{common} {_word(rng, 2).capitalize()} {i}]], a {rng.choice(self.words)}"
                   for i in range(DISAMBIGUATION_ENTRIES)]
        yield page_id, 0, f"{common} (disambiguation)", f"'''{common}''' may refer to:\n" + "\n".join(entries) + "\n\n{{disambiguation}}", None
        page_id += 1
        links_to_odd = " ".join(f"See [[Kategory typo {i}]] and [[Loop alpha]]." for i in range(5))
        yield page_id, 0, "Odd links", f"'''Odd links''' points at redirects out of the main namespace. {links_to_odd}", None
        yield page_id + 1, 14, f"Category:{self.entities[0].short}", "A category.", None
        yield page_id + 2, 1, f"Talk:{self.entities[0].title}", f"About [[{self.entities[0].title}]].", None


def dump_header(path: str) -> str:
    """A real dump's text before its first <page> (the <mediawiki> and <siteinfo> elements)."""
    import gzip
    import lzma

    opener = {".bz2": bz2.open, ".gz": gzip.open, ".xz": lzma.open}.get(os.path.splitext(path)[1], open)
    head = b""
    with opener(path, "rb") as fh:
        while len(head) < 1 << 22:
            block = fh.read(1 << 16)
            if not block:
                break
            head += block
            cut = head.find(b"<page>")
            if cut != -1:
                return head[:cut].decode("utf-8")
    raise ValueError(f"{path}: no <page> in the first 4 MB")


_LINK = re.compile(r"\[\[([^\[\]|\n]+)(?:\|([^\[\]]*))?\]\]")


def _renamed_anchors(text: str, copy: int) -> str:
    """Every plain link of ``text`` shown with a new anchor text: ``[[T|shown]]`` -> ``[[T|shown 3]]``."""
    def rename(m: re.Match) -> str:
        target, label = m.group(1), m.group(2)
        if ":" in target or label == "":
            return m.group(0)  # files, categories, interwiki; the pipe trick
        return f"[[{target}|{label if label is not None else target} {copy}]]"
    return _LINK.sub(rename, text)


def replicated_pages(src: str, copies: int, new_anchor_texts: bool = False):
    """(page_id, title, <page> XML) of ``src``'s pages repeated ``copies`` times (see ``replicate_dump``)."""
    from pipelines.dump import iter_pages
    from pipelines.records import RawPage

    pages = [p for p in iter_pages(src) if isinstance(p, RawPage)]
    span = max((p.page_id for p in pages), default=0) + 1
    for k in range(copies):
        for page in pages:
            title = page.title if k == 0 else f"{page.title} {k + 1}"
            text = _renamed_anchors(page.text, k + 1) if new_anchor_texts and k else page.text
            page_id = page.page_id + k * span
            yield page_id, title, page_xml(page_id, page.ns, title, text, page.redirect)


def replicate_dump(src: str, dst: str, copies: int, new_anchor_texts: bool = False) -> dict:
    """A real dump repeated ``copies`` times, each copy with new page ids and titles ("Title 2").

    Links keep their targets (the first copy's titles), so the link graph grows
    as in a bigger wiki: more pages refer to the same entities. Start-up costs
    then cancel out between two sizes (marginal cost per page). With
    ``new_anchor_texts``, each copy shows its links with new anchor texts, so
    the aliases of each entity grow with the corpus too, as in a real wiki.
    One bz2 stream (or plain XML); ``replicate_multistream`` writes the layout real dumps have.
    """
    opener = (lambda q: bz2.open(q, "wt", encoding="utf-8", compresslevel=6)) if dst.endswith(".bz2") else (
        lambda q: open(q, "w", encoding="utf-8"))
    pages = 0
    with opener(dst) as fh:
        fh.write(dump_header(src))
        for _page_id, _title, xml in replicated_pages(src, copies, new_anchor_texts):
            fh.write(xml)
            pages += 1
        fh.write("</mediawiki>\n")
    return {"pages": pages, "copies": copies}


def multistream_index_path(dump_path: str) -> str:
    """``X-multistream.xml.bz2`` -> ``X-multistream-index.txt.bz2``, where the job looks for it."""
    if not dump_path.endswith("-multistream.xml.bz2"):
        raise ValueError(f"{dump_path}: a multistream dump's name ends in -multistream.xml.bz2")
    return dump_path[: -len(".xml.bz2")] + "-index.txt.bz2"


def replicate_multistream(src: str, dst: str, copies: int, new_anchor_texts: bool = False,
                          pages_per_stream: int = 100, compresslevel: int = 9) -> dict:
    """``replicate_dump`` in the layout of Wikimedia's ``pages-articles-multistream`` dumps.

    ``dst`` (``...-multistream.xml.bz2``) is a chain of bz2 streams: the header
    (``<mediawiki>``, ``<siteinfo>``), then ``pages_per_stream`` whole pages per
    stream, then ``</mediawiki>`` alone; beside it ``...-multistream-index.txt.bz2``
    has one line ``offset:page_id:title`` per page (title XML-escaped, as in real
    index files). Both are written under temporary names and renamed, so an
    interrupted run leaves no half-written dump that looks complete.
    """
    from xml.sax.saxutils import escape

    index_path = multistream_index_path(dst)
    tmp_dump, tmp_index = dst + ".partial", index_path + ".partial"
    counts = {"pages": 0, "copies": copies, "streams": 0, "xml_bytes": 0}
    with open(tmp_dump, "wb") as out, bz2.open(tmp_index, "wt", encoding="utf-8") as index:
        def stream(text: str) -> None:
            data = text.encode("utf-8")
            counts["xml_bytes"] += len(data)
            counts["streams"] += 1
            out.write(bz2.compress(data, compresslevel))

        stream(dump_header(src))
        batch: list[str] = []
        for page_id, title, xml in replicated_pages(src, copies, new_anchor_texts):
            index.write(f"{out.tell()}:{page_id}:{escape(title)}\n")
            batch.append(xml)
            counts["pages"] += 1
            if len(batch) == pages_per_stream:
                stream("".join(batch))
                batch = []
        if batch:
            stream("".join(batch))
        stream("</mediawiki>\n")
        counts["bz2_bytes"] = out.tell()
    os.replace(tmp_index, index_path)
    os.replace(tmp_dump, dst)
    return counts


def write_synth_dump(path: str, articles: int, seed: int = 1) -> dict:
    """Write the dump (bz2 when ``path`` ends in .bz2); return what it holds."""
    wiki = SynthWiki(articles, seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    opener = (lambda p: bz2.open(p, "wt", encoding="utf-8", compresslevel=6)) if path.endswith(".bz2") else (
        lambda p: open(p, "w", encoding="utf-8"))
    counts = {"pages": 0, "articles": articles, "redirects": len(wiki.redirects), "xml_bytes": 0}
    with opener(path) as fh:
        head = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">\n'
                + SITEINFO)
        fh.write(head)
        counts["xml_bytes"] += len(head)
        for page in wiki.pages():
            xml = page_xml(*page)
            fh.write(xml)
            counts["pages"] += 1
            counts["xml_bytes"] += len(xml.encode())
        fh.write("</mediawiki>\n")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="output file (.xml or .xml.bz2)")
    parser.add_argument("--articles", type=int, default=2000, help="number of articles (entities)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    counts = write_synth_dump(args.path, args.articles, args.seed)
    print(f"{args.path}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
