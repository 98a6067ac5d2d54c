"""The tiktoken GPT-2 encoder gives the Hugging Face tokenizer's ids and offsets, exactly.

The reference is the Hugging Face tokenizer the job used before (and still
saves to OUT/tokenizer): ``build_gpt2_bpe_tokenizer``, encoded through
``_hf_encode_with_offsets``. Compared: every article of every shared dump
(ukwiki for Cyrillic, and the enwiki excerpts' many scripts), every Unicode
code point in several contexts, the vocabulary's own risky pieces, edge cases
and random text; and the mentions mapped onto tokens, against a copy of the
old mapping code.
"""
from __future__ import annotations

import bisect
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.corpus import tokenizer as T
from pipelines.corpus.tokenizer import (
    Gpt2BpeEncoder,
    HfEncoder,
    encode_with_offsets,
    gpt2_bpe_files,
    load_encoder,
    load_tokenizer,
    save_tokenizer,
    tokenize_with_mentions,
)
from pipelines.records import Mention
from tests.conftest import HAVE_WIKIDUMPS


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


@pytest.fixture(scope="module")
def hf():
    return load_tokenizer()


def reference(text, hf):
    return T._hf_encode_with_offsets(text, hf)


def assert_identical(encoder, hf, text):
    got, want = encoder.encode_with_offsets(text), reference(text, hf)
    if got != want:  # name the first difference, not two 100k-element lists
        ids, offsets = got
        k = next((i for i, pair in enumerate(zip(ids, offsets, *want)) if pair[:2] != pair[2:]), min(len(ids), len(want[0])))
        raise AssertionError(f"first difference at token {k}: {got[0][k:k + 3]} {got[1][k:k + 3]} != "
                             f"{want[0][k:k + 3]} {want[1][k:k + 3]} near {text[max(0, (offsets[k:] or [(0, 0)])[0][0] - 20):][:60]!r}")


# --------------------------------------------------------------------------- the encoder object


def test_default_encoder_is_tiktoken_cached_and_named_ones_use_hugging_face(encoder, tmp_path):
    assert isinstance(encoder, Gpt2BpeEncoder)
    assert load_encoder(None) is encoder and load_encoder("gpt2-bpe") is encoder and load_encoder("") is encoder
    save_tokenizer(load_tokenizer(), str(tmp_path / "tok"))
    named = load_encoder(str(tmp_path / "tok"))
    assert isinstance(named, HfEncoder) and load_encoder(str(tmp_path / "tok")) is named
    text = "Київ, 北京 and Paris's (café) 😀 <s>"
    assert named.encode_with_offsets(text) == encoder.encode_with_offsets(text)
    # The tiktoken Encoding knows the same specials (tokenised as plain text, never as these ids).
    assert encoder.encoding.n_vocab == T.GPT2_VOCAB_SIZE + 4
    assert [encoder.encoding.encode_single_token(t) for t in ("<|endoftext|>", *T.APPENDED_SPECIAL_TOKENS)] == list(
        range(50256, 50261))


def test_ranks_must_follow_the_merge_order(tmp_path):
    vocab, merges = gpt2_bpe_files()
    lines = open(merges, encoding="utf-8").read().split("\n")
    lines[1], lines[2] = lines[2], lines[1]  # two merges swapped: the ids no longer follow the merge order
    swapped = tmp_path / "vocab.bpe"
    swapped.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(RuntimeError, match="merge order"):
        T.gpt2_mergeable_ranks(vocab, str(swapped))
    assert len(T.gpt2_mergeable_ranks(vocab, merges)) == T.GPT2_VOCAB_SIZE - 1  # all but <|endoftext|>


def test_saved_tokenizer_is_the_hugging_face_one_and_agrees(encoder, tmp_path):
    """OUT/tokenizer stays HF files (the trainer and users load them with transformers)."""
    from trainer.data import load_tokenizer as trainer_load_tokenizer

    written = save_tokenizer(load_tokenizer(), str(tmp_path / "tokenizer"))
    assert any(p.endswith("tokenizer.json") for p in written)
    assert json.loads((tmp_path / "tokenizer" / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    trained, _ids = trainer_load_tokenizer(tmp_path / "tokenizer")
    text = "Zürich, Київ — столиця; 北京 😀👍🏽 e\u0301 1990s <mask>"
    ids, _offsets = encoder.encode_with_offsets(text)
    assert trained(text, add_special_tokens=False, split_special_tokens=True)["input_ids"] == ids
    assert trained.decode(ids) == text


# --------------------------------------------------------------------------- every shared dump


@pytest.mark.needs_shared
def test_identical_tokens_offsets_and_mention_spans_on_every_shared_dump(encoder, hf):
    """Every article: ids and offsets equal; its links (and spans shifted off them, so that drops,
    boundaries inside a token, are compared too) map to the same token spans as with the old code."""
    if not HAVE_WIKIDUMPS:
        pytest.skip("no shared dumps")
    from tests.dump_articles import ALL_DUMPS, dump_articles

    seen, tokens, checked, dropped, scripts = set(), 0, 0, 0, set()
    for name in ALL_DUMPS:
        articles = dump_articles(name)
        assert articles, name
        for _title, text, links in articles:
            if text in seen:  # two dumps may hold the same article
                continue
            seen.add(text)
            ids, offsets = encoder.encode_with_offsets(text)
            want_ids, want_offsets = reference(text, hf)
            if (ids, offsets) != (want_ids, want_offsets):
                assert_identical(encoder, hf, text)  # names the first difference
            mentions = [Mention(link.start, link.end, link.surface, link.target, "hyperlink") for link in links]
            mentions += [Mention(m.start + 1, m.end, "", "X", "hyperlink") for m in mentions[::3]]
            mentions += [Mention(max(0, m.start - 1), m.end + 2, "", "X", "hyperlink") for m in mentions[1::5]]
            new = tokenize_with_mentions(text, mentions, encoder)
            old = old_tokenize_with_mentions(text, mentions, want_ids, want_offsets)
            assert (new.token_ids, new.spans, new.dropped_mentions) == (old.token_ids, old.spans, old.dropped_mentions)
            tokens += len(ids)
            checked += len(mentions)
            dropped += new.dropped
            scripts.update(ch for ch in ("ї", "é", "北", "😀") if ch in text)
    assert tokens > 5_000_000 and {"ї", "é"} <= scripts
    assert checked > 50_000 and 0 < dropped < checked


def old_tokenize_with_mentions(text, mentions, ids, offsets):
    """A copy of ``tokenize_with_mentions`` and ``token_span`` before the change (bisect per mention)."""
    starts = [s for s, _ in offsets]
    ends, best = [], 0
    for _s, e in offsets:
        best = e if e > best else best
        ends.append(best)
    spans, dropped = [], []
    for m in sorted(mentions, key=lambda m: (m.start, m.end)):
        span = _old_token_span(text, starts, ends, offsets, m.start, m.end)
        if span is None:
            dropped.append(m)
        else:
            spans.append(T.TokenMention(span[0], span[1], m))
    return T.TokenizedArticle(token_ids=ids, spans=spans, dropped=len(dropped), dropped_mentions=dropped)


def _old_token_span(text, starts, ends, offsets, char_start, char_end):
    if not 0 <= char_start < char_end <= len(text):
        return None
    first = bisect.bisect_right(ends, char_start)
    last = bisect.bisect_left(starts, char_end) - 1
    while first <= last and offsets[first][0] >= offsets[first][1]:
        first += 1
    while last >= first and offsets[last][0] >= offsets[last][1]:
        last -= 1
    if first > last:
        return None
    head_start, tail_end = offsets[first][0], offsets[last][1]
    if head_start < char_start and not text[head_start:char_start].isspace():
        return None
    if tail_end > char_end and not text[char_end:tail_end].isspace():
        return None
    return first, last + 1


# --------------------------------------------------------------------------- all of Unicode, the vocabulary


def test_identical_on_every_code_point_in_context(encoder, hf):
    """Each code point as a word, inside words, after digits and spaces, doubled, next to an apostrophe.

    Catches any difference between the two regex engines' ``\\p{L}``, ``\\p{N}``
    and ``\\s`` (Unicode versions), and in byte -> character offsets.
    """
    # Planes 0-3 and 14 hold every assigned code point; the unassigned planes 4-13 and the
    # private-use planes 15-16 are sampled (a one-off run over all of them found no difference).
    planes = [*range(0, 0x40000), *range(0xE0000, 0xF0000)]
    points = [cp for cp in planes if not 0xD800 <= cp <= 0xDFFF] + list(range(0x40000, 0x110000, 97))
    for i in range(0, len(points), 4000):
        text = "".join(f"x{c}y {c}  9{c}'{c}{c}\n" for c in map(chr, points[i : i + 4000]))
        assert_identical(encoder, hf, text)


def test_identical_on_every_code_point_without_space_runs(encoder, hf):
    """The same on the lookahead-free pattern's path: texts with no two whitespace characters before another
    (the BMP, and a sample of the other planes: both patterns' classes are the same regex engine's)."""
    planes = [*range(0, 0x10000), *range(0x10000, 0x110000, 37)]
    points = [cp for cp in planes if not 0xD800 <= cp <= 0xDFFF and chr(cp) not in T.WHITE_SPACE]
    for i in range(0, len(points), 4000):
        text = "".join(f"x{c}y {c} 9{c}'{c}{c}\n" for c in map(chr, points[i : i + 4000]))
        assert not encoder._has_space_run_before_text(text, text.isascii())
        assert_identical(encoder, hf, text)


def test_white_space_is_what_the_pattern_calls_whitespace(encoder):
    """WHITE_SPACE is exactly ``\\s`` of tiktoken's regex: after a character the pattern takes for whitespace,
    " b" is split as a run of two spaces before text (the lookahead-free pattern splits it otherwise)."""
    import tiktoken

    lookahead_free = tiktoken.Encoding("probe", pat_str=T.GPT2_PATTERN_NO_LOOKAHEAD,
                                         mergeable_ranks=encoder.encoding._mergeable_ranks,
                                         special_tokens=encoder.encoding._special_tokens)
    points = [cp for cp in range(0x10000) if not 0xD800 <= cp <= 0xDFFF] + list(range(0x10000, 0x110000, 89))
    space = {chr(cp) for cp in points
             if encoder.encoding.encode(f"a{chr(cp)} b") != lookahead_free.encode(f"a{chr(cp)} b")}
    assert space == set(T.WHITE_SPACE)


@pytest.mark.parametrize("text", ["a  b", "a \tb", "a\n\nb", "a\u00a0 b", "a \u3000b", "x\u2028\u2029y", "  a",
                                  "a  ", "a \n", "end.\n\nNext", "a\u205f\u205f\u205f.", "😀  😀", "a b c\nd"])
def test_space_runs_before_text_take_the_lookahead_path(encoder, text):
    run = any(text[i] in T.WHITE_SPACE and text[i + 1] in T.WHITE_SPACE and text[i + 2] not in T.WHITE_SPACE
              for i in range(len(text) - 2))
    assert encoder._has_space_run_before_text(text, text.isascii()) == run
    assert _run_in_tokens(encoder, text) == run
    assert encoder.encode_ids(text).tolist() == encoder.encoding.encode(text, disallowed_special=())


def _run_in_tokens(encoder, text):
    import numpy as np

    ids = encoder._no_lookahead.encode_to_numpy(text, disallowed_special=()).astype(np.intp)
    return encoder._space_run_before_text_in_tokens(text, ids, text.isascii())


@settings(max_examples=1000, deadline=None)
@given(text=st.lists(st.sampled_from(["a", "Ж", "9", ".", "'s", "😀", "\u2013", "\u00a9", "\u3042", "\u2000x",
                                      "\u3001", *T.WHITE_SPACE]), max_size=60).map("".join))
def test_space_runs_found_in_the_tokens_are_those_in_the_characters(encoder, text):
    """The check on the lookahead-free tokens finds the runs the check on the characters finds, among
    characters whose UTF-8 bytes whitespace shares (en dash, ©, CJK: E2 80, C2, E3 80)."""
    assert _run_in_tokens(encoder, text) == encoder._has_space_run_before_text(text, text.isascii())


@settings(max_examples=500, deadline=None)
@given(text=st.lists(st.sampled_from(["a", "Ж", "9", ".", "'s", "😀", *T.WHITE_SPACE]), max_size=40).map("".join))
def test_lookahead_free_path_gives_the_same_ids(encoder, text):
    assert encoder.encode_ids(text).tolist() == encoder.encoding.encode(text, disallowed_special=())


def test_identical_on_the_vocabularys_ambiguous_pieces(encoder, hf):
    """Tokens that are also the concatenation of two other tokens in an order vocab.bpe never merges.

    tiktoken merges any adjacent pair whose concatenation is a token, the
    Hugging Face BPE only listed merges; these pieces (and neighbours that
    could merge first) are where the two could part.
    """
    to_byte = {ch: b for b, ch in T._bytes_to_unicode().items()}
    encoder_json = json.load(open(gpt2_bpe_files()[0], encoding="utf-8"))
    merges = set(tuple(line.split()) for line in open(gpt2_bpe_files()[1], encoding="utf-8").read().split("\n")[1:] if line)
    pieces = set()
    for token in encoder_json:
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            if left in encoder_json and right in encoder_json and (left, right) not in merges:
                text = bytes(to_byte[ch] for ch in token).decode("utf-8", "replace")
                pieces.update((text, "a" + text, text + "s", " " + text))
    assert len(pieces) > 100_000
    ordered = sorted(pieces)
    for i in range(0, len(ordered), 5000):
        assert_identical(encoder, hf, "\n".join(ordered[i : i + 5000]))


# --------------------------------------------------------------------------- edge cases and random text


EDGE_CASES = [
    "", " ", "   ", " Paris", "  Paris", "Paris ", "Paris   ", "a  b", "a" + " " * 100 + "b", " " * 1000,
    "\t\t x", "line\r\nbreak\r\n\r\n  indented\n", "\r", "\n\n\n", "a\u00a0b\u00a0\u00a0c", "\u3000全角\u3000",
    "\u2000\u2001\u2002\u2009\u200a\u202f\u205f x", "\u0085next\u2028line\u2029para", "zero\u200bwidth\ufeffbom",
    "\u180emongolian", "ctrl\x00\x01\x1f\x7f", "😀", "😀 😀😀", "👍🏽", "👨‍👩‍👧‍👦 family", "🇺🇦 flag", "e\u0301 cafe\u0301",
    "a\u0301\u0302\u0303\u0304", "\u0301 leading mark", "Київ — столиця України", "北京是中国的首都。", "東京タワー",
    "กรุงเทพมหานคร", "서울에서", "العربية", "עִבְרִית", "हिन्दी", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "𠜎𠜱𠝹",
    "it's don't we're I've I'm you'll he'd 'S 'T", "''s", "1990s 3.14 1,000,000 ½ ² Ⅻ ٣",
    "<s> </s> <pad> <mask> <|endoftext|> <|endoftext|>x", " <mask>", "$3.5 billion (2019)...!!!",
    "a\ud800b", "\udfff", "x\ud83d\ude00 y", "\ud83d", "😀\ud800😀",
]


@pytest.mark.parametrize("text", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_identical_on_edge_cases(encoder, hf, text):
    assert_identical(encoder, hf, text)
    # Surrogates are tokenised as U+FFFD, one character for one: offsets still index the text.
    ids, offsets = encoder.encode_with_offsets(text)
    assert all(0 <= s <= e <= len(text) for s, e in offsets)
    assert encode_with_offsets(text, encoder) == (ids, offsets)


def test_text_with_lone_surrogates_is_tokenised_not_an_error(encoder, hf):
    text = "Smile \ud83d\ude00 and \ud800 here"
    ids, offsets = encoder.encode_with_offsets(text)
    clean = text.replace("\ud83d", "\ufffd").replace("\ude00", "\ufffd").replace("\ud800", "\ufffd")
    assert (ids, offsets) == encoder.encode_with_offsets(clean) == reference(clean, hf)
    here = text.index("here")
    out = tokenize_with_mentions(text, [Mention(here, here + 4, "here", "X", "hyperlink")], encoder)
    assert out.dropped == 0 and hf.decode(out.token_ids[out.spans[0].token_start : out.spans[0].token_end]).strip() == "here"


_ALPHABET = st.sampled_from(
    list("abcXYZ019 ,.()'-_\n\r\t") + ["'s", "'ll", "é", "ü", "Ж", "ї", "北", "京", "タ", "ก", "\u0e31", "한",
                                       "😀", "🏽", "\u200d", "\u0301", "\u00a0", "\u3000", "’", "  ", "     ",
                                       "<s>", "<mask>", "\ud800", "𝟙", "½"]
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_ALPHABET, max_size=80).map("".join))
def test_identical_on_random_text(encoder, hf, text):
    assert_identical(encoder, hf, text)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60))
def test_identical_on_arbitrary_unicode(encoder, hf, text):
    assert_identical(encoder, hf, text)
