"""Three stages of the job on small real inputs: ParseWikiDump (TestPipeline: a dump file read in one range
and in two multistream ranges), the labels of pass 2 (a real run on a hand-made dump: hyperlinks, same-page
and title aliases, the alias filter's counted drops) and ChunkWindows (TestPipeline: windows, token-aligned
mentions, entity ids from the vocabulary, splits).

(tests/test_transforms.py covers the tables and the shard writer.)
"""
from __future__ import annotations

import bz2
import html

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.corpus.split import split_of
from pipelines.corpus.tokenizer import load_encoder
from pipelines.dump import plan_read_ranges, read_siteinfo
from pipelines.records import Article, LabeledArticle, Mention
from pipelines.sample_dump import SITEINFO, page_xml
from pipelines.transforms.parse import ParseOptions, ParseWikiDump
from pipelines.transforms.passages import ChunkWindows, PassageOptions
from pipelines.transforms.stats import SumStats
from pipelines.wikitext import DisambiguationConfig
from schemas import UNK_ENTITY_ID


def _counters(stats, names: tuple[str, ...], label: str = ""):
    """The named counters of a stats PCollection, as (name, value) pairs."""
    return stats | f"OnlyCounters{label}" >> beam.Filter(lambda kv: kv[0] in names)


# ---------------------------------------------------------------- ParseWikiDump

LONG = "Filler text. " * 300  # 3,900 characters: over the test's max_wikitext_chars
PAGES = [  # (page id, namespace, title, wikitext, <redirect title>)
    (10, 0, "Paris", "'''Paris''' is the capital of [[France]]. See [[city of Light|the city]].{{Infobox city}}", None),
    (11, 0, "France", "'''France''' is a country. Its capital is [[Paris]].<ref>A source.</ref>", None),
    (12, 0, "Paree", "#REDIRECT [[Paris]]", "Paris"),
    (13, 0, "City of Light", "#REDIRECT [[Paree]]", None),  # an old export: the redirect only in the text
    (14, 0, "Mercury", "'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}", None),
    (15, 1, "Talk:Paris", "Talk about [[Paris]].", None),
    (16, 0, "Empty", "", None),
    (17, 0, "Help me", "#REDIRECT [[Template:Help]]", "Template:Help"),
    (18, 0, "Long", LONG, None),
]
HEAD = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">\n' + SITEINFO


def write_multistream(tmp_path, pages_per_stream: int = 3):
    """The pages as a multistream dump (header stream, then bz2 streams of pages) and its index."""
    streams, index = [bz2.compress(HEAD.encode())], []
    offset = len(streams[0])
    for first in range(0, len(PAGES), pages_per_stream):
        group = PAGES[first:first + pages_per_stream]
        body = "".join(page_xml(*page) for page in group)
        if first + pages_per_stream >= len(PAGES):
            body += "</mediawiki>\n"
        streams.append(bz2.compress(body.encode()))
        index += [f"{offset}:{page[0]}:{html.escape(page[2])}" for page in group]
        offset += len(streams[-1])
    dump = tmp_path / "testwiki-multistream.xml.bz2"
    dump.write_bytes(b"".join(streams))
    (tmp_path / "testwiki-multistream-index.txt.bz2").write_bytes(bz2.compress("\n".join(index).encode() + b"\n"))
    return dump, tmp_path / "testwiki-multistream-index.txt.bz2"


def _article_key(a: Article):
    return a.page_id, a.title, a.text, tuple((ln.start, ln.end, ln.surface, ln.target) for ln in a.links)


def test_parse_wiki_dump_classifies_pages_and_dead_letters(tmp_path):
    dump, index = write_multistream(tmp_path)
    site = read_siteinfo(str(dump))
    sequential = plan_read_ranges(str(dump), None)
    by_streams = plan_read_ranges(str(dump), str(index), target_bytes=1)  # one range per bz2 stream, as workers read
    assert len(sequential) == 1 and len(by_streams) == 3
    options = ParseOptions(max_page_bytes=1 << 20, max_wikitext_chars=3000, progress_every_s=60,
                           disambiguation=DisambiguationConfig())
    paris = "Paris is the capital of France. See the city."
    france = "France is a country. Its capital is Paris."
    with BeamTestPipeline() as p:
        for name, ranges in (("Sequential", sequential), ("ByStreams", by_streams)):  # the same outputs
            out = p | f"Parse{name}" >> ParseWikiDump(ranges, site, options)
            assert_that(out["articles"] | f"Key{name}" >> beam.Map(_article_key), equal_to([
                (10, "Paris", paris, ((24, 30, "France", "France"), (36, 44, "the city", "City of Light"))),
                (11, "France", france, ((36, 41, "Paris", "Paris"),)),
            ]), label=f"Articles{name}")
            assert_that(out["redirects"], equal_to([("Paree", "Paris"), ("City of Light", "Paree")]),
                        label=f"Redirects{name}")
            assert_that(out["page_kinds"], equal_to([
                ("Paris", "article"), ("France", "article"), ("Paree", "redirect"), ("City of Light", "redirect"),
                ("Mercury", "disambiguation"), ("Help me", "other_namespace_redirect"),
            ]), label=f"Kinds{name}")
            assert_that(out["dead"] | f"Dead{name}" >> beam.Map(lambda d: (d.stage, d.reason, d.page_id, d.title)),
                        equal_to([("extract", "empty_page", 16, "Empty"), ("extract", "wikitext_too_long", 18, "Long")]),
                        label=f"DeadLetters{name}")
            names = ("pages_read", "pages_by_namespace/0", "pages_by_namespace/1", "pages_not_in_main_namespace",
                     "redirects", "redirects_out_of_main_namespace", "disambiguation_pages", "articles", "links/kept",
                     "dead_letters/extract/empty_page", "dead_letters/extract/wikitext_too_long", "siteinfo_missing")
            stats = tuple(out["stats"]) | f"Stats{name}" >> SumStats()
            assert_that(_counters(stats, names, name), equal_to([
                ("pages_read", 9), ("pages_by_namespace/0", 8), ("pages_by_namespace/1", 1),
                ("pages_not_in_main_namespace", 1), ("redirects", 3), ("redirects_out_of_main_namespace", 1),
                ("disambiguation_pages", 1), ("articles", 2), ("links/kept", 3),
                ("dead_letters/extract/empty_page", 1), ("dead_letters/extract/wikitext_too_long", 1),
            ]), label=f"Counters{name}")


# ---------------------------------------------------------------- labels (the job's pass 2, by lookups)

LABEL_PAGES = [  # (page id, namespace, title, wikitext, <redirect title>)
    (1, 0, "Paris", "'''Paris''' is the capital of [[France]]. The French Republic is large. "
                    "In Paris, France is everywhere. The end.", None),
    (2, 0, "France", "'''France''' is a country; see [[Paris]].", None),
    (3, 0, "Lyon", "'''Lyon''' is in France.", None),  # links nothing: only its own title entity's aliases
    (4, 0, "Notes", "[[France|French Republic]], [[The (band)|the]], [[Paris|Pa]], [[Lyon]].", None),
]


def test_the_job_labels_hyperlinks_page_and_title_aliases(tmp_path):
    """Pass 2 labels each page's hyperlinks, the aliases of the entities it links to (same page) and of its own
    title entity, from the lookup store; aliases the labeller must not use (a stopword, too short) are dropped
    and counted."""
    import json

    import pyarrow.parquet as pq

    from tests.conftest import run_job_here

    dump = tmp_path / "testwiki-pages-articles.xml"
    dump.write_text(HEAD + "".join(page_xml(*page) for page in LABEL_PAGES) + "</mediawiki>\n", encoding="utf-8")
    out = tmp_path / "out"
    run_job_here(str(dump), out, "--validation_fraction", "0", "--keep_red_links", "true")
    rows = {r["page_id"]: r for path in (out / "passages").glob("*.parquet") for r in pq.read_table(path).to_pylist()}
    labelled = {page: (r["text"], [(m["char_start"], m["char_end"], m["surface"], m["entity"], m["source"])
                                   for m in r["mentions"]]) for page, r in rows.items()}
    text = "Paris is the capital of France. The French Republic is large. In Paris, France is everywhere. The end."
    france, republic = text.index("France"), text.index("French Republic")
    later_paris, later_france = text.index("Paris", 1), text.index("France", france + 1)
    assert labelled[1] == (text, [
        (0, 5, "Paris", "Paris", "title_alias"),
        (france, france + 6, "France", "France", "hyperlink"),
        (republic, republic + 15, "French Republic", "France", "same_page_alias"),
        (later_paris, later_paris + 5, "Paris", "Paris", "title_alias"),
        (later_france, later_france + 6, "France", "France", "same_page_alias"),
    ])
    assert labelled[3] == ("Lyon is in France.", [(0, 4, "Lyon", "Lyon", "title_alias")])
    counters = json.loads((out / "stats.json").read_text())["counters"]
    assert counters["label_aliases_dropped/stopword"] == 1 and counters["label_aliases_dropped/too_short"] == 1


# ---------------------------------------------------------------- ChunkWindows

WINDOW, OVERLAP = 16, 4


def _labelled(page_id: int, title: str, sentence: str, repeats: int, entity: str, surface: str) -> LabeledArticle:
    text = " ".join([sentence] * repeats)
    mentions, start = [], 0
    while (start := text.find(surface, start)) >= 0:
        mentions.append(Mention(start, start + len(surface), surface, entity, "same_page_alias" if mentions else "hyperlink"))
        start += len(surface)
    return LabeledArticle(page_id, title, text, mentions)


def windows_holding(article: LabeledArticle, entity: str) -> int:
    """How many windows of WINDOW tokens every (WINDOW - OVERLAP) hold the entity's mentions whole."""
    _ids, offsets = load_encoder("gpt2-bpe").encode_with_offsets(article.text)
    stride = WINDOW - OVERLAP
    n_windows = 1 + -(-max(0, len(offsets) - WINDOW) // stride)
    held = 0
    for m in article.mentions:
        if m.entity == entity:
            tokens = [i for i, (a, b) in enumerate(offsets) if a < m.end and b > m.start]
            held += sum(w * stride <= tokens[0] and tokens[-1] < w * stride + WINDOW for w in range(n_windows))
    return held


def test_chunk_windows_cuts_overlapping_windows_with_aligned_mentions():
    articles = [
        _labelled(7, "Seine", "The Seine flows through Paris and into the sea near Le Havre.", 4, "Paris", "Paris"),
        _labelled(8, "Loire", "The Loire is the longest river that runs in Francia today.", 3, "Francia", "Francia"),
        LabeledArticle(9, "Blank", "", []),  # no tokens: no windows, counted
    ]
    vocab = [("Paris", 3), ("Le Havre", 4)]  # "Francia" is outside the vocabulary: [UNK]
    options = PassageOptions("gpt2-bpe", WINDOW, OVERLAP, validation_fraction=0.5, split_salt="")
    encoding = load_encoder("gpt2-bpe").encoding  # the job's own GPT-2 BPE (tiktoken, no download)
    expected_splits = {7: split_of(7, 0.5, salt=""), 8: split_of(8, 0.5, salt="")}

    def check_rows(rows):
        by_page: dict[int, list] = {}
        for split, key, row in rows:
            assert split == expected_splits[row["page_id"]] and key == str(row["page_id"])
            assert row["passage_id"] == f"{row['page_id']}:{row['window_index']}"
            by_page.setdefault(row["page_id"], []).append(row)
        assert sorted(by_page) == [7, 8]  # the blank page has no windows
        for page_id, page_rows in by_page.items():
            article = next(a for a in articles if a.page_id == page_id)
            page_rows.sort(key=lambda r: r["window_index"])
            all_tokens = encoding.encode(article.text)
            assert len(page_rows) > 2 and [r["window_index"] for r in page_rows] == list(range(len(page_rows)))
            stride = WINDOW - OVERLAP
            for row in page_rows:
                i = row["window_index"]
                # Windows of WINDOW tokens sharing OVERLAP with the next: exactly the article's tokens.
                assert row["token_ids"] == all_tokens[i * stride:i * stride + WINDOW]
                assert row["text"] == article.text[row["char_offset"]:row["char_offset"] + len(row["text"])]
                assert encoding.decode(row["token_ids"]).strip() == row["text"].strip()
                for m in row["mentions"]:
                    assert row["text"][m["char_start"]:m["char_end"]] == m["surface"]
                    assert encoding.decode(row["token_ids"][m["token_start"]:m["token_end"]]).strip() == m["surface"]
                    assert m["entity_id"] == {"Paris": 3, "Francia": UNK_ENTITY_ID}[m["entity"]]
            # Every mention lands in at least one window, the first one keeping its source.
            found = {(r["char_offset"] + m["char_start"], m["source"]) for r in page_rows for m in r["mentions"]}
            assert {(m.start, m.source) for m in article.mentions} == found
            assert page_rows[-1]["token_ids"][-1] == all_tokens[-1]

    with BeamTestPipeline() as p:
        chunks = {"articles": p | "Arts" >> beam.Create(articles), "vocab": p | "Vocab" >> beam.Create(vocab)} | (
            ChunkWindows(options))
        assert_that(chunks["rows"], check_rows, label="Rows")
        names = ("articles_without_tokens", "passage_mentions/outside_vocab", "mentions_dropped/not_token_aligned")
        # outside_vocab counts mentions in passages: each "Francia" once per window that holds it.
        assert_that(_counters(tuple(chunks["stats"]) | SumStats(), names),
                    equal_to([("articles_without_tokens", 1),
                              ("passage_mentions/outside_vocab", windows_holding(articles[1], "Francia"))]),
                    label="Stats")
