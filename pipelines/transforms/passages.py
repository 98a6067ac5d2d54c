"""LabelMissingMentions and ChunkWindows: articles -> labelled, tokenised 128-token windows.

Per-page alias sets come from key joins: each page's candidate entities (the
entities it links to, and its own title entity) are joined with the alias
table keyed by entity, then regrouped by page id beside the article. No
alias table in a side input; only the entity vocabulary (<= N rows) is one.
"""
from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam

from pipelines.corpus.labels import AliasCandidate, LabelConfig, label_missing_mentions, usable_candidates
from pipelines.corpus.split import split_of
from pipelines.corpus.tokenizer import load_encoder, tokenize_with_mentions
from pipelines.corpus.windows import cut_windows
from pipelines.records import Article, LabeledArticle, Mention
from pipelines.transforms.stats import STATS, CountingDoFn
from pipelines.transforms.write import stable_shard
from schemas import UNK_ENTITY_ID

HYPERLINK = "hyperlink"


def usable_status(status: str, keep_red_links: bool) -> bool:
    return status == "article" or (status == "red_link" and keep_red_links)


@dataclass(frozen=True, slots=True)
class PassageOptions:
    tokenizer: str
    window: int
    overlap: int
    validation_fraction: float
    split_salt: str
    num_shards: int


class CandidatesForEntityFn(beam.DoFn):
    """(entity, {"refs": [(page_id, origin)], "aliases": [(alias, count, prior, sources)]}) -> (page_id, AliasCandidate)."""

    def process(self, element):
        entity, grouped = element
        refs = sorted(set(grouped["refs"]))
        if not refs:
            return
        aliases = list(grouped["aliases"])
        for page_id, origin in refs:
            for alias, count, prior, sources in aliases:
                yield page_id, AliasCandidate(
                    alias=alias, entity=entity, count=count, prior=prior, origin=origin, sources=tuple(sources))


class LabelArticleFn(CountingDoFn):
    """(page_id, {"article", "targets", "candidates"}) -> LabeledArticle."""

    def __init__(self, config: LabelConfig, keep_red_links: bool) -> None:
        super().__init__()
        self.config = config
        self.keep_red_links = keep_red_links

    def process(self, element):
        page_id, grouped = element
        articles = grouped["article"]
        if not articles:
            return
        article: Article = articles[0]
        if len(articles) > 1:
            self.count("duplicate_page_ids", len(articles) - 1)
        resolution = {target: (status, entity) for target, status, entity in grouped["targets"]}
        hyperlinks: list[Mention] = []
        for link in article.links:
            status, entity = resolution.get(link.target, ("red_link", link.target))
            if not usable_status(status, self.keep_red_links):
                self.count(f"links_dropped/{status}")
                continue
            hyperlinks.append(Mention(link.start, link.end, link.surface, entity, HYPERLINK))
        candidates = usable_candidates(grouped["candidates"], self.config)
        labels = label_missing_mentions(article.text, hyperlinks, candidates, self.config)
        self.count(f"mentions/{HYPERLINK}", len(hyperlinks))
        for label in labels:
            self.count(f"mentions/{label.source}")
        mentions = sorted(hyperlinks + labels, key=lambda m: (m.start, m.end))
        yield LabeledArticle(page_id=article.page_id, title=article.title, text=article.text, mentions=mentions)


class LabelMissingMentions(beam.PTransform):
    """Articles + resolved link targets + alias rows -> LabeledArticle."""

    def __init__(self, config: LabelConfig, keep_red_links: bool) -> None:
        super().__init__()
        self.config = config
        self.keep_red_links = keep_red_links

    def expand(self, inputs):
        articles = inputs["articles"]
        page_targets = inputs["page_targets"]  # (page_id, (target, status, entity))
        alias_rows = inputs["alias_rows"]
        keep_red = self.keep_red_links
        min_chars = self.config.min_alias_chars

        aliases_by_entity = (
            alias_rows
            | "ShortAliasesOut" >> beam.Filter(lambda r: len(r["alias"]) >= min_chars)
            | "AliasesByEntity" >> beam.Map(lambda r: (r["entity"], (r["alias"], r["count"], r["prior"], r["sources"])))
        )
        linked_refs = (
            page_targets
            | "UsableTargets" >> beam.Filter(lambda kv: usable_status(kv[1][1], keep_red))
            | "LinkedEntityRef" >> beam.Map(lambda kv: (kv[1][2], (kv[0], "linked")))
        )
        title_refs = articles | "TitleEntityRef" >> beam.Map(lambda a: (a.title, (a.page_id, "title")))
        candidates = (
            {"refs": (linked_refs, title_refs) | "FlattenEntityRefs" >> beam.Flatten(), "aliases": aliases_by_entity}
            | "JoinEntityAliases" >> beam.CoGroupByKey()
            | "CandidatesPerPage" >> beam.ParDo(CandidatesForEntityFn())
        )
        labeled = (
            {
                "article": articles | "ArticleByPageId" >> beam.Map(lambda a: (a.page_id, a)),
                "targets": page_targets,
                "candidates": candidates,
            }
            | "JoinPageParts" >> beam.CoGroupByKey()
            | "LabelArticles" >> beam.ParDo(LabelArticleFn(self.config, self.keep_red_links)).with_outputs(STATS, main="articles")
        )
        return {"articles": labeled.articles, "stats": [labeled[STATS]]}


class ChunkWindowsFn(CountingDoFn):
    """LabeledArticle -> ((split, shard), passage row) for every window."""

    def __init__(self, options: PassageOptions) -> None:
        super().__init__()
        self.options = options
        self.tokenizer = None

    def setup(self) -> None:
        self.tokenizer = load_encoder(self.options.tokenizer)  # tiktoken for the default GPT-2 BPE

    def process(self, article: LabeledArticle, vocab: dict):
        opts = self.options
        tokenized = tokenize_with_mentions(article.text, article.mentions, self.tokenizer)
        self.count("mentions_dropped/not_token_aligned", tokenized.dropped)
        windows = cut_windows(tokenized.token_ids, tokenized.spans, window=opts.window, overlap=opts.overlap)
        if not windows:
            self.count("articles_without_tokens")
            return
        split = split_of(article.page_id, opts.validation_fraction, salt=opts.split_salt)
        shard = stable_shard(str(article.page_id), opts.num_shards)
        self.count(f"pages/{split}")
        self.count(f"passages/{split}", len(windows))
        self.count(f"tokens/{split}", len(tokenized.token_ids))
        for w in windows:
            mentions = []
            for span in w.mentions:
                m = span.mention
                entity_id = vocab.get(m.entity, UNK_ENTITY_ID)
                if entity_id == UNK_ENTITY_ID:
                    self.count("passage_mentions/outside_vocab")
                self.count(f"passage_mentions/{m.source}")
                mentions.append({
                    "token_start": span.token_start,
                    "token_end": span.token_end,
                    "entity_id": entity_id,
                    "entity": m.entity,
                    "source": m.source,
                    "surface": m.surface,
                    "char_start": m.start,
                    "char_end": m.end,
                })
            yield (split, shard), {
                "passage_id": f"{article.page_id}:{w.index}",
                "page_id": article.page_id,
                "title": article.title,
                "window_index": w.index,
                "token_ids": list(w.token_ids),
                "mentions": mentions,
            }


class ChunkWindows(beam.PTransform):
    """LabeledArticle -> ((split, shard), passage row); entity ids from the vocabulary
    ((entity, id) pairs, at most N: the one side input of the job)."""

    def __init__(self, options: PassageOptions) -> None:
        super().__init__()
        self.options = options

    def expand(self, inputs):
        articles, vocab = inputs["articles"], inputs["vocab"]  # vocab: (entity, entity_id) pairs
        out = articles | "TokenizeAndWindow" >> beam.ParDo(
            ChunkWindowsFn(self.options), vocab=beam.pvalue.AsDict(vocab)).with_outputs(STATS, main="rows")
        return {"rows": out.rows, "stats": [out[STATS]]}
