"""AddBlinkLabels and LinkRecords: BLINK entity linking as Beam steps.

``AddBlinkLabels`` (LabeledArticle -> LabeledArticle) is the corpus job's
optional extra labeller: it detects mention spans the article does not have yet
(alias-table matches and, with a trained spaCy pipeline, named entities), links
them with a BLINK model, and adds ``Mention(..., source="blink")`` for those
whose final score reaches the linker's threshold: the same combined
(model + alias prior) probability and the same ``threshold`` as
``linker.cli link`` and ``link_mentions`` (see :mod:`linker.combine`). A new
mention never overlaps an existing one: hyperlinks and the heuristic labels
win. The linker covers an existing corpus output (``--blink_corpus``: entity
vocabulary, descriptions, alias table; or BLINK's own KB with ``--blink_kb
blink:DIR`` mapped onto it); mentions name entities by the corpus's title, so
the corpus job maps them onto its own vocabulary.

``LinkRecords`` (JSONL record dicts -> record dicts with mentions) is the body
of ``pipelines/link_mentions.py``.

Both load the linker once per worker process (``apache_beam.utils.shared``)
from the folder :func:`linker.link.prepare_linker` built on the launching
machine: the knowledge base, the alias candidate index (limited to vocabulary
entities and their top-K aliases) and the encodings are memory-mapped, so a
worker's memory does not grow with the alias table or the KB. Nothing is
built on workers, and what they do is counted with ``CountingDoFn``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.utils.shared import Shared

from linker.link import Linker, LinkerConfig, prepare_linker  # noqa: F401 - the one place pipelines import linker
from pipelines.records import LabeledArticle, Mention
from pipelines.transforms.stats import STATS, CountingDoFn
from schemas.corpus import MentionSource

BLINK = MentionSource.BLINK
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
        self._holder, self.linker = shared_linker(self._shared, self.linker_config)  # holder kept: a weak ref


def blink_label(linker, article: LabeledArticle, count) -> LabeledArticle:
    """The article with the linker's labels for its unlabelled spans; ``count(name, n)`` counts them."""
    blocked = [(m.start, m.end) for m in article.mentions]
    spans = linker.detect(article.text, blocked)
    count("blink/articles", 1)
    count("blink/detected_spans", len(spans))
    linked = linker.link_spans(article.text, spans) if spans else []
    linked = [lm for lm in linked if lm.entity_id >= 0 or linker.config.kb_unmapped == "keep"]
    labeled, counts = add_blink_mentions(article, linked, linker.config.threshold)
    count(f"mentions/{BLINK}", counts.added)
    count("blink/rejected_below_threshold", counts.below_threshold)
    count("blink/rejected_overlapping", counts.overlapping)
    return labeled


def shared_linker(shared: Shared, config):
    """(holder, linker): the process's one Linker for ``config`` (keep the holder: Shared holds it weakly)."""

    class _Holder:  # Shared needs a weak-referenceable object
        def __init__(self):
            self.linker = Linker(config, build_encodings=False)

    holder = shared.acquire(_Holder)
    return holder, holder.linker


class AddBlinkLabelsFn(_LinkerDoFn):
    def process(self, article: LabeledArticle):
        yield blink_label(self.linker, article, self.count)


def blink_linker_config(model: str, corpus: str, language: str = "en", config_file: str = "", **overrides):
    """The LinkerConfig the corpus job's ``--blink_*`` options stand for: a linker YAML
    (``--blink_config``, e.g. configs/linker/corpus_labels.yaml) or the defaults, with mention
    detection in the dump's language (the text labelled is the dump's); ``overrides`` (kb, threshold) win."""
    import dataclasses

    from wikiedm.config import parse_config

    base, rest = parse_config(LinkerConfig, ["--config", config_file] if config_file else [])
    if rest:
        raise ValueError(f"{config_file}: unexpected {rest}")
    detector = dataclasses.replace(base.detector, language=language or base.detector.language)
    config = dataclasses.replace(base, model=model, corpus=corpus, detector=detector,
                                 **{k: v for k, v in overrides.items() if v is not None})
    config.validate()
    return config


def corpus_job_linker_config(cfg, language: str):
    """The linker of a WikiMentionsConfig with ``--blink_model``."""
    return blink_linker_config(cfg.blink_model, cfg.blink_corpus, language, getattr(cfg, "blink_config", ""),
                               kb=getattr(cfg, "blink_kb", "") or None, threshold=cfg.blink_threshold)


class AddBlinkLabels(beam.PTransform):
    """LabeledArticle -> LabeledArticle with BLINK labels added; returns {"articles", "stats"}.
    ``threshold`` (when given) replaces the linker config's."""

    def __init__(self, linker_config, threshold: float | None = None) -> None:
        import dataclasses

        super().__init__()
        if threshold is not None:
            if not 0.0 <= threshold <= 1.0:
                raise ValueError(f"the BLINK threshold is a probability: got {threshold}")
            linker_config = dataclasses.replace(linker_config, threshold=threshold)
        self.linker_config = linker_config
        self.threshold = linker_config.threshold

    def expand(self, articles):
        out = articles | "LinkUnlabeledSpans" >> beam.ParDo(
            AddBlinkLabelsFn(self.linker_config)).with_outputs(STATS, main="articles")
        return {"articles": out.articles, "stats": [out[STATS]]}


# --------------------------------------------------------------------------- JSONL records


@dataclass(frozen=True, slots=True)
class RecordOptions:
    text_field: str = "text"
    mentions_field: str = "mentions"
    tokenizer: str = ""  # "" : character spans only


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
            from wikiedm.tokenizer import load_tokenizer

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
            kept = [lm for lm in linked if self.linker.accepted(lm)]
            self.count("mentions/below_threshold", len(linked) - len(kept))
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
        from wikiedm.tokenizer import tokenize_with_mentions

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
