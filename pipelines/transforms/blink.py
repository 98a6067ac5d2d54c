"""AddBlinkLabels and LinkRecords: BLINK entity linking as Beam steps.

``AddBlinkLabels`` (LabeledArticle -> LabeledArticle) is the corpus job's
optional extra labeller: it detects mention spans the article does not have yet
(alias-table matches and, with a trained spaCy pipeline, named entities), links
them with a BLINK model, and adds ``Mention(..., source="blink")`` for those
whose score (the linker's softmax probability) reaches the threshold. A new
mention never overlaps an existing one: hyperlinks and the heuristic labels
win. The index is the one of an existing corpus output (entity vocabulary,
descriptions, alias table, and the saved encodings ``python -m linker.cli
index`` builds); mentions name entities by title, so the corpus job maps them
onto its own vocabulary.

``LinkRecords`` (JSONL record dicts -> record dicts with mentions) is the body
of ``pipelines/link_mentions.py``.

Both load the linker once per worker process (``apache_beam.utils.shared``),
never build entity encodings on workers (they must exist), and count what
they do with ``CountingDoFn``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.utils.shared import Shared

from pipelines.records import LabeledArticle, Mention
from pipelines.transforms.stats import STATS, CountingDoFn

BLINK = "blink"
DEAD = "dead"


def overlaps(start: int, end: int, spans) -> bool:
    return any(s < end and start < e for s, e in spans)


@dataclass(frozen=True, slots=True)
class BlinkLabelCounts:
    added: int = 0
    below_threshold: int = 0
    overlapping: int = 0  # a span that overlaps an existing mention (or an earlier added one)


def add_blink_mentions(article: LabeledArticle, linked, threshold: float) -> tuple[LabeledArticle, BlinkLabelCounts]:
    """The article with the linked spans scoring at least ``threshold`` added, never overlapping."""
    taken = [(m.start, m.end) for m in article.mentions]
    added: list[Mention] = []
    below = overlapping = 0
    for lm in linked:
        if lm.score < threshold:
            below += 1
        elif overlaps(lm.start, lm.end, taken):
            overlapping += 1
        else:
            taken.append((lm.start, lm.end))
            added.append(Mention(lm.start, lm.end, lm.surface, lm.entity, BLINK))
    counts = BlinkLabelCounts(len(added), below, overlapping)
    if not added:
        return article, counts
    mentions = sorted([*article.mentions, *added], key=lambda m: (m.start, m.end))
    return LabeledArticle(article.page_id, article.title, article.text, mentions), counts


class _LinkerDoFn(CountingDoFn):
    """A CountingDoFn holding one Linker per worker process."""

    def __init__(self, linker_config) -> None:
        super().__init__()
        self.linker_config = linker_config
        self._shared = Shared()
        self._holder = None
        self.linker = None

    def setup(self) -> None:
        from linker.link import Linker

        config = self.linker_config

        class _Holder:  # Shared needs a weak-referenceable object
            def __init__(self):
                self.linker = Linker(config, build_encodings=False)

        self._holder = self._shared.acquire(_Holder)  # kept: Shared only holds a weak reference
        self.linker = self._holder.linker


class AddBlinkLabelsFn(_LinkerDoFn):
    def __init__(self, linker_config, threshold: float) -> None:
        super().__init__(linker_config)
        self.threshold = threshold

    def process(self, article: LabeledArticle):
        blocked = [(m.start, m.end) for m in article.mentions]
        spans = self.linker.detect(article.text, blocked)
        self.count("blink/articles")
        self.count("blink/detected_spans", len(spans))
        linked = self.linker.link_spans(article.text, spans) if spans else []
        labeled, counts = add_blink_mentions(article, linked, self.threshold)
        self.count(f"mentions/{BLINK}", counts.added)
        self.count("blink/rejected_below_threshold", counts.below_threshold)
        self.count("blink/rejected_overlapping", counts.overlapping)
        yield labeled


def blink_linker_config(model: str, corpus: str, language: str = "en", **overrides):
    """The LinkerConfig the corpus job's ``--blink_model`` / ``--blink_corpus`` options stand for:
    mention detection in the dump's language, the BLINK release's retrieval defaults."""
    from linker.link import LinkerConfig
    from linker.mentions import DetectorConfig

    config = LinkerConfig(model=model, corpus=corpus, detector=DetectorConfig(language=language or "en"), **overrides)
    config.validate()
    return config


class AddBlinkLabels(beam.PTransform):
    """LabeledArticle -> LabeledArticle with BLINK labels added; returns {"articles", "stats"}."""

    def __init__(self, linker_config, threshold: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"the BLINK threshold is a probability: got {threshold}")
        self.linker_config = linker_config
        self.threshold = threshold

    def expand(self, articles):
        out = articles | "LinkUnlabeledSpans" >> beam.ParDo(
            AddBlinkLabelsFn(self.linker_config, self.threshold)).with_outputs(STATS, main="articles")
        return {"articles": out.articles, "stats": [out[STATS]]}


# --------------------------------------------------------------------------- JSONL records


@dataclass(frozen=True, slots=True)
class RecordOptions:
    text_field: str = "text"
    mentions_field: str = "mentions"
    tokenizer: str = ""  # "" : character spans only
    min_score: float = 0.0


def mention_rows(linked, token_spans: dict | None) -> list[dict]:
    """Linked mentions in the corpus's mention shape (+ score); token spans when a tokenizer is set."""
    rows = []
    for lm in linked:
        row = {"char_start": lm.start, "char_end": lm.end, "entity_id": lm.entity_id, "entity": lm.entity,
               "source": BLINK, "surface": lm.surface, "score": round(float(lm.score), 6)}
        if token_spans is not None:
            span = token_spans.get((lm.start, lm.end))
            if span is None:
                continue
            row["token_start"], row["token_end"] = span
        rows.append(row)
    return rows


class LinkRecordsFn(_LinkerDoFn):
    """A batch of JSONL lines -> linked records; unusable lines go to the ``dead`` output."""

    def __init__(self, linker_config, options: RecordOptions) -> None:
        super().__init__(linker_config)
        self.options = options
        self.tokenizer = None

    def setup(self) -> None:
        super().setup()
        if self.options.tokenizer:
            from pipelines.corpus.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(self.options.tokenizer)

    def parse(self, line: str):
        try:
            record = json.loads(line)
        except ValueError as err:
            return None, f"bad_json: {err}"
        if not isinstance(record, dict):
            return None, "not_an_object"
        text = record.get(self.options.text_field)
        if not isinstance(text, str):
            return None, f"no_text_field: {self.options.text_field!r}"
        return record, None

    def process(self, lines):
        opts = self.options
        records, items = [], []
        for line in lines:
            if not line.strip():
                continue
            record, problem = self.parse(line)
            if record is None:
                self.count(f"records_dropped/{problem.split(':', 1)[0]}")
                yield beam.pvalue.TaggedOutput(DEAD, {"reason": problem, "line": line[:2000]})
                continue
            text = record[opts.text_field]
            records.append(record)
            items.append((text, self.linker.detect(text)))
        for record, (text, _), linked in zip(records, items, self.linker.link_batch(items)):
            kept = [lm for lm in linked if lm.score >= opts.min_score]
            self.count("mentions/below_min_score", len(linked) - len(kept))
            token_spans = None
            if self.tokenizer is not None:
                token_spans, token_ids = self.token_spans(text, kept)
                record["token_ids"] = token_ids
            rows = mention_rows(kept, token_spans)
            self.count("mentions_dropped/not_token_aligned", len(kept) - len(rows))
            self.count("mentions/blink", len(rows))
            self.count("records/linked")
            record[opts.mentions_field] = rows
            yield record

    def token_spans(self, text: str, linked) -> tuple[dict, list[int]]:
        from pipelines.corpus.tokenizer import tokenize_with_mentions

        mentions = [Mention(lm.start, lm.end, lm.surface, lm.entity, BLINK) for lm in linked]
        tokenized = tokenize_with_mentions(text, mentions, self.tokenizer)
        spans = {(t.mention.start, t.mention.end): (t.token_start, t.token_end) for t in tokenized.spans}
        return spans, list(tokenized.token_ids)


class LinkRecords(beam.PTransform):
    """JSONL lines -> {"records": linked record dicts, "dead": unusable lines, "stats": [...]}."""

    def __init__(self, linker_config, options: RecordOptions, batch_size: int = 32) -> None:
        super().__init__()
        self.linker_config = linker_config
        self.options = options
        self.batch_size = batch_size

    def expand(self, lines):
        out = (
            lines
            | "BatchLines" >> beam.BatchElements(min_batch_size=1, max_batch_size=self.batch_size)
            | "DetectAndLink" >> beam.ParDo(LinkRecordsFn(self.linker_config, self.options)).with_outputs(
                STATS, DEAD, main="records")
        )
        return {"records": out.records, "dead": out[DEAD], "stats": [out[STATS]]}
