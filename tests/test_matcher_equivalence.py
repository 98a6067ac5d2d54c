"""The Aho-Corasick label matcher finds exactly what the token-scan matcher it replaced found.

``_reference_occurrences`` below is a verbatim copy of the matcher before the
change (the first-token index scanned with a regex, its word rules and the
folding). Both run on the same targets (``targets_for_candidates`` is shared: only
the matching changed; the folding it uses is compared on every input), and ``label_missing_mentions`` is compared
with the reference pipeline end to end: on every article of every shared dump
with realistic candidates (the aliases its hyperlinks use across all dumps),
under several configs, and on random text full of edge cases (combining
marks, joiners, unspaced scripts, no-break spaces, case-changing letters).
"""
from __future__ import annotations

import dataclasses
import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.corpus import labels as L
from pipelines.corpus.labels import AliasCandidate, LabelConfig, label_missing_mentions
from pipelines.records import Mention
from tests.conftest import HAVE_WIKIDUMPS

# --------------------------------------------------------------------------- the matcher before (copy)

_U = L._UNSPACED_RANGES
_REF_TOKENS_SPLITTING_UNSPACED = re.compile(rf"[^\W{_U}]+|[{_U}]|[^\w\s]")
_REF_TOKENS_WHOLE_WORDS = re.compile(r"\w+|[^\w\s]")
_REF_UNSPACED_CHAR = re.compile(rf"[{_U}]")
_REF_JOINERS = frozenset("\u200c\u200d")


_REF_SPACE_TO_BLANK = {cp: " " for cp in range(0x3000 + 1) if chr(cp).isspace() and cp != 0x20}


def _ref_fold(s, case_sensitive):
    s = s.translate(_REF_SPACE_TO_BLANK)
    if case_sensitive:
        return s
    lowered = s.lower()
    if len(lowered) == len(s):
        return lowered
    return "".join(low if len(low) == 1 else ch for ch, low in zip(s, map(str.lower, s)))


def _ref_is_word_char(ch):
    return ch.isalnum() or ch in _REF_JOINERS or unicodedata.category(ch) in ("Pc", "Mn", "Mc", "Me")


def _ref_joins(left, right, split_unspaced):
    if not (_ref_is_word_char(left) and _ref_is_word_char(right)):
        return False
    if unicodedata.category(right).startswith("M"):
        return True
    if split_unspaced and (_REF_UNSPACED_CHAR.match(left) or _REF_UNSPACED_CHAR.match(right)):
        return False
    return True


def _ref_first_token_index(targets, token_re):
    index = {}
    for alias, target in targets.items():
        first = token_re.match(alias)
        if first is None:
            continue
        index.setdefault(first.group(), []).append((alias, target))
    for bucket in index.values():
        bucket.sort(key=lambda item: -len(item[0]))
    return index


def _reference_occurrences(folded, targets, split_unspaced):
    token_re = _REF_TOKENS_SPLITTING_UNSPACED if split_unspaced else _REF_TOKENS_WHOLE_WORDS
    index = _ref_first_token_index(targets, token_re)
    found = []
    n = len(folded)
    for tok in token_re.finditer(folded):
        bucket = index.get(tok.group())
        if bucket is None:
            continue
        start = tok.start()
        if start and _ref_joins(folded[start - 1], folded[start], split_unspaced):
            continue
        for alias, target in bucket:
            end = start + len(alias)
            if folded.startswith(alias, start) and (end == n or not _ref_joins(alias[-1], folded[end], split_unspaced)):
                found.append((start, end, target))
    return found


def reference_labels(text, hyperlinks, candidates, config):
    """``label_missing_mentions`` as it was, around the reference matcher."""
    if not text or not candidates:
        return []
    targets = L.targets_for_candidates(candidates, config)
    if not targets:
        return []
    folded = _ref_fold(text, config.case_sensitive)
    occurrences = _reference_occurrences(folded, targets, config.match_unspaced_scripts)
    occupied = bytearray(len(text))
    for link in hyperlinks:
        start, end = max(0, link.start), min(len(text), link.end)
        if start < end:
            occupied[start:end] = b"\x01" * (end - start)
    labels = []
    for start, end, target in sorted(occurrences, key=lambda o: (o[0] - o[1], o[0])):
        if occupied.find(1, start, end) != -1:
            continue
        occupied[start:end] = b"\x01" * (end - start)
        labels.append(Mention(start, end, text[start:end], target.entity, target.source))
    labels.sort(key=lambda m: m.start)
    return labels


def assert_same(text, links, cands, config):
    for case_sensitive in (True, False):  # the folding (the alias side is folded in _resolve_targets)
        assert L._fold(text, case_sensitive) == _ref_fold(text, case_sensitive)
        assert all(L._fold(c.alias, case_sensitive) == _ref_fold(c.alias, case_sensitive) for c in cands)
    new = label_missing_mentions(text, links, cands, config)
    old = reference_labels(text, links, cands, config)
    assert new == old
    targets = L.targets_for_candidates(cands, config)
    if targets:  # and the raw occurrence sets, before the greedy pass
        folded = L._fold(text, config.case_sensitive)
        split = config.match_unspaced_scripts
        keys = L._find_occurrences(folded, L._alias_automaton(targets), split)
        got = [(start, end, targets[folded[start:end]]) for variant, start, end in
               (L._occurrence(key, len(folded)) for key in keys) if not variant]
        assert len(got) == len(keys)
        assert sorted(got, key=_key) == sorted(_reference_occurrences(folded, targets, split), key=_key)
    return new


def _key(occurrence):
    start, end, target = occurrence
    return start, end, target.entity


# The reference is the matcher, not the rules: the page-level rules added since (the 'page'
# ambiguity policy, same_page_number, the variant rules) read the page's links, so they are pinned
# off here and tested in test_labels.py, test_labels_variants.py and test_labels_real_dumps.py.
_NO_VARIANTS = {"label_case_variants": False, "label_plural_variants": False, "label_possessive_variants": False}
_MATCHER_ONLY = {"ambiguity": "prior", "label_numbers": False, **_NO_VARIANTS}
CONFIGS = {
    "default": LabelConfig(**_MATCHER_ONLY),
    "case_insensitive_spaced_only": LabelConfig(case_sensitive=False, match_unspaced_scripts=False, **_MATCHER_ONLY),
    # Every alias usable, down to one character: the most hits and overlaps.
    "everything": LabelConfig(min_alias_chars=1, stopwords="none", require_letter=False, min_prior=0.0,
                              case_sensitive=False, ambiguity="skip", label_numbers=False, **_NO_VARIANTS),
}

# --------------------------------------------------------------------------- every shared dump


@pytest.fixture(scope="module")
def dump_pages():
    if not HAVE_WIKIDUMPS:
        pytest.skip("no shared dumps")
    from tests.dump_articles import ALL_DUMPS, labelling_inputs

    return labelling_inputs(ALL_DUMPS)


@pytest.mark.needs_shared
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_same_labels_on_every_shared_dump(dump_pages, config_name):
    config = CONFIGS[config_name]
    labelled = 0
    for _title, text, links, cands in dump_pages:
        labelled += len(assert_same(text, links, cands, config))
    assert len(dump_pages) > 600 and labelled > 1000  # the dumps were read and labels were found


# --------------------------------------------------------------------------- edge cases and random text

_PIECES = [
    "Paris", "paris", "PARIS", "New", "York", "City", "Київ", "Київщина", "İstanbul", "ß", "Σ", "ς",
    "北京", "東京", "タワー", "กรุงเทพ", "서울", "에서", "e\u0301", "\u0301", "\u0e31", "\u200d", "\u200c",
    "_", "1990", "2", "'s", "-", "(", ")", ",", ".", " ", " ", "  ", "\u00a0", "\u3000", "\n", "\t", "😀", "🏽",
]
_edge_text = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=50).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_edge_text, data=st.data())
def test_same_labels_on_random_edge_case_text(text, data):
    n = len(text)
    # Aliases cut from the text itself (so they occur, often at odd places), plus a few pieces.
    cut = st.tuples(st.integers(0, n - 1), st.integers(1, 12)).map(lambda p: text[p[0] : p[0] + p[1]])
    aliases = data.draw(st.lists(st.one_of(cut, st.sampled_from(_PIECES)), min_size=1, max_size=12))
    cands = [AliasCandidate(a, f"E{i % 4}", 5, 0.5, data.draw(st.sampled_from(["linked", "title"])))
             for i, a in enumerate(aliases)]
    links = []
    for _ in range(data.draw(st.integers(0, 2))):
        start = data.draw(st.integers(0, n - 1))
        links.append(Mention(start, data.draw(st.integers(start + 1, n)), "", "L", "hyperlink"))
    for config in CONFIGS.values():
        assert_same(text, links, cands, dataclasses.replace(config, min_alias_chars=1, require_letter=False))


@pytest.mark.parametrize(
    "text,aliases",
    [
        ("Parisian Paris (Paris) Paris's Paris-based Paris_x Paris2 xParis", ["Paris"]),
        ("He lived in New York City, not in New York state.", ["New York City", "New York", "York"]),
        ("cafe\u0301 cafe café", ["cafe", "café"]),
        ("東京タワーと東京", ["東京", "東京タワー", "タワー"]),
        ("กรุงเทพมหานคร", ["กรุงเทพ", "มหานคร"]),
        ("서울에서 서울", ["서울"]),
        ("a\u00a0b a b a  b", ["a b", "a  b"]),
        ("İstanbul istanbul ISTANBUL", ["istanbul", "İstanbul"]),
        ("😀Paris😀 🏽Paris", ["Paris", "😀Paris"]),
        ("aaaa aaa aa", ["aa", "aaa", "aaaa"]),
        ("a\u200db a b", ["a", "b"]),
        ("x\ud800y x y", ["x", "y"]),  # a lone surrogate (an unpaired &#55357; entity in the wikitext)
    ],
)
def test_same_labels_on_edge_cases(text, aliases):
    cands = [AliasCandidate(a, f"E{i}", 5, 0.5, "linked") for i, a in enumerate(aliases)]
    for config in CONFIGS.values():
        assert_same(text, [], cands, dataclasses.replace(config, min_alias_chars=1, stopwords="none"))
