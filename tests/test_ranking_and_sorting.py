"""The pure rules behind the job's tables at scale: ranked aliases per page, the vocabulary's cut-off from a
histogram of link counts (no full sort), and the external sorter that spills sorted runs to disk."""
from __future__ import annotations

import random
from collections import Counter

from pipelines.corpus.alias_table import vocab_cutoff, vocab_order_key, vocab_rows
from pipelines.corpus.candidates import RankedAliases, alias_rank, ranked_alias_rows
from pipelines.external_sort import ExternalSorter


def test_ranked_aliases_for_a_page():
    ranked = [(f"a{i}", 10 - i, 0.5, ("anchor",), f"a{i}") for i in range(10)]
    aliases = RankedAliases(ranked)
    assert aliases.for_page(3, set()) == tuple(ranked[:3])
    assert aliases.for_page(3, {"a9", "a7", "a1", "zzz"}) == tuple(ranked[:3]) + (ranked[7], ranked[9])
    order = sorted([("Paris", 5, ()), ("Paree", 0, ("redirect",)), ("PAR", 0, ()), ("Ville", 9, ())],
                   key=lambda a: alias_rank(a[0], "Paris (city)", a[1], a[2]))
    assert [a[0] for a in order] == ["Paris", "Ville", "Paree", "PAR"]


def test_ranked_alias_rows_are_the_per_row_filters_rank_and_packing():
    """The job checks, ranks and packs each alias once for all its entities: the same as each row alone."""
    from pipelines.corpus.labels import (
        LINKED,
        AliasCandidate,
        LabelConfig,
        is_curated_name,
        pack_alias,
        rejection_reason,
    )

    entities = ["Paris", "Paris (city)", "Paris (band)", "Paris Hilton", "Ville", "The"]
    sources = [("anchor",), ("redirect",), ("title",), ("anchor", "redirect"), ("anchor", "title")]
    aliases = ["Paris", " Paris ", "The", "the", "PA", "1990", "Ville", "Paris 2", "Paris's", "Ville Lumière"]
    configs = [LabelConfig.for_language("en"), LabelConfig(min_alias_count=2, trust_redirects=False, min_prior=0.3),
               LabelConfig(case_sensitive=False, stopwords="none", require_letter=False)]
    rng = random.Random(5)
    for config in configs:
        for alias in aliases:
            rows = [(alias, entity, rng.choice((0, 1, 2, 7)), rng.choice((0.0, 0.005, 0.2, 1.0)), rng.choice(sources))
                    for entity in rng.sample(entities, 4)]
            expected = []
            for _alias, entity, count, prior, row_sources in rows:
                candidate = AliasCandidate(alias, entity, count, prior, LINKED, row_sources)
                reason = rejection_reason(candidate, config)
                if reason is not None:
                    expected.append((entity, reason, None))
                    continue
                packed = pack_alias(alias.strip(), prior, is_curated_name(candidate, config), config)
                expected.append((entity, None, (alias_rank(packed[0], entity, count, row_sources), packed)))
            assert list(ranked_alias_rows(alias, rows, config)) == expected, (alias, config)


def test_vocab_cutoff_matches_a_full_sort():
    rng = random.Random(3)
    for trial in range(40):
        counts = {f"E{i:03d}": rng.choice((1, 1, 2, 3, 5, 8, 8, 13)) for i in range(rng.randint(0, 60))}
        size = rng.randint(1, 70)
        full = sorted(counts.items(), key=vocab_order_key)[:size]
        cutoff, ties = vocab_cutoff(dict(Counter(counts.values())), size)
        chosen = [kv for kv in counts.items() if kv[1] > cutoff or (kv[1] == cutoff and ties < 0)]
        tie_titles = sorted(e for e, c in counts.items() if c == cutoff)[: max(ties, 0)]
        chosen += [(e, cutoff) for e in tie_titles]
        assert vocab_rows(chosen) == vocab_rows(full), (trial, counts, size)


def test_vocab_rows_break_ties_by_title():
    counts = [("B", 5), ("A", 5), ("C", 9), ("D", 1), ("E", 5)]
    cutoff, ties = vocab_cutoff(dict(Counter(c for _e, c in counts)), 3)
    assert (cutoff, ties) == (5, 2)  # C, then the first 2 of A, B, E by title
    assert [r["entity"] for r in vocab_rows([("C", 9), ("B", 5), ("A", 5)])] == ["[PAD]", "[UNK]", "[MASK]", "C", "A", "B"]


def test_external_sorter_merges_spilled_runs(tmp_path):
    rng = random.Random(5)
    items = [(rng.randrange(1000), i) for i in range(1003)]
    with ExternalSorter(key=lambda x: x, buffer_items=50, tmp_dir=str(tmp_path)) as sorter:
        for item in items:
            sorter.add(item)
        assert sorter.spilled_runs == 20
        assert list(sorter.sorted()) == sorted(items)
    assert list(tmp_path.iterdir()) == []  # runs removed


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
