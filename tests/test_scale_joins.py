"""The job's joins at scale: bounded groups, hot keys split, labels unchanged by the split.

Beam TestPipeline tests with a tiny ``max_group`` so that small inputs exercise
the hot-key path that full Wikipedia takes (a hub entity linked from ~500k pages).
"""
from __future__ import annotations

import os
import random

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.corpus.alias_table import vocab_cutoff, vocab_order_key, vocab_rows
from pipelines.corpus.candidates import RankedAliases, alias_rank
from pipelines.corpus.labels import LabelConfig
from pipelines.external_sort import ExternalSorter
from pipelines.records import Article, LinkMention
from pipelines.transforms.aliases import SelectEntityVocab
from pipelines.transforms.joins import GroupJoinFn, LookupJoin, salts_needed
from pipelines.transforms.passages import LabelMissingMentions
from pipelines.transforms.resolve import ResolveLinks, ResolveRedirects
from pipelines.transforms.stats import SumStats


class EchoFn(GroupJoinFn):
    join_name = "Echo"

    def join(self, key, salt, values, requests):
        for request in requests:
            yield key, tuple(values), request


def _stat(stats, name):
    return stats | f"Only{name}" >> beam.Filter(lambda kv, n=name: kv[0] == n)


def test_lookup_join_splits_hot_keys_into_bounded_groups():
    requests = [("hub", i) for i in range(100)] + [("small", i) for i in range(3)] + [("nobody", -1)]
    table = [("hub", "H"), ("small", "S"), ("unused", "U")]
    with BeamTestPipeline() as p:
        out = {"requests": p | "Req" >> beam.Create(requests[:-1]), "table": p | "Tab" >> beam.Create(table)} | (
            LookupJoin(EchoFn(), salt_key=lambda r: r, max_group=10))
        # Every request meets its key's table value exactly once, however the key was split.
        assert_that(out.main, equal_to([("hub", ("H",), i) for i in range(100)]
                                       + [("small", ("S",), i) for i in range(3)]))
        stats = tuple([out["stats"]]) | SumStats()
        # 100 requests over ceil(100 / 10) = 10 salted groups: the largest holds about 10, never 100.
        assert_that(_stat(stats, "largest_group/Echo") | beam.Map(lambda kv: kv[1] <= 20), equal_to([True]),
                    label="Bounded")
        assert_that(_stat(stats, "volume/Echo/requests"), equal_to([("volume/Echo/requests", 103)]), label="Volume")
    assert salts_needed(100, 10) == 13 and salts_needed(11, 10) == 2 and salts_needed(10, 10) == 1 and salts_needed(0, 10) == 1


def test_lookup_join_keeps_one_pages_requests_in_one_group():
    """Requests with one salt key (a page) meet in one sub-group, so they can be de-duplicated there."""

    class PagesFn(GroupJoinFn):
        join_name = "Pages"

        def join(self, key, salt, values, requests):
            pages = {}
            for page, _n in requests:
                pages[page] = pages.get(page, 0) + 1
            yield from pages.items()

    requests = [("hub", (page, n)) for page in range(40) for n in range(3)]
    with BeamTestPipeline() as p:
        out = {"requests": p | "Req" >> beam.Create(requests), "table": p | "Tab" >> beam.Create([("hub", 1)])} | (
            LookupJoin(PagesFn(), salt_key=lambda r: r[0], max_group=5))
        assert_that(out.main, equal_to([(page, 3) for page in range(40)]))


def test_lookup_join_batched_requests_meet_as_single_requests_do():
    """A batch of a hot key is split by its requests' sub-keys: the same groups, outputs and
    counters as the requests sent one by one (with or without request_counts given)."""

    class GroupsFn(GroupJoinFn):
        join_name = "Groups"

        def join(self, key, salt, values, requests):
            yield key, tuple(values), tuple(sorted(requests))

    singles = [("hub", (page, n)) for page in range(40) for n in range(3)] + [("small", (1, 0))]
    batches = [("hub", tuple(r for _k, r in singles[:60])), ("hub", tuple(r for _k, r in singles[60:120])),
               ("small", ((1, 0),))]
    table = [("hub", "H"), ("small", "S")]

    def run(p, name, inputs):
        out = inputs | name >> LookupJoin(GroupsFn(), salt_key=lambda r: r[0], max_group=10)
        return out.main, tuple([out["stats"]]) | f"{name}Stats" >> SumStats()

    with BeamTestPipeline() as p:
        tab = p | "Tab" >> beam.Create(table)
        one, one_stats = run(p, "Singles", {"requests": p | "Req" >> beam.Create(singles), "table": tab})
        many, many_stats = run(p, "Batches", {"request_batches": p | "Bat" >> beam.Create(batches), "table": tab})
        counted, _ = run(p, "Counted", {"request_batches": p | "Bat2" >> beam.Create(batches), "table": tab,
                                        "request_counts": p | "Counts" >> beam.Create([("hub", 120), ("small", 1)])})
        # 120 requests of "hub" over 15 salts (13 of them used), one page's requests always in one group
        expected = _groups(singles, table, 10)
        assert sum(1 for key, _v, _r in expected if key == "hub") == 13
        for name, out in (("One", one), ("Many", many), ("Counted", counted)):
            assert_that(out, equal_to(expected), label=f"{name}Groups")
        for name, stats in (("One", one_stats), ("Many", many_stats)):
            assert_that(stats | f"{name}Volume" >> beam.Filter(lambda kv: kv[0] == "volume/Groups/requests"),
                        equal_to([("volume/Groups/requests", 121)]), label=f"{name}Volume")


def _groups(singles, table, max_group):
    """The (key, values, requests) groups LookupJoin makes of ``singles``, computed directly."""
    from pipelines.transforms.write import stable_shard
    counts = {}
    for key, _r in singles:
        counts[key] = counts.get(key, 0) + 1
    groups = {}
    for key, request in singles:
        salts = salts_needed(counts[key], max_group)
        salt = stable_shard(str(request[0]), salts) if salts > 1 else 0
        groups.setdefault((key, salt), []).append(request)
    values = dict(table)
    return [(key, (values[key],), tuple(sorted(reqs))) for (key, _salt), reqs in groups.items()]


PAGE_KINDS = [("Paris", "article"), ("France", "article"), ("Paree", "redirect"), ("Lutetia", "redirect"),
              ("Cat typo", "other_namespace_redirect"), ("Via typo", "redirect")]
REDIRECTS = [("Paree", "Paris"), ("Lutetia", "Paree"), ("Via typo", "Cat typo")]


def test_hot_link_target_split_gives_the_same_resolutions_and_counts():
    """60 pages link to Paris (some through redirects): max_group=4 splits the hot keys."""
    articles = [Article(i, f"Page {i}", "Paris Paree x", [LinkMention(0, 5, "Paris", "Paris"),
                                                             LinkMention(6, 11, "Paree", "Paree")])
                for i in range(60)]
    articles.append(Article(99, "Odd", "typo", [LinkMention(0, 4, "typo", "Cat typo")]))
    articles.append(Article(98, "Odd two", "via", [LinkMention(0, 3, "via", "Via typo")]))
    for max_group in (4, 1000):
        with BeamTestPipeline() as p:
            resolved = {"redirects": p | "R" >> beam.Create(REDIRECTS), "page_kinds": p | "K" >> beam.Create(PAGE_KINDS)} | (
                ResolveRedirects(5, max_group))
            assert_that(resolved["resolutions"], equal_to([
                ("Paris", ("article", "Paris")), ("France", ("article", "France")), ("Paree", ("article", "Paris")),
                ("Lutetia", ("article", "Paris")), ("Cat typo", ("other_namespace_redirect", "Cat typo")),
                ("Via typo", ("other_namespace_redirect", "Cat typo"))]), label="Resolutions")
            # Redirects out of the main namespace are never entities, red links kept or not.
            links = {"articles": p | "A" >> beam.Create(articles), "resolutions": resolved["resolutions"]} | (
                ResolveLinks(True, max_group))
            assert_that(links["entity_links"], equal_to([("Paris", 120)]), label="EntityLinks")
            assert_that(links["anchors"], equal_to([(("Paris", "Paris"), 60), (("Paree", "Paris"), 60)]), label="Anchors")
            assert_that(links["entity_refs"] | beam.FlatMap(lambda kv: [(kv[0], ref[0]) for ref in kv[1]]) | beam.Distinct()
                        | beam.combiners.Count.Globally(), equal_to([60]), label="Refs")
            stats = tuple(links["stats"]) | SumStats()
            assert_that(_stat(stats, "link_targets/other_namespace_redirect"),
                        equal_to([("link_targets/other_namespace_redirect", 2)]), label="OtherNamespace")


def _check_labels(articles, refs, entity_links, alias_rows, config, max_group, expected):
    with BeamTestPipeline() as p:
        out = {
            "articles": p | "Arts" >> beam.Create(articles),
            "entity_refs": p | "Refs" >> beam.Create(refs),
            "entity_links": p | "Links" >> beam.Create(entity_links),
            "alias_rows": p | "Aliases" >> beam.Create(alias_rows),
        } | LabelMissingMentions(config, max_group=max_group)
        result = out["articles"] | beam.Map(
            lambda a: (a.page_id, tuple((m.start, m.end, m.entity, m.source) for m in a.mentions)))
        assert_that(result, equal_to(expected))


def test_label_missing_mentions_bounded_join_keeps_labels():
    """30 pages link a hub with 200 anchor texts: each page gets the top aliases plus its own anchors,
    and splitting the hub's 30 references into groups of 4 changes nothing."""
    hub = "Hub City"
    anchors = [f"Hubvariant{i}" for i in range(200)]
    alias_rows = [{"alias": a, "entity": hub, "count": 1000 - i, "prior": 0.9, "sources": ["anchor"]}
                  for i, a in enumerate(anchors)]
    alias_rows.append({"alias": hub, "entity": hub, "count": 0, "prior": 0.0, "sources": ["title"]})
    articles, refs, expected = [], [], []
    for page in range(30):
        own = anchors[150 + page]  # far beyond the top aliases a page receives
        text = f"{own} is near. Later {own} and {anchors[0]} and {hub} again."
        articles.append(Article(page, f"Page {page}", text, [LinkMention(0, len(own), own, hub)]))
        refs.append((page, "linked", hub, (own,)))
        later = text.index("Later") + 6
        top = text.index(anchors[0])
        title = text.rindex(hub)
        expected.append((page, ((0, len(own), hub, "hyperlink"), (later, later + len(own), hub, "same_page_alias"),
                                (top, top + len(anchors[0]), hub, "same_page_alias"),
                                (title, title + len(hub), hub, "same_page_alias"))))
    config = LabelConfig(top_aliases_per_page=8)
    for max_group in (4, 10_000):  # one batch of the hub's 30 refs, split into groups of 4 or not at all
        _check_labels(articles, [(hub, tuple(refs))], [(hub, 30)], alias_rows, config, max_group, expected)


def test_ranked_aliases_for_a_page():
    ranked = [(f"a{i}", 10 - i, 0.5, ("anchor",), f"a{i}") for i in range(10)]
    aliases = RankedAliases(ranked)
    assert aliases.for_page(3, set()) == tuple(ranked[:3])
    assert aliases.for_page(3, {"a9", "a7", "a1", "zzz"}) == tuple(ranked[:3]) + (ranked[7], ranked[9])
    order = sorted([("Paris", 5, ()), ("Paree", 0, ("redirect",)), ("PAR", 0, ()), ("Ville", 9, ())],
                   key=lambda a: alias_rank(a[0], "Paris (city)", a[1], a[2]))
    assert [a[0] for a in order] == ["Paris", "Ville", "Paree", "PAR"]


def test_vocab_cutoff_matches_a_full_sort():
    rng = random.Random(3)
    for trial in range(40):
        counts = {f"E{i:03d}": rng.choice((1, 1, 2, 3, 5, 8, 8, 13)) for i in range(rng.randint(0, 60))}
        size = rng.randint(1, 70)
        full = sorted(counts.items(), key=vocab_order_key)[:size]
        cutoff, ties = vocab_cutoff(dict(__import__("collections").Counter(counts.values())), size)
        chosen = [kv for kv in counts.items() if kv[1] > cutoff or (kv[1] == cutoff and ties < 0)]
        tie_titles = sorted(e for e, c in counts.items() if c == cutoff)[: max(ties, 0)]
        chosen += [(e, cutoff) for e in tie_titles]
        assert vocab_rows(chosen) == vocab_rows(full), (trial, counts, size)


def test_select_entity_vocab_breaks_ties_by_title():
    counts = [("B", 5), ("A", 5), ("C", 9), ("D", 1), ("E", 5)]
    with BeamTestPipeline() as p:
        vocab = p | beam.Create(counts) | SelectEntityVocab(3)
        assert_that(vocab | beam.Map(lambda rows: [r["entity"] for r in rows]),
                    equal_to([["[PAD]", "[UNK]", "[MASK]", "C", "A", "B"]]))


def test_external_sorter_merges_spilled_runs(tmp_path):
    rng = random.Random(5)
    items = [(rng.randrange(1000), i) for i in range(1003)]
    with ExternalSorter(key=lambda x: x, buffer_items=50, tmp_dir=str(tmp_path)) as sorter:
        for item in items:
            sorter.add(item)
        assert sorter.spilled_runs == 20
        assert list(sorter.sorted()) == sorted(items)
    assert list(tmp_path.iterdir()) == []  # runs removed


def test_bytes_sample_is_one_in_16_by_default_and_every_request_when_asked():
    """The default sample is the 1-in-16 one earlier stats.json files used (ids chosen by the
    top 4 bits of a Fibonacci hash); WIKIEDM_JOIN_BYTES_SAMPLE=1 (bench_scale --exact_bytes)
    encodes every request."""
    import subprocess
    import sys

    from pipelines.transforms.joins import BYTES_SAMPLE, in_bytes_sample

    assert BYTES_SAMPLE == 16
    ids = range(0, 1_000_000, 7)
    assert [k for k in ids if in_bytes_sample(k)] == [k for k in ids if ((k * 0x9E3779B1) & 0xFFFFFFFF) >> 28 == 0]
    code = ("from pipelines.transforms.joins import in_bytes_sample as s; "
            "print(all(s(k) for k in range(5000)) and s('Paris'))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "WIKIEDM_JOIN_BYTES_SAMPLE": "1"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_external_sort_keeps_items_whose_parts_are_shared_objects():
    """An item holding one object twice is pickled with a memo reference; each spilled item's references must
    reach its own objects, not a previous item's (a regression: one unpickler for a whole run did that)."""
    from pipelines.external_sort import ExternalSorter

    items = []
    for i in range(50):
        shared = f"value {i}"
        items.append((i % 7, i, (shared, shared), {"alias": shared, "entity": shared}))
    with ExternalSorter(lambda item: item[:2], buffer_items=3) as sorter:
        for item in items:
            sorter.add(item)
        assert sorter.spilled_runs > 1
        assert list(sorter.sorted()) == sorted(items, key=lambda item: item[:2])
