"""Passage text (schema version 2): each passage's ``text``, its ``char_offset`` and
mention offsets relative to it, on the real dump excerpts (ukwiki for Cyrillic,
whose letters GPT-2's byte-level BPE often splits between two tokens).

The rows come from the job's own ChunkWindowsFn run on every article of a dump
(links as hyperlink mentions); the expected values come from tiktoken's decoding
of the token ids and from the article text, not from the code under test.
"""
from __future__ import annotations

import pytest
import regex

from pipelines.corpus.tokenizer import GPT2_PATTERN, load_encoder, load_tokenizer, tokenize_with_mentions
from pipelines.records import LabeledArticle, Mention
from pipelines.transforms.passages import ChunkWindowsFn, PassageOptions
from tests.conftest import needs_shared

pytestmark = needs_shared

DUMPS = ("ukwiki-2023-first100k-lines-truncated.xml.xz", "enwiki-2016-206pages-articles1.xml.bz2",
         "enwiki-pear-1page-schema0.10.xml", "simplewiki-2019-7pages.xml.bz2",
         "enwiki-2019-196pages-namespaces.xml.bz2")
WINDOW, OVERLAP = 128, 10


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


def chunk_rows(name: str, passage_text: bool = True, limit: int | None = None):
    """(article text, rows of its passages) for the articles of a shared dump, through ChunkWindowsFn."""
    from tests.dump_articles import dump_articles

    fn = ChunkWindowsFn(PassageOptions("gpt2-bpe", WINDOW, OVERLAP, 0.0, "", passage_text=passage_text))
    fn.setup()
    out = []
    for page_id, (title, text, links) in enumerate(dump_articles(name)[:limit], start=1):
        mentions = [Mention(l.start, l.end, l.surface, l.target, "hyperlink") for l in links]
        article = LabeledArticle(page_id=page_id, title=title, text=text, mentions=mentions)
        out.append((text, [row for _split, _key, row in fn.process(article, {})]))
    # No mention whose tokens a window holds reaches past the window's text (README says 0).
    assert fn._tally.get("passage_mentions_dropped/outside_window_text", 0) == 0
    return out


@pytest.fixture(scope="module", params=DUMPS)
def dump_rows(request):
    return request.param, chunk_rows(request.param)


def test_text_is_the_decoded_tokens_and_the_article_slice(dump_rows, encoder):
    """text == the UTF-8 decoding of the token bytes (a character cut by the window edge left
    out) == the article's text from char_offset; consecutive windows leave no gap."""
    name, articles = dump_rows
    cut_edges = 0
    for article_text, rows in articles:
        for row in rows:
            token_bytes = encoder.encoding.decode_bytes(row["token_ids"])
            assert row["text"] == token_bytes.decode("utf-8", errors="ignore"), row["passage_id"]
            assert row["text"] == article_text[row["char_offset"]:row["char_offset"] + len(row["text"])]
            if row["text"].encode("utf-8") != token_bytes:
                cut_edges += 1
                # Only whole-character bytes are missing, at the edges: at most 3 bytes each side.
                assert 0 < len(token_bytes) - len(row["text"].encode("utf-8")) <= 6, row["passage_id"]
        assert rows[0]["char_offset"] == 0
        assert rows[-1]["char_offset"] + len(rows[-1]["text"]) == len(article_text)
        for a, b in zip(rows, rows[1:]):  # windows overlap: a character one leaves out, the next holds
            assert a["char_offset"] < b["char_offset"] <= a["char_offset"] + len(a["text"]), b["passage_id"]
    if name.startswith("ukwiki"):
        assert cut_edges > 1000, "the Cyrillic excerpt must exercise windows that cut a character"


def test_every_mention_is_its_surface_in_the_passage_text(dump_rows):
    name, articles = dump_rows
    mentions = 0
    for article_text, rows in articles:
        for row in rows:
            for m in row["mentions"]:
                assert row["text"][m["char_start"]:m["char_end"]] == m["surface"], (row["passage_id"], m)
                start = row["char_offset"] + m["char_start"]  # the article offset stays derivable
                assert article_text[start:start + len(m["surface"])] == m["surface"]
                mentions += 1
    assert mentions > (10 if "pear" in name or "simple" in name else 100)


def test_retokenising_the_text_gives_the_token_ids_between_whole_words(dump_rows, encoder):
    """encode(text) == token_ids when both edges of the window fall between GPT-2 pre-tokens
    (words, runs of spaces or punctuation); when an edge cuts a word, only that word's tokens
    can differ: the text of the whole pre-tokens in between re-tokenises to the same ids."""
    name, articles = dump_rows
    exact = at_word_edges = windows = interiors = 0
    for article_text, rows in articles:
        words = {0, len(article_text)} | {m.end() for m in regex.finditer(GPT2_PATTERN, article_text)}
        for row in rows:
            ids, text, offset = row["token_ids"], row["text"], row["char_offset"]
            windows += 1
            same = encoder.encoding.encode(text, disallowed_special=()) == ids
            exact += same
            whole = text.encode("utf-8") == encoder.encoding.decode_bytes(ids)
            if whole and offset in words and offset + len(text) in words:
                at_word_edges += 1
                assert same, row["passage_id"]
            # Interior: between the first and the last token boundary that is also a word boundary.
            token_bytes, text_bytes = encoder.encoding.decode_bytes(ids), text.encode("utf-8")
            skip = token_bytes.find(text_bytes)  # bytes of a character cut by the window's start
            assert 0 <= skip <= 3
            inner, pos = [], 0
            for k, tid in enumerate(ids):
                if k and 0 <= pos - skip <= len(text_bytes):
                    try:
                        chars = len(text_bytes[:pos - skip].decode("utf-8"))
                    except UnicodeDecodeError:
                        chars = None  # inside a character
                    if chars is not None and offset + chars in words:
                        inner.append((k, chars))
                pos += len(encoder.encoding.decode_single_token_bytes(tid))
            if len(inner) >= 2:
                (k0, c0), (k1, c1) = inner[0], inner[-1]
                assert encoder.encoding.encode(text[c0:c1], disallowed_special=()) == ids[k0:k1], row["passage_id"]
                interiors += 1
    assert at_word_edges > 0 and exact >= at_word_edges and interiors > windows // 2
    print(f"{name}: {exact}/{windows} windows re-tokenise exactly, {at_word_edges} have both edges between words")


def test_offsets_are_the_same_without_the_text_column():
    name = "ukwiki-2023-first100k-lines-truncated.xml.xz"
    with_text = chunk_rows(name, limit=40)
    without = chunk_rows(name, passage_text=False, limit=40)
    for (_t, rows), (_t2, bare) in zip(with_text, without):
        assert all("text" not in r for r in bare)
        assert [{k: v for k, v in r.items() if k != "text"} for r in rows] == bare


def test_a_hugging_face_byte_level_tokenizer_cuts_the_same_text(encoder):
    """The GPT-2 BPE loaded as a Hugging Face tokenizer (as from a directory) gives the exact
    byte-level window text too: the same bounds as tiktoken's, on the Cyrillic excerpt."""
    from tests.dump_articles import dump_articles

    tok = load_tokenizer()
    for _title, text, _links in dump_articles("ukwiki-2023-first100k-lines-truncated.xml.xz")[:30]:
        hf = tokenize_with_mentions(text, [], tok, with_bounds=True).bounds
        tt = tokenize_with_mentions(text, [], encoder, with_bounds=True).bounds
        assert (hf.first_char == tt.first_char).all() and (hf.end_char == tt.end_char).all()


def visible(text: str) -> str:
    return "".join(ch for ch in text if ch.isprintable() and not ch.isspace())


def test_another_tokenizer_cuts_the_text_from_its_offsets():
    """A tokenizer that is not byte-level (a WordPiece that lowercases, trained here on the
    excerpt) cuts the window text from its offsets: mentions still index it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from pipelines.corpus.windows import cut_windows
    from tests.dump_articles import dump_articles

    articles = dump_articles("simplewiki-2019-7pages.xml.bz2") + dump_articles("ukwiki-2023-first100k-lines-truncated.xml.xz")[:20]
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator((text for _t, text, _l in articles),
                                trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[UNK]"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    checked = 0
    for _title, text, links in articles:
        mentions = [Mention(l.start, l.end, l.surface, l.target, "hyperlink") for l in links]
        tokenized = tokenize_with_mentions(text, mentions, tok, with_bounds=True)
        previous_end = 0
        for w in cut_windows(tokenized.token_ids, tokenized.spans, window=WINDOW, overlap=OVERLAP):
            start, end = tokenized.bounds.span(w.token_start, w.token_start + len(w.token_ids))
            assert start <= previous_end  # overlapping windows: no gap
            previous_end = end
            window_text = text[start:end]
            decoded = tok.decode(w.token_ids)
            if "[UNK]" not in decoded:  # the same text, less what the normaliser removes
                assert visible(decoded.replace("##", "")) == visible(window_text.lower())
            for span in w.mentions:
                m = span.mention
                if start <= m.start and m.end <= end:  # else left out of the window, and counted
                    assert window_text[m.start - start:m.end - start] == m.surface
                    checked += 1
    assert checked > 1000


def test_a_character_split_between_tokens_is_left_out_at_the_edge(encoder):
    """A CJK character is 3 bytes, often 2 tokens: a boundary inside it belongs to neither side."""
    text = "東京 is 東京"
    tokenized = tokenize_with_mentions(text, [], encoder, with_bounds=True)
    bounds = tokenized.bounds
    ids = tokenized.token_ids
    inside = [k for k in range(1, len(ids)) if bounds.splits_a_character(k)]
    assert inside, [encoder.encoding.decode_single_token_bytes(i) for i in ids]
    for k in inside:
        left, right = bounds.span(0, k), bounds.span(k, len(ids))
        assert left[1] < right[0]  # the split character is in neither
        assert text[left[0]:left[1]] == encoder.encoding.decode_bytes(ids[:k]).decode("utf-8", "ignore")
        assert text[right[0]:right[1]] == encoder.encoding.decode_bytes(ids[k:]).decode("utf-8", "ignore")


@pytest.mark.parametrize("text", ["東京 is 東京", "plain ascii text, no surprises", "😀x😀 Ж  ab\u00a0c 東京東京"])
def test_byte_spans_are_the_utf8_bytes_of_the_spans(encoder, text):
    """TokenBounds.byte_spans (how the text column is cut) gives the bytes of TokenBounds.span, for every
    token range: also where a boundary falls inside a character."""
    import numpy as np

    tokenized = tokenize_with_mentions(text, [], encoder, with_bounds=True)
    bounds = tokenized.bounds
    n = len(tokenized.token_ids)
    pairs = [(s, e) for s in range(n + 1) for e in range(s, n + 1)]
    start, end = bounds.byte_spans(np.array([s for s, _ in pairs]), np.array([e for _, e in pairs]))
    utf8 = text.encode("utf-8")
    for (s, e), a, b in zip(pairs, start.tolist(), end.tolist()):
        first, last = bounds.span(s, e)
        assert utf8[a:b] == text[first:last].encode("utf-8")
