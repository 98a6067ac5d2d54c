"""LabelMissingMentions and ChunkWindows: articles -> labelled, tokenised 128-token windows.

Per-page alias sets come from key joins, with a volume linear in the corpus:

1. Alias rows are filtered once (length, letters, stopwords, rarity, prior)
   and capped to the ``labels.max_aliases_per_entity`` best aliases of each
   entity (a Top-per-key combiner, lifted before the shuffle).
2. Each page's references to entities (the entities it links to, and its own
   title entity) are joined with those aliases keyed by entity: a LookupJoin,
   so the ~500k pages that refer to a hub entity are split into bounded
   groups; a page's references to one entity are de-duplicated there, and the
   page receives one element per entity it refers to.
3. The article, its resolved link targets and those elements meet by page id.

No alias table in a side input; only the entity vocabulary (<= N rows) is one.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines.corpus.alias_table import clean_alias
from pipelines.corpus.candidates import RankedAliases, alias_rank, usable_alias
from pipelines.corpus.labels import LINKED, TITLE, LabelConfig, label_page
from pipelines.corpus.split import split_of
from pipelines.corpus.windows import WindowMentions, window_mentions, window_starts
from pipelines.records import Article, LabeledArticle, Mention
from pipelines.transforms.joins import BYTES_SAMPLE, GroupJoinFn, LookupJoin, encoded_size, in_bytes_sample
from pipelines.transforms.stats import STATS, CountingDoFn
from pipelines.transforms.write import pack_batch
from schemas import UNK_ENTITY_ID, passage_schema
from schemas.corpus import MENTION_TYPE, MentionSource
from wikiedm.tokenizer import load_encoder, tokenize_mention_arrays

HYPERLINK = MentionSource.HYPERLINK


@dataclass(frozen=True, slots=True)
class PassageOptions:
    tokenizer: str
    window: int
    overlap: int
    validation_fraction: float
    split_salt: str
    passage_text: bool = True  # write each window's text (``text``); offsets are window-relative either way


class UsableAliasesFn(CountingDoFn):
    """Alias row -> (entity, packed alias) when the labeller may use it; drops counted by reason."""

    def __init__(self, config: LabelConfig) -> None:
        super().__init__()
        self.config = config

    def process(self, row):
        self.count("volume/LabelMissingMentions/in")
        reason, packed = usable_alias(row, self.config)
        if reason is not None:
            self.count(f"label_aliases_dropped/{reason}")
            return
        self.count("label_aliases/usable")
        yield row["entity"], (alias_rank(packed[0], row["entity"], int(row["count"]), tuple(row["sources"])), packed)


def _rank_of(ranked_alias):
    return ranked_alias[0]


def latest_article(articles: list[Article]) -> Article:
    """The article kept for a page id that a broken dump repeats: the latest
    revision, then the smallest title and text (deterministic on any runner)."""
    return min(articles, key=lambda a: (-(a.revision_id if a.revision_id is not None else -1), a.title, a.text))


class CandidatesForEntityFn(GroupJoinFn):
    """Key: an entity; table: its best aliases (one list of (rank, packed alias), at most
    ``max_aliases_per_entity``); requests: (page_id, "linked", link target, the page's anchor
    texts for it) and (page_id, "title", None, ()).

    -> (page_id, (entity, origins, aliases, link targets)) once per page of the group,
    with the aliases :meth:`RankedAliases.for_page` picks and the page's link targets that
    resolve to the entity (so the page join needs no per-link resolution elements).
    """

    join_name = "LabelCandidates"

    def __init__(self, top_per_page: int) -> None:
        super().__init__()
        self.top_per_page = top_per_page

    def join(self, entity, salt, tables, refs):
        origins_by_page: dict[int, set] = {}
        anchors_by_page: dict[int, set] = {}
        targets_by_page: dict[int, set] = {}
        n_refs = 0
        for page_id, origin, target, surfaces in refs:
            n_refs += 1
            origins_by_page.setdefault(page_id, set()).add(origin)
            anchors = anchors_by_page.setdefault(page_id, set())
            for surface in surfaces:
                anchors.add(clean_alias(surface))
            if target is not None:
                targets_by_page.setdefault(page_id, set()).add(target)
        self.count("volume/LabelMissingMentions/in", n_refs)
        ranked = RankedAliases([packed for _rank, packed in tables[0]] if tables else [])  # []: no usable alias
        out = aliases_out = 0
        for page_id in sorted(origins_by_page):
            targets = tuple(sorted(targets_by_page.get(page_id, ())))
            aliases = ranked.for_page(self.top_per_page, anchors_by_page[page_id])
            if aliases or targets:
                out += 1
                aliases_out += len(aliases)
                yield page_id, (PAGE_CANDIDATES, (entity, tuple(sorted(origins_by_page[page_id])), aliases, targets))
        self.count("volume/LabelCandidates/out", out)
        self.count("volume/LabelCandidates/aliases_out", aliases_out)


# The page join's two sides, tagged in the values of one GroupByKey (see joins.TABLE/REQUEST).
PAGE_ARTICLE, PAGE_CANDIDATES = 0, 1


def _article_by_page_id(article: Article):
    return article.page_id, (PAGE_ARTICLE, article)


class LabelArticleFn(CountingDoFn):
    """(page_id, [(PAGE_ARTICLE, article) | (PAGE_CANDIDATES, candidates of one entity)]) -> LabeledArticle.

    A link is a hyperlink mention when its target came back resolved to an
    entity in the candidates; the others were counted as dropped by ResolveLinks.
    """

    def __init__(self, config: LabelConfig) -> None:
        super().__init__()
        self.config = config

    def process(self, element):
        page_id, tagged = element
        articles, candidates = [], []
        for tag, value in tagged:
            (articles if tag == PAGE_ARTICLE else candidates).append(value)
        if not articles:
            return
        article = latest_article(articles)
        group = len(articles) + len(candidates)
        self.count("volume/JoinPageParts/requests", group)
        self.observe_max("largest_group/JoinPageParts", group)  # bounded by the page's size, not the corpus
        if in_bytes_sample(page_id):
            sampled = sum(encoded_size((page_id, (PAGE_ARTICLE, a))) for a in articles)
            sampled += sum(encoded_size((page_id, (PAGE_CANDIDATES, c))) for c in candidates)
            self.count("volume/JoinPageParts/request_bytes", sampled * BYTES_SAMPLE)
        self.count("volume/LabelMissingMentions/out")
        if len(articles) > 1:
            self.count("duplicate_page_ids", len(articles) - 1)
        entity_of = {target: entity for entity, _o, _a, targets in candidates for target in targets}
        hyperlinks = [Mention(link.start, link.end, link.surface, entity_of[link.target], HYPERLINK)
                      for link in article.links if link.target in entity_of]
        linked = {m.entity for m in hyperlinks}
        entities = []
        for entity, origins, aliases, _targets in candidates:
            # Only what this article refers to (a repeated page id's other copy may refer to more).
            kept = tuple(o for o in origins if (o == LINKED and entity in linked) or (o == TITLE and entity == article.title))
            if kept and aliases:
                entities.append((entity, kept, aliases))
        labels = label_page(article.text, hyperlinks, entities, self.config)
        self.count(f"mentions/{HYPERLINK}", len(hyperlinks))
        for source, n in Counter(label.source for label in labels).items():
            self.count(f"mentions/{source}", n)
        mentions = sorted(hyperlinks + labels, key=lambda m: (m.start, m.end))
        yield LabeledArticle(page_id=article.page_id, title=article.title, text=article.text, mentions=mentions)


class LabelMissingMentions(beam.PTransform):
    """Articles + entity refs of their usable links + alias rows -> LabeledArticle.

    Inputs: ``articles``; ``entity_refs`` (batches of refs of usable links, (entity,
    ((page_id, "linked", target, anchor texts), ...)));
    ``entity_links`` ((entity, links), an upper bound of the pages per entity);
    ``alias_rows`` (alias-table dicts).
    """

    def __init__(self, config: LabelConfig, max_group: int) -> None:
        super().__init__()
        self.config = config
        self.max_group = max_group

    def expand(self, inputs):
        articles = inputs["articles"]
        usable = inputs["alias_rows"] | "UsableAliases" >> beam.ParDo(UsableAliasesFn(self.config)).with_outputs(
            STATS, main="aliases")
        top_aliases = (
            usable.aliases
            | "TopAliasesPerEntity" >> beam.combiners.Top.PerKey(
                self.config.max_aliases_per_entity, key=_rank_of, reverse=True)
        )
        title_refs = articles | "TitleEntityRef" >> beam.Map(lambda a: (a.title, (a.page_id, TITLE, None, ())))
        ref_counts = inputs["entity_links"] | "RefsUpperBound" >> beam.Map(lambda kv: (kv[0], kv[1] + 1))
        candidates = {"requests": title_refs, "request_batches": inputs["entity_refs"], "table": top_aliases,
                      "request_counts": ref_counts} | (
            "JoinEntityAliases" >> LookupJoin(CandidatesForEntityFn(self.config.top_aliases_per_page), lambda ref: ref[0], self.max_group, main="out"))
        labeled = (
            (articles | "ArticleByPageId" >> beam.Map(_article_by_page_id), candidates.out)
            | "FlattenPageParts" >> beam.Flatten()
            | "JoinPageParts" >> beam.GroupByKey()
            | "LabelArticles" >> beam.ParDo(LabelArticleFn(self.config)).with_outputs(STATS, main="articles")
        )
        return {"articles": labeled.articles, "stats": [usable[STATS], candidates[STATS], labeled[STATS]]}


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

    def __init__(self, options: PassageOptions, packed: bool = False) -> None:
        super().__init__()
        self.options = options
        self.packed = packed
        self.schema = passage_schema(options.passage_text)
        self.tokenizer = None

    def setup(self) -> None:
        self.tokenizer = load_encoder(self.options.tokenizer)  # tiktoken for the default GPT-2 BPE

    def process(self, article: LabeledArticle, vocab: dict):
        if not self.packed:
            yield from self.rows(article, vocab)
            return
        # One element per page: its windows are one shard key's rows and follow each other in
        # the files' (page_id, window_index) order, so they travel as one packed Arrow run.
        page = self.windows(article, vocab)
        if page is not None:
            split, page_key, batch = page
            yield split, page_key, pack_batch(article.page_id, batch)

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
        self.count("mentions_dropped/not_token_aligned", len(tokenized.dropped_mentions))
        ids = tokenized.token_ids
        n_tokens = len(ids)
        token_start = np.asarray(window_starts(n_tokens, opts.window, opts.overlap), dtype=np.int64)
        n_windows = len(token_start)
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
        lengths = token_end - token_start
        token_offsets = np.zeros(n_windows + 1, dtype=np.int32)
        np.cumsum(lengths, out=token_offsets[1:])
        token_index = np.arange(token_offsets[-1], dtype=np.int64) + np.repeat(token_start - token_offsets[:-1],
                                                                                  lengths)
        columns = {
            "passage_id": pa.array([f"{article.page_id}:{k}" for k in range(n_windows)], pa.string()),
            "page_id": pa.array(np.full(n_windows, article.page_id, dtype=np.int64)),
            "title": pa.array([article.title] * n_windows, pa.string()),
            "window_index": pa.array(np.arange(n_windows, dtype=np.int32)),
            "char_offset": pa.array(char_start.astype(np.int32)),
        }
        if opts.passage_text:
            text = bounds.text
            columns["text"] = pa.array([text[a:b] for a, b in zip(char_start.tolist(), char_end.tolist())],
                                       pa.string())
        columns["token_ids"] = pa.ListArray.from_arrays(pa.array(token_offsets),
                                                        pa.array(ids[token_index].astype(np.int32)))
        columns["mentions"] = self._mentions(tokenized, n_tokens, token_start, char_start, char_end, vocab)
        return split, str(article.page_id), pa.RecordBatch.from_arrays(list(columns.values()), schema=self.schema)

    def _mentions(self, tokenized, n_tokens: int, token_start, char_start, char_end, vocab: dict) -> pa.ListArray:
        """The ``mentions`` column: each window's mentions whose tokens and characters it holds (counted)."""
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
        mentions = tokenized.mentions
        entity_ids = np.array([vocab.get(m.entity, UNK_ENTITY_ID) for m in mentions], dtype=np.int32)[i]
        self.count("passage_mentions/outside_vocab", int(np.count_nonzero(entity_ids == UNK_ENTITY_ID)))
        placed_mentions = [mentions[j] for j in i.tolist()]
        sources = [m.source for m in placed_mentions]
        for source, n in Counter(sources).items():
            self.count(f"passage_mentions/{source}", n)
        window_of_start = char_start[k]
        struct = pa.StructArray.from_arrays(
            [
                pa.array(placed.token_start.astype(np.int32)),
                pa.array(placed.token_end.astype(np.int32)),
                pa.array(entity_ids),
                pa.array([m.entity for m in placed_mentions], pa.string()),
                pa.array(sources, pa.string()),
                pa.array([m.surface for m in placed_mentions], pa.string()),
                pa.array((m_start - window_of_start).astype(np.int32)),
                pa.array((m_end - window_of_start).astype(np.int32)),
            ],
            fields=list(MENTION_TYPE),
        )
        offsets = np.zeros(n_windows + 1, dtype=np.int32)
        np.cumsum(np.bincount(k, minlength=n_windows), out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), struct)


class ChunkWindows(beam.PTransform):
    """LabeledArticle -> (split, shard key, passage row); entity ids from the vocabulary
    ((entity, id) pairs, at most N: the one side input of the job).

    ``packed``: one element per page instead, (split, shard key, :func:`pack_rows` of its
    windows), for ``WriteShards(..., packed=True)`` (what the job writes; same files).
    """

    def __init__(self, options: PassageOptions, packed: bool = False) -> None:
        super().__init__()
        self.options = options
        self.packed = packed

    def expand(self, inputs):
        articles, vocab = inputs["articles"], inputs["vocab"]  # vocab: (entity, entity_id) pairs
        out = articles | "TokenizeAndWindow" >> beam.ParDo(
            ChunkWindowsFn(self.options, self.packed), vocab=beam.pvalue.AsDict(vocab)).with_outputs(STATS, main="rows")
        return {"rows": out.rows, "stats": [out[STATS]]}
