"""ChunkWindows: labelled articles -> tokenised 128-token windows (pass 2's ChunkWindowsFn; the PTransform
for tests and tools that window LabeledArticles in a pipeline of their own).

The entity vocabulary (<= N rows) is the only side input.
"""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from itertools import repeat

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines.corpus.split import split_of
from pipelines.corpus.windows import WindowMentions, window_count, window_mentions
from pipelines.records import LabeledArticle
from pipelines.transforms.stats import STATS, CountingDoFn
from schemas import UNK_ENTITY_ID, passage_schema
from schemas.corpus import MENTION_TYPE
from wikiedm.tokenizer import TokenBounds, load_encoder, tokenize_mention_arrays

_STRINGS = operator.attrgetter("entity", "source", "surface")
_MENTION_FIELDS = list(MENTION_TYPE)


@dataclass(frozen=True, slots=True)
class PassageOptions:
    tokenizer: str
    window: int
    overlap: int
    validation_fraction: float
    split_salt: str
    passage_text: bool = True  # write each window's text (``text``); offsets are window-relative either way


class ChunkWindowsFn(CountingDoFn):
    """LabeledArticle -> (split, page id as the shard key, passage row) for every window.

    A row's ``char_offset`` is where its window's text starts in the article's
    text, and its mentions' ``char_start``/``char_end`` index that window text
    (:meth:`TokenBounds.span`: the characters wholly inside the window's tokens),
    with or without the ``text`` column. A mention is in a window when its
    tokens are (:func:`cut_windows`); one whose characters reach past the
    window's text (a leading or trailing space held by a token outside its
    span) is left out of that window and counted.
    """

    def __init__(self, options: PassageOptions) -> None:
        super().__init__()
        self.options = options
        self.schema = passage_schema(options.passage_text)
        self.tokenizer = None

    def setup(self) -> None:
        self.tokenizer = load_encoder(self.options.tokenizer)  # tiktoken for the default GPT-2 BPE

    def process(self, article: LabeledArticle, vocab: dict):
        yield from self.rows(article, vocab)

    def rows(self, article: LabeledArticle, vocab: dict):
        """(split, page id as the shard key, passage row) for every window of the article."""
        page = self.windows(article, vocab)
        if page is not None:
            split, page_key, batch = page
            for row in batch.to_pylist():
                yield split, page_key, row

    def windows(self, article: LabeledArticle, vocab: dict) -> tuple[str, str, pa.RecordBatch] | None:
        """(split, page id as the shard key, the article's passages as one Arrow batch), or None
        (no tokens). Built column by column: no Python object per token, nor a dict per row."""
        opts = self.options
        self.count("volume/ChunkWindows/in")
        tokenized = tokenize_mention_arrays(article.text, article.mentions, self.tokenizer, with_bounds=True)
        self.count("mentions_dropped/not_token_aligned", len(tokenized.dropped))
        ids = tokenized.token_ids
        n_tokens = len(ids)
        n_windows = window_count(n_tokens, opts.window, opts.overlap)
        token_start = np.arange(n_windows, dtype=np.int64) * (opts.window - opts.overlap)
        if not n_windows:
            self.count("articles_without_tokens")
            return None
        bounds = tokenized.bounds
        split = split_of(article.page_id, opts.validation_fraction, salt=opts.split_salt)
        self.count(f"pages/{split}")
        self.count(f"passages/{split}", n_windows)
        self.count("volume/ChunkWindows/out", n_windows)
        self.count(f"tokens/{split}", n_tokens)
        token_end = np.minimum(token_start + opts.window, n_tokens)
        # The characters wholly inside each window's tokens (TokenBounds.span, for all windows).
        char_start = bounds.first_char[token_start]
        char_end = np.maximum(char_start, bounds.end_char[token_end])
        self.count("passage_edges/split_character",
                   int(np.count_nonzero(char_start != bounds.end_char[token_start]))
                   + int(np.count_nonzero(bounds.first_char[token_end] != bounds.end_char[token_end])))
        token_offsets = np.zeros(n_windows + 1, dtype=np.int32)
        np.cumsum(token_end - token_start, out=token_offsets[1:])
        window_index = np.arange(n_windows, dtype=np.int32)
        columns = [
            _passage_ids(article.page_id, window_index),  # passage_id
            _numbers(np.full(n_windows, article.page_id, dtype=np.int64), pa.int64()),  # page_id
            _repeated(article.title, window_index),  # title
            _numbers(window_index, pa.int32()),  # window_index
            _numbers(char_start.astype(np.int32), pa.int32()),  # char_offset
        ]
        if opts.passage_text:
            columns.append(_window_texts(bounds, token_start, token_end, char_start, char_end))
        columns.append(pa.ListArray.from_arrays(_numbers(token_offsets, pa.int32()), _numbers(
            _window_tokens(_as_int32(ids), token_start, opts.window, opts.overlap), pa.int32())))
        columns.append(self._mentions(tokenized, n_tokens, token_start, char_start, char_end, vocab))
        return split, str(article.page_id), pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _mentions(self, tokenized, n_tokens: int, token_start, char_start, char_end, vocab: dict) -> pa.ListArray:
        """The ``mentions`` column: each window's mentions whose tokens and characters it holds (counted).

        A mention's strings and entity id are read once, for the mentions as given; each window's copies
        are gathered from those arrays (a mention near a window edge is in two windows)."""
        opts = self.options
        n_windows = len(token_start)
        placed = window_mentions(n_tokens, tokenized.token_start, tokenized.token_end, window=opts.window,
                                 overlap=opts.overlap)
        k, i = placed.window, placed.mention
        m_start, m_end = tokenized.char_start[i], tokenized.char_end[i]
        # A mention whose characters reach past the window's text (a space held by a token outside it) is left out.
        inside = (char_start[k] <= m_start) & (m_start < m_end) & (m_end <= char_end[k])
        self.count("passage_mentions_dropped/outside_window_text", int(len(inside) - np.count_nonzero(inside)))
        if not inside.all():
            k, i, m_start, m_end = k[inside], i[inside], m_start[inside], m_end[inside]
            placed = WindowMentions(k, i, placed.token_start[inside], placed.token_end[inside])
        at = tokenized.kept[i]  # each placed mention's position in the mentions as given
        # Each placed mention's (entity, source, surface), read in one pass over the mentions as given.
        strings = _picker(at.tolist())(list(map(_STRINGS, tokenized.given)))
        entities, sources, surfaces = zip(*strings) if len(strings) else ((), (), ())
        entity_ids = np.fromiter(map(vocab.get, entities, repeat(UNK_ENTITY_ID)), np.int32, len(entities))
        self.count("passage_mentions/outside_vocab", int(np.count_nonzero(entity_ids == UNK_ENTITY_ID)))
        for source, n in Counter(sources).items():
            self.count(f"passage_mentions/{source}", n)
        window_of_start = char_start[k]
        struct = pa.StructArray.from_arrays(
            [
                _numbers(placed.token_start.astype(np.int32), pa.int32()),
                _numbers(placed.token_end.astype(np.int32), pa.int32()),
                _numbers(entity_ids, pa.int32()),
                pa.array(entities, pa.string()),
                pa.array(sources, pa.string()),
                pa.array(surfaces, pa.string()),
                _numbers((m_start - window_of_start).astype(np.int32), pa.int32()),
                _numbers((m_end - window_of_start).astype(np.int32), pa.int32()),
            ],
            fields=_MENTION_FIELDS,
        )
        offsets = np.zeros(n_windows + 1, dtype=np.int32)
        np.cumsum(np.bincount(k, minlength=n_windows), out=offsets[1:])
        return pa.ListArray.from_arrays(_numbers(offsets, pa.int32()), struct)


def _numbers(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A numpy array of ``arrow_type``'s width as an Arrow array over its buffer (no nulls, no copy)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


_WINDOW_NUMBERS = tuple(map(str, range(4096)))  # "0", "1", ...: the suffixes of passage ids, in text
_WINDOW_NUMBER_ENDS = np.cumsum([0, *map(len, _WINDOW_NUMBERS)]).astype(np.int32)  # their ends, one after another


def _passage_ids(page_id: int, window_index: np.ndarray) -> pa.Array:
    """The ``passage_id`` column, ``f"{page_id}:{k}"`` for windows ``k`` = 0..n-1, from one joined text."""
    n = len(window_index)
    if n > len(_WINDOW_NUMBERS):
        return pa.array([f"{page_id}:{k}" for k in range(n)], pa.string())
    prefix = f"{page_id}:"
    data = (prefix + prefix.join(_WINDOW_NUMBERS[:n])).encode("ascii")
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[:n] = _WINDOW_NUMBER_ENDS[:n] + window_index * len(prefix)
    offsets[n] = len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), null_count=0)


def _repeated(value: str, window_index: np.ndarray) -> pa.Array:
    """A string column holding ``value`` in each of the windows' rows."""
    utf8 = value.encode("utf-8")
    n = len(window_index)
    offsets = np.empty(n + 1, dtype=np.int32)
    np.multiply(window_index, len(utf8), out=offsets[:n])
    offsets[n] = n * len(utf8)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(utf8 * n), null_count=0)


def _picker(positions: list[int]):
    """``values -> [values[p] for p in positions]``, in C (a tuple when there are several)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return lambda values: [values[p] for p in positions]


def _as_int32(ids: np.ndarray) -> np.ndarray:
    """Token ids as int32: tiktoken's uint32 ids (< 2**31) viewed as they are, others converted."""
    return ids.view(np.int32) if ids.dtype == np.uint32 else ids.astype(np.int32)


def _window_tokens(ids: np.ndarray, token_start: np.ndarray, window: int, overlap: int) -> np.ndarray:
    """The windows' tokens one after the other: every window but the last is ``window`` tokens long
    (:func:`window_starts`), so they are the rows of a strided view of the (contiguous) ids, copied once."""
    last = ids[int(token_start[-1]):]
    if len(token_start) == 1:
        return last
    full = np.ndarray((len(token_start) - 1, window), ids.dtype, ids, 0,
                      ((window - overlap) * ids.itemsize, ids.itemsize))  # inside ids: window k ends before the last
    return np.concatenate((full.reshape(-1), last))


def _window_texts(bounds: TokenBounds, token_start, token_end, char_start, char_end) -> pa.Array:
    """The ``text`` column: each window's characters ``[char_start, char_end)``, cut from the text's UTF-8
    bytes where their byte ranges are known (one copy of the bytes; no Python string per window)."""
    spans = bounds.byte_spans(token_start, token_end)
    if spans is None:
        text = bounds.text
        return pa.array([text[a:b] for a, b in zip(char_start.tolist(), char_end.tolist())], pa.string())
    start, end = spans
    utf8 = memoryview(bounds.text_utf8())
    data = b"".join([utf8[a:b] for a, b in zip(start.tolist(), end.tolist())])
    offsets = np.zeros(len(start) + 1, dtype=np.int32)
    np.cumsum(end - start, out=offsets[1:])
    return pa.StringArray.from_buffers(len(start), pa.py_buffer(offsets), pa.py_buffer(data), null_count=0)


class ChunkWindows(beam.PTransform):
    """LabeledArticle -> (split, shard key, passage row); entity ids from the vocabulary
    ((entity, id) pairs, at most N: the one side input of the job).
    """

    def __init__(self, options: PassageOptions) -> None:
        super().__init__()
        self.options = options

    def expand(self, inputs):
        articles, vocab = inputs["articles"], inputs["vocab"]  # vocab: (entity, entity_id) pairs
        out = articles | "TokenizeAndWindow" >> beam.ParDo(
            ChunkWindowsFn(self.options), vocab=beam.pvalue.AsDict(vocab)).with_outputs(STATS, main="rows")
        return {"rows": out.rows, "stats": [out[STATS]]}
