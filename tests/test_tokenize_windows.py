"""Tokenisation with mentions, and cutting into overlapping windows."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.corpus.tokenizer import (
    GPT2_VOCAB_SIZE,
    TokenMention,
    gpt2_bpe_files,
    load_encoder,
    load_tokenizer,
    save_tokenizer,
    tokenize_with_mentions,
)
from pipelines.corpus.windows import Window, cut_windows, window_starts
from pipelines.records import Mention


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module", params=["tiktoken", "hugging_face"])
def coder(request, tok):
    """What tokenises: the job's encoder (tiktoken) and the Hugging Face tokenizer; both must pass."""
    return load_encoder() if request.param == "tiktoken" else tok


def mention(text: str, surface: str, occurrence: int = 0) -> Mention:
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(surface, start + 1)
    return Mention(start, start + len(surface), surface, surface.strip(), "hyperlink")


def decoded(tok, ids) -> str:
    return tok.decode(ids, clean_up_tokenization_spaces=False)


# --------------------------------------------------------------------------- the tokenizer


def test_default_tokenizer_is_gpt2_with_appended_specials(tok):
    with open(gpt2_bpe_files()[0], encoding="utf-8") as fh:
        encoder = json.load(fh)
    assert len(encoder) == GPT2_VOCAB_SIZE
    assert len(tok) == GPT2_VOCAB_SIZE + 4
    assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id] == [50257, 50258, 50259, 50260]
    assert tok.unk_token == "<|endoftext|>" and tok.unk_token_id == 50256
    # GPT-2 ids unchanged: "Hello world" is [15496, 995] in GPT-2.
    assert tok("Hello world", add_special_tokens=False)["input_ids"] == [15496, 995]
    assert all(tok.convert_tokens_to_ids(t) == i for t, i in list(encoder.items())[:500])
    assert load_tokenizer("gpt2-bpe") is tok and load_tokenizer(None) is tok  # cached


def test_save_and_reload_round_trip(tok, tmp_path):
    written = save_tokenizer(tok, str(tmp_path / "tok"))
    assert any(p.endswith("tokenizer.json") for p in written)
    again = load_tokenizer(str(tmp_path / "tok"))
    text = "Київ, 北京 and Paris's (café) 😀 <s>"
    assert again("x " + text)["input_ids"] == tok("x " + text)["input_ids"]
    assert again.mask_token_id == tok.mask_token_id and again.pad_token_id == tok.pad_token_id


def test_save_to_a_remote_url_goes_through_beam_filesystems(tok, monkeypatch):
    import io

    from apache_beam.io.filesystems import FileSystems

    written: dict[str, bytes] = {}

    class Sink(io.BytesIO):
        def __init__(self, path):
            super().__init__()
            self.path = path

        def close(self):
            written[self.path] = self.getvalue()
            super().close()

    monkeypatch.setattr(FileSystems, "create", staticmethod(lambda path, *a, **k: Sink(path)))
    paths = save_tokenizer(tok, "gs://bucket/run/tokenizer/")
    assert "gs://bucket/run/tokenizer/tokenizer.json" in paths
    assert sorted(written) == sorted(paths)
    assert json.loads(written["gs://bucket/run/tokenizer/tokenizer.json"])["model"]["type"] == "BPE"


def test_unknown_tokenizer_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot load tokenizer"):
        load_tokenizer(str(tmp_path / "missing"))


def test_a_tokenizer_that_cannot_load_is_named_before_the_job_starts(tmp_path, monkeypatch):
    """tokenizer_source_problem: what the corpus command checks in milliseconds (the job used to start, write its
    output folder and fail in a worker)."""
    from wikiedm.tokenizer import tokenizer_source_problem

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty local cache
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    saved = tmp_path / "saved"
    load_tokenizer().save_pretrained(str(saved))
    assert tokenizer_source_problem("gpt2-bpe") is None and tokenizer_source_problem(None) is None
    assert tokenizer_source_problem(str(saved)) is None
    assert tokenizer_source_problem("gs://bucket/tokenizer") is None  # read at run time
    assert tokenizer_source_problem(str(tmp_path / "missing")).endswith("no such directory")
    assert "holds no tokenizer file" in tokenizer_source_problem(str(tmp_path / "empty"))
    assert "is a file" in tokenizer_source_problem(str(tmp_path / "a_file"))
    assert "no tokenizer of that hub name in the local Hugging Face cache" in tokenizer_source_problem("org/name")
    from pipelines.config import corpus_parser
    from wikiedm.config import ConfigError

    with pytest.raises(ConfigError, match="--tokenizer .*missing: no such directory"):
        corpus_parser().check(["--input", str(tmp_path / "a_file"), "--output", str(tmp_path / "out"),
                               "--tokenizer", str(tmp_path / "missing")])


def test_literal_special_token_strings_stay_text(tok, coder):
    text = "Use <s> for strike-through, not <mask> or </s> or <pad>."
    out = tokenize_with_mentions(text, [], coder)
    assert not set(out.token_ids) & {50256, 50257, 50258, 50259, 50260}
    assert decoded(tok, out.token_ids) == text


def test_fast_and_generic_encoding_paths_agree(tok):
    import copy

    from pipelines.corpus.tokenizer import encode_with_offsets

    text = "Use <s> and <mask> here: Київ, 北京 😀 " * 20
    generic = copy.deepcopy(tok)
    generic.backend_tokenizer.encode_special_tokens = False  # forces the transformers call
    assert encode_with_offsets(text, generic) == encode_with_offsets(text, tok)
    assert generic.backend_tokenizer.encode_special_tokens  # and leaves the backend ready for the fast path


# --------------------------------------------------------------------------- mentions on tokens


REALISTIC = (
    "Paris (Paris) is in France; Paris's mayor met the Parisian press. "
    "Zürich, São Paulo and Île-de-France are places. "
    "Київ — столиця України. 北京是中国的首都。東京タワー. "
    "The 1990s began in 1990, costing $3.5 billion 😀👍🏽 at Café del Mar."
)


@pytest.mark.parametrize(
    "surface,occurrence",
    [
        ("Paris", 0), ("Paris", 1), ("Paris", 2), ("France", 0), ("Zürich", 0), ("São Paulo", 0),
        ("Île-de-France", 0), ("Київ", 0), ("України", 0), ("1990", 0), ("$3.5 billion", 0),
        ("Café del Mar", 0), ("mayor met", 0),
    ],
)
def test_realistic_mentions_decode_to_their_surface(tok, coder, surface, occurrence):
    m = mention(REALISTIC, surface, occurrence)
    out = tokenize_with_mentions(REALISTIC, [m], coder)
    assert out.dropped == 0, surface
    (span,) = out.spans
    assert span.mention is m
    assert decoded(tok, out.token_ids[span.token_start : span.token_end]).strip() == surface


def test_mentions_cutting_a_token_are_dropped_and_counted(tok, coder):
    # " Paris" and " France" are single GPT-2 tokens: these spans end or start inside them.
    bad = [
        Mention(REALISTIC.index("Paris"), REALISTIC.index("Paris") + 4, "Pari", "X", "same_page_alias"),
        Mention(REALISTIC.index("France") + 1, REALISTIC.index("France") + 6, "rance", "X", "hyperlink"),
    ]
    good = mention(REALISTIC, "France")
    out = tokenize_with_mentions(REALISTIC, [*bad, good], coder)
    assert out.dropped == 2 and out.dropped_mentions == bad
    assert [s.mention for s in out.spans] == [good]
    # An empty or out-of-range mention is dropped, not an error.
    weird = [Mention(3, 3, "", "X", "hyperlink"), Mention(5, 10**6, "?", "X", "hyperlink")]
    assert tokenize_with_mentions(REALISTIC, weird, coder).dropped == 2


def test_emoji_split_into_byte_tokens_maps_whole(tok, coder):
    text = "I like 👍🏽 a lot"
    out = tokenize_with_mentions(text, [mention(text, "👍🏽")], coder)
    (span,) = out.spans
    assert span.token_end - span.token_start >= 2  # several byte-level tokens
    assert decoded(tok, out.token_ids[span.token_start : span.token_end]).strip() == "👍🏽"


def test_long_text_is_never_truncated(tok, coder):
    unit = "Paris is the capital of France. Київ — столиця. 北京是首都。 "
    text = unit * 2500  # ~135k characters
    assert len(text) > 100_000
    last = Mention(text.rindex("France"), text.rindex("France") + 6, "France", "France", "hyperlink")
    out = tokenize_with_mentions(text, [last], coder)
    assert decoded(tok, out.token_ids) == text
    assert out.spans and out.spans[0].token_end <= len(out.token_ids)


def test_named_tokenizer_with_truncation_in_its_config_is_not_truncated(tok, tmp_path):
    import copy

    other = copy.deepcopy(tok)
    other.backend_tokenizer.enable_truncation(16)
    other.model_max_length = 16
    save_tokenizer(other, str(tmp_path / "trunc"))
    loaded = load_tokenizer(str(tmp_path / "trunc"))
    text = "word " * 499 + "word"
    out = tokenize_with_mentions(text, [], loaded)
    assert len(out.token_ids) == 500 and decoded(loaded, out.token_ids) == text


_ALPHABET = st.sampled_from(
    list("abcXYZ019 ,.()'-\n") + ["é", "ü", "Ж", "ї", "北", "京", "😀", "🏽", "\u0301", "\u00a0", "’", "  "]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_ALPHABET, min_size=1, max_size=60).map("".join), data=st.data())
def test_random_mentions_map_to_tokens_that_decode_to_them(tok, coder, text, data):
    n = data.draw(st.integers(1, 4))
    mentions = []
    for _ in range(n):
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start + 1, len(text)))
        mentions.append(Mention(start, end, text[start:end], "E", "hyperlink"))
    out = tokenize_with_mentions(text, mentions, coder)
    assert out.dropped + len(out.spans) == len(mentions)
    assert decoded(tok, out.token_ids) == text  # byte-level BPE is lossless
    for span in out.spans:
        m = span.mention
        assert 0 <= span.token_start < span.token_end <= len(out.token_ids)
        got = decoded(tok, out.token_ids[span.token_start : span.token_end])
        assert got.strip() == m.surface.strip() or (m.surface.isspace() and got.isspace())
        # Only whitespace may be added around the surface.
        assert m.surface.strip() in got


@settings(max_examples=100, deadline=None)
@given(words=st.lists(st.sampled_from(["Paris", "(Paris)", "Paris's", "Київ", "北京", "😀", "1990,", "Café"]), min_size=1, max_size=20))
def test_whole_word_mentions_are_never_dropped(tok, coder, words):
    text = " ".join(words)
    mentions, pos = [], 0
    for w in words:
        core = w.strip("(),").removesuffix("'s")
        start = text.index(core, pos)
        mentions.append(Mention(start, start + len(core), core, core, "hyperlink"))
        pos = start + len(w)
    out = tokenize_with_mentions(text, mentions, coder)
    assert out.dropped == 0
    assert [decoded(tok, out.token_ids[s.token_start : s.token_end]).strip() for s in out.spans] == [
        m.surface for m in mentions
    ]


# --------------------------------------------------------------------------- windows


def tm(start: int, end: int) -> TokenMention:
    return TokenMention(start, end, Mention(start, end, "x", f"E{start}", "hyperlink"))


def test_windows_basic_layout():
    ids = list(range(300))
    windows = cut_windows(ids, [], window=128, overlap=10)
    assert [w.token_start for w in windows] == [0, 118, 236]
    assert [len(w.token_ids) for w in windows] == [128, 128, 64]
    assert [w.index for w in windows] == [0, 1, 2]
    assert windows[1].token_ids[:10] == windows[0].token_ids[-10:]


def test_no_window_contained_in_the_previous_one():
    # 128 tokens exactly: one window, not a second one of the last 10 tokens.
    assert window_starts(128, 128, 10) == [0]
    assert window_starts(129, 128, 10) == [0, 118]
    assert cut_windows([], [tm(0, 1)][:0]) == []


def test_mentions_are_rebased_and_never_cut():
    ids = list(range(30))
    inside_first = tm(2, 4)
    in_overlap = tm(7, 9)  # windows [0,10) and [6,16): both hold it whole
    straddling = tm(9, 12)  # cut by the first window's end; whole in the second
    too_long = tm(0, 11)  # longer than a window: nowhere
    windows = cut_windows(ids, [too_long, straddling, in_overlap, inside_first], window=10, overlap=4)
    by_window = [[(m.token_start, m.token_end, m.mention.entity) for m in w.mentions] for w in windows]
    assert by_window[0] == [(2, 4, "E2"), (7, 9, "E7")]
    assert by_window[1] == [(1, 3, "E7"), (3, 6, "E9")]
    assert all("E0" not in {e for *_, e in ms} for ms in by_window)


@pytest.mark.parametrize("window,overlap,error", [
    (0, 0, "window must be a positive int, got 0"), (10.0, 2, "window must be a positive int, got 10.0"),
    (10, 10, "overlap must be an int with 0 <= overlap < window (10), got 10"),
    (10, -1, "overlap must be an int with 0 <= overlap < window (10), got -1"),
    (10, 11, "overlap must be an int with 0 <= overlap < window (10), got 11")])
def test_invalid_window_arguments(window, overlap, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        cut_windows([1, 2, 3], [], window=window, overlap=overlap)


def test_mention_outside_the_article_is_an_error():
    with pytest.raises(ValueError, match=re.escape("mention token span [2, 5) is empty or outside the article's 3 tokens")):
        cut_windows([1, 2, 3], [tm(2, 5)], window=2, overlap=0)


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 400),
    window=st.integers(1, 64),
    data=st.data(),
)
def test_window_properties(n, window, data):
    overlap = data.draw(st.integers(0, window - 1))
    spans = []
    for _ in range(data.draw(st.integers(0, 8)) if n else 0):
        start = data.draw(st.integers(0, n - 1))
        spans.append(tm(start, data.draw(st.integers(start + 1, min(n, start + window + 3)))))
    ids = [1000 + i for i in range(n)]
    windows = cut_windows(ids, spans, window=window, overlap=overlap)
    if n == 0:
        assert windows == []
        return
    covered = set()
    for k, w in enumerate(windows):
        assert w.index == k and w.token_start == k * (window - overlap)
        assert w.token_ids == ids[w.token_start : w.token_start + window]
        assert 1 <= len(w.token_ids) <= window
        covered.update(range(w.token_start, w.token_start + len(w.token_ids)))
        if k:
            prev = windows[k - 1]
            assert prev.token_ids[-overlap:] == w.token_ids[:overlap] if overlap else True
            assert prev.token_start + len(prev.token_ids) - w.token_start == overlap
            assert w.token_start + len(w.token_ids) > prev.token_start + len(prev.token_ids)
        if k < len(windows) - 1:
            assert len(w.token_ids) == window
        # Each mention present here is whole and re-based; each absent one does not fit.
        present = {(m.token_start + w.token_start, m.token_end + w.token_start) for m in w.mentions}
        for s in spans:
            fits = w.token_start <= s.token_start and s.token_end <= w.token_start + len(w.token_ids)
            assert ((s.token_start, s.token_end) in present) == fits
        for m in w.mentions:
            assert 0 <= m.token_start < m.token_end <= len(w.token_ids)
        assert [m.token_start for m in w.mentions] == sorted(m.token_start for m in w.mentions)
    assert covered == set(range(n))
    assert windows[-1].token_start + len(windows[-1].token_ids) == n


def test_pipeline_text_to_windows(tok, coder):
    text = " ".join(f"Paris{i} visited Київ and 北京." for i in range(60))
    mentions = [mention(text, "Київ", i) for i in range(60)]
    art = tokenize_with_mentions(text, mentions, coder)
    assert art.dropped == 0
    overlap = 10
    windows = cut_windows(art.token_ids, art.spans, window=32, overlap=overlap)
    assert all(isinstance(w, Window) for w in windows)
    seen = set()
    for w in windows:
        for m in w.mentions:
            assert decoded(tok, w.token_ids[m.token_start : m.token_end]).strip() == "Київ"
            seen.add(m.mention.start)
    # A mention of at most overlap + 1 tokens always lies whole in some window.
    assert max(s.token_end - s.token_start for s in art.spans) <= overlap + 1
    assert len(seen) == 60


# --------------------------------------------------------------------------- ChunkWindowsFn


def chunk(article, vocab, window, overlap, passage_text=True):
    """(rows, the page's windows as pass 2 makes them: (split, page key, Arrow batch) or None, counters) of
    ChunkWindowsFn on one article."""
    from pipelines.transforms.passages import ChunkWindowsFn, PassageOptions

    options = PassageOptions("gpt2-bpe", window, overlap, 0.0, "", passage_text=passage_text)
    fn = ChunkWindowsFn(options)
    fn.setup()
    rows = [row for _split, _key, row in fn.process(article, vocab)]
    batch_fn = ChunkWindowsFn(options)
    batch_fn.setup()
    page = batch_fn.windows(article, vocab)
    assert dict(batch_fn._tally) == dict(fn._tally)
    return rows, page, dict(fn._tally)


def test_a_mention_reaching_past_the_window_text_is_left_out_and_counted():
    from pipelines.records import LabeledArticle

    text = "one two three four five six"  # one token per word; the space goes with the next word
    two_and_space = Mention(4, 8, "two ", "Two", "hyperlink")  # its tokens: " two"; its space: " three"'s
    two = Mention(4, 7, "two", "Two", "same_page_alias")
    five = Mention(19, 23, "five", "Five", "hyperlink")
    article = LabeledArticle(page_id=7, title="T", text=text, mentions=[two_and_space, two, five])
    rows, _page, counters = chunk(article, {"Two": 5}, window=2, overlap=0)
    assert [r["text"] for r in rows] == ["one two", " three four", " five six"]
    assert [r["char_offset"] for r in rows] == [0, 7, 18]
    first = rows[0]["mentions"]
    assert [(m["token_start"], m["token_end"], m["surface"], m["char_start"], m["char_end"], m["entity_id"])
            for m in first] == [(1, 2, "two", 4, 7, 5)]
    assert rows[2]["mentions"] == [{"token_start": 0, "token_end": 1, "entity_id": 1, "entity": "Five",
                                    "source": "hyperlink", "surface": "five", "char_start": 1, "char_end": 5}]
    assert counters["passage_mentions_dropped/outside_window_text"] == 1
    assert counters["passage_mentions/outside_vocab"] == 1
    assert counters["passage_mentions/hyperlink"] == counters["passage_mentions/same_page_alias"] == 1
    assert counters["passages/train"] == 3 and counters["tokens/train"] == 6


@pytest.mark.parametrize("passage_text", [True, False])
def test_the_windows_batch_is_the_rows_in_arrow(passage_text):
    """ChunkWindowsFn builds each page's Arrow batch column by column (what pass 2 writes): the same bytes as
    the batch of its rows."""
    import pyarrow as pa

    from pipelines.records import LabeledArticle
    from schemas import passage_schema

    text = " ".join(f"Paris{i} visited Київ and 北京 😀." for i in range(40))
    mentions = [mention(text, "Київ", i) for i in range(40)] + [mention(text, "北京", i) for i in range(0, 40, 3)]
    visited = [mention(text, "visited", i) for i in range(0, 40, 7)]
    mentions += [Mention(m.start + 1, m.end, m.surface[1:], "Bad", "hyperlink") for m in visited]  # inside a token
    article = LabeledArticle(page_id=12, title="Тест", text=text, mentions=mentions)
    rows, page, counters = chunk(article, {"Київ": 9}, window=16, overlap=4, passage_text=passage_text)
    assert len(rows) > 10 and counters["mentions_dropped/not_token_aligned"] > 0
    split, key, batch = page
    assert (split, key) == ("train", "12")
    expected = pa.RecordBatch.from_pylist(rows, schema=passage_schema(passage_text))
    assert batch.serialize().to_pybytes() == expected.serialize().to_pybytes()
    assert sum(len(r["mentions"]) for r in rows) >= 40 + 14
    for r in rows:
        assert r["passage_id"] == f"12:{r['window_index']}" and r["title"] == "Тест"
        for m in r["mentions"]:
            assert text[r["char_offset"] + m["char_start"]:r["char_offset"] + m["char_end"]] == m["surface"]
            assert m["entity_id"] == (9 if m["entity"] == "Київ" else 1)
