"""Mention detection in raw text (questions, dialogue, passages).

Candidate spans come from two sources:

* the alias table: every run of 1..``max_mention_tokens`` tokens of spaCy's
  tokenizer for the text's language (``spacy.blank(lang)``: rules only,
  nothing to download) whose text is an alias of a vocabulary entity
  (case-insensitively) and is not a stopword or too short;
* named entities, when a trained spaCy pipeline is installed (``spacy_model``
  names one, by package name or path; ``"auto"`` takes ``{lang}_core_web_sm``,
  else any installed pipeline package of the text's language with an ``ner``
  component); numeric entity types (dates, amounts...) are left out.

Overlaps are resolved longest first (ties: a named entity, then leftmost), and
spans overlapping ``blocked`` spans (mentions a text already has) are dropped.
Each span carries the alias table's candidates, ranked by prior: the
first-stage candidate list BLINK's retrieval is merged with.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from linker.catalogue import AliasCandidate, AliasIndex, alias_key
from wikiedm.fields import option

log = logging.getLogger(__name__)

ALIAS = "alias"
NER = "ner"
SPACY_LANGUAGE = {"simple": "en", "zh-yue": "zh", "zh-classical": "zh", "als": "de"}  # wiki codes -> spaCy's
NUMERIC_NER_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    language: str = option("en", "language code of the text: spaCy's tokenizer rules and the stopword list")
    spacy_model: str = option("auto", "trained spaCy pipeline for NER spans (package name or path); 'auto': {lang}_core_web_sm, else any installed pipeline of the language with NER; 'none': tokenizer only")
    max_mention_tokens: int = option(8, "longest alias span tried, in spaCy tokens")
    min_alias_chars: int = option(3, "shorter alias matches are not mentions (2 for zh/ja/ko/th)")
    stopwords: str = option("", "stopword list (see --labels.stopwords of the corpus job); '': 'en,<language>'")
    ner_labels: tuple = option((), "NER labels kept; empty: all but numeric types")


@dataclass(frozen=True, slots=True)
class DetectedSpan:
    start: int
    end: int
    surface: str
    origin: str  # "alias" or "ner"
    candidates: tuple[AliasCandidate, ...] = ()  # from the alias table, best prior first


def load_spacy(config: DetectorConfig):
    """A spaCy pipeline: the trained one asked for (or found by 'auto'), else blank(lang)."""
    import spacy

    language = SPACY_LANGUAGE.get(config.language, config.language.split("-")[0]) or "xx"
    name = config.spacy_model
    if name == "auto":
        name = find_installed_pipeline(language) or "none"
    if name and name != "none":
        return spacy.load(name, exclude=["lemmatizer"])  # an explicit model that is missing is an error
    try:
        return spacy.blank(language)
    except (ImportError, KeyError, ValueError) as err:  # an unknown code, or a tokenizer with extra deps (ja: sudachipy)
        log.warning("spaCy has no usable tokenizer for %r (%s): using the multi-language one", config.language, err)
        return spacy.blank("xx")


def find_installed_pipeline(language: str) -> str | None:
    """``{language}_core_web_sm`` if installed, else the first installed pipeline package (by name)
    whose language is ``language`` and that has an ``ner`` component."""
    import spacy

    preferred = f"{language}_core_web_sm"
    if spacy.util.is_package(preferred):
        return preferred
    for name in sorted(spacy.util.get_installed_models()):
        try:
            meta = spacy.util.get_model_meta(spacy.util.get_package_path(name))
        except Exception:  # a broken package is not a pipeline to use
            continue
        if meta.get("lang") == language and "ner" in meta.get("pipeline", []):
            return name
    return None


def resolve_overlaps(spans: Sequence[DetectedSpan], blocked: Sequence[tuple[int, int]] = ()) -> list[DetectedSpan]:
    """Longest first (ties: NER, then leftmost), never overlapping each other or ``blocked``."""
    taken = sorted(blocked)
    chosen: list[DetectedSpan] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.origin != NER, s.start)):
        if any(s < span.end and span.start < e for s, e in taken):
            continue
        taken.append((span.start, span.end))
        chosen.append(span)
    return sorted(chosen, key=lambda s: (s.start, s.end))


class MentionDetector:
    """Finds mention spans in text with spaCy and the alias table."""

    def __init__(self, aliases: AliasIndex | None, config: DetectorConfig | None = None) -> None:
        from wikiedm.stopwords import resolve_stopwords, stopword_spec_for_language

        self.aliases = aliases
        self.config = config or DetectorConfig()
        self.nlp = load_spacy(self.config)
        self.has_ner = "ner" in self.nlp.pipe_names
        spec = self.config.stopwords or stopword_spec_for_language(self.config.language)
        self.stopwords = frozenset(w.casefold() for w in resolve_stopwords(spec))

    def usable_alias(self, surface: str) -> bool:
        key = alias_key(surface)
        return (self.aliases is not None and len(key) >= self.config.min_alias_chars and key not in self.stopwords
                and self.aliases.has_key(key))

    def candidates_of(self, surface: str) -> tuple[AliasCandidate, ...]:
        return self.aliases.lookup(surface) if self.aliases is not None else ()

    def alias_spans(self, text: str, doc) -> list[DetectedSpan]:
        if self.aliases is None:
            return []
        words = [(t.idx, t.idx + len(t.text)) for t in doc if not t.is_space]
        out = []
        for i, (start, _) in enumerate(words):
            if not (text[start].isalnum()):  # a mention does not start with punctuation
                continue
            for j in range(i, min(len(words), i + self.config.max_mention_tokens)):
                end = words[j][1]
                surface = text[start:end]
                key = alias_key(surface)
                if len(key) >= self.config.min_alias_chars and key not in self.stopwords and self.aliases.has_key(key):
                    out.append(DetectedSpan(start, end, surface, ALIAS, self.aliases.lookup_key(key)))
        return out

    def ner_spans(self, doc) -> list[DetectedSpan]:
        keep = set(self.config.ner_labels)
        return [
            DetectedSpan(ent.start_char, ent.end_char, ent.text, NER, self.candidates_of(ent.text))
            for ent in doc.ents
            if (ent.label_ in keep if keep else ent.label_ not in NUMERIC_NER_LABELS)
        ]

    def detect(self, text: str, blocked: Sequence[tuple[int, int]] = ()) -> list[DetectedSpan]:
        """Mention spans of ``text``, sorted, non-overlapping, none touching ``blocked``."""
        if not text.strip():
            return []
        doc = self.nlp(text)
        spans = self.alias_spans(text, doc)
        if self.has_ner:
            spans += self.ner_spans(doc)
        return resolve_overlaps(spans, blocked)
