"""The Linker: detect mentions, retrieve candidates, (re-rank), pick an entity.

For each mention span:

1. its BLINK context (``[CLS] left [unused0] mention [unused1] right [SEP]``)
   is encoded by the bi-encoder's context encoder;
2. the ``top_k`` entities with the highest dot product are retrieved from the
   candidate index, and the alias table's ``alias_candidates`` best-prior
   entities for the surface form are added (the first-stage list);
3. optionally, the cross-encoder re-scores the ``rerank_top_k`` best;
4. the entity with the best final score wins; ``score`` is its softmax
   probability over the scored candidates (comparable across mentions,
   unlike raw dot products, so a threshold can be put on it).

Entity encodings are computed once per (model, corpus) and saved (see
:mod:`linker.index`); :func:`prepare_encodings` builds them, the Linker only
loads them unless told to build.
"""
from __future__ import annotations

from pipelines.fields import option as _opt

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from linker.catalogue import AliasCandidate, AliasIndex, EntityCatalogue, corpus_fingerprint, read_alias_index, read_catalogue
from linker.index import EncodingsMeta, EncodingsWriter, IndexConfig, load_encodings, open_index, read_meta
from linker.inputs import ContextText, cross_ids
from linker.mentions import DetectedSpan, DetectorConfig, MentionDetector

log = logging.getLogger(__name__)

BLINK_SOURCE = "blink"




@dataclass
class LinkerConfig:
    model: str = _opt("", "model folder: biencoder*.bin + .json, vocab.txt, optional crossencoder*.bin (BLINK's release or linker.train's output)")
    corpus: str = _opt("", "corpus output folder (OUT): entity_vocab/, entity_descriptions/, alias_table/, manifest.json")
    vocab: str = _opt("", "WordPiece vocab.txt when not in the model folder (bert-large-uncased's for BLINK's release)")
    encodings: str = _opt("", "folder of the saved entity encodings; '': MODEL/entity_encodings/<corpus fingerprint>")
    top_k: int = _opt(10, "entities retrieved per mention by the bi-encoder")
    alias_candidates: int = _opt(5, "best-prior alias-table entities added to the retrieved ones (0: none)")
    crossencoder: str = _opt("auto", "re-rank with the model folder's cross-encoder: auto (when present), yes, no")
    rerank_top_k: int = _opt(10, "candidates the cross-encoder re-scores")
    batch_size: int = _opt(32, "mention contexts per bi-encoder batch")
    encode_batch_size: int = _opt(64, "entity descriptions per batch when building encodings")
    alias_min_count: int = _opt(0, "alias-table anchors used fewer times are ignored (titles and redirects are kept)")
    torch_threads: int = _opt(0, "torch CPU threads; 0: torch's default (use 1 per worker when workers share cores)")
    device: str = _opt("cpu", "torch device of the models: cpu, cuda, cuda:1, or auto")
    index: IndexConfig = field(default_factory=IndexConfig, metadata={"help": "candidate index"})
    detector: DetectorConfig = field(default_factory=DetectorConfig, metadata={"help": "mention detection"})

    def validate(self) -> None:
        if not self.model:
            raise ValueError("--model is required (a folder with biencoder*.bin)")
        if not self.corpus:
            raise ValueError("--corpus is required (a corpus output folder)")
        if self.crossencoder not in ("auto", "yes", "no"):
            raise ValueError("--crossencoder must be auto, yes or no")
        if self.top_k < 1:
            raise ValueError("--top_k must be >= 1")


@dataclass(frozen=True, slots=True)
class LinkedMention:
    start: int
    end: int
    surface: str
    entity_id: int
    entity: str
    score: float  # softmax probability of the chosen entity over the scored candidates
    logit: float  # its raw score (dot product, or cross-encoder logit)
    origin: str = ""  # how the span was found: "alias", "ner", "given"


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max())
    return z / z.sum()


def rank(candidates: list[int], scores: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Candidates and scores sorted best first (stable: ties keep retrieval order)."""
    order = np.argsort(-scores, kind="stable")
    return [candidates[i] for i in order], scores[order]


def merge_candidates(retrieved_rows: Sequence[int], alias_rows: Sequence[int]) -> list[int]:
    """Retrieved rows first (best first), then alias rows not already there."""
    seen = dict.fromkeys(int(r) for r in retrieved_rows if r >= 0)
    for r in alias_rows:
        seen.setdefault(int(r), None)
    return list(seen)


def encodings_folder(config: LinkerConfig, fingerprint: str) -> str:
    return config.encodings or os.path.join(config.model, "entity_encodings", fingerprint)


def quick_digest(path: str, edge: int = 8 << 20) -> str:
    """Size plus sha256 of the first and last 8 MB: tells weight files apart without reading GBs."""
    import hashlib

    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(edge))
        if size > 2 * edge:
            fh.seek(size - edge)
            digest.update(fh.read(edge))
    return digest.hexdigest()[:16]


def encode_catalogue(biencoder, catalogue: EntityCatalogue, batch_size: int, out: np.ndarray | None = None,
                     chunk_entities: int = 8192) -> np.ndarray:
    """Candidate encodings of every entity (title + description), float32 [n, dim], into ``out``
    when given (e.g. a memory map); tokenised chunk by chunk to bound memory."""
    from linker.biencoder import encode_in_batches, model_device

    n = len(catalogue)
    out = np.empty((n, biencoder.model.dim), dtype=np.float32) if out is None else out
    for lo in range(0, n, chunk_entities):
        hi = min(n, lo + chunk_entities)
        ids = biencoder.inputs.candidates(catalogue.titles[lo:hi], catalogue.descriptions[lo:hi])
        out[lo:hi] = encode_in_batches(biencoder.model.encode_candidate, ids, batch_size,
                                       biencoder.inputs.special.pad, model_device(biencoder.model))
        if n > chunk_entities:
            log.info("encoded %d / %d entities", hi, n)
    return out


def prepare_encodings(config: LinkerConfig, biencoder=None, catalogue: EntityCatalogue | None = None,
                      rebuild: bool = False) -> str:
    """Build (or reuse) the saved entity encodings of (model, corpus); returns their folder."""
    from linker.biencoder import load_biencoder

    if biencoder is None:
        from linker.biencoder import resolve_device

        biencoder = load_biencoder(config.model, config.vocab or None)
        biencoder.model.to(resolve_device(config.device))
    fingerprint = corpus_fingerprint(config.corpus)
    folder = encodings_folder(config, fingerprint)
    expected_model = quick_digest(biencoder.weights_path)
    meta = read_meta(folder)
    if meta and not rebuild and meta.model_digest == expected_model and meta.corpus_fingerprint == fingerprint:
        log.info("reusing entity encodings in %s", folder)
        return folder
    catalogue = catalogue or read_catalogue(config.corpus)
    log.info("encoding %d entities with %s", len(catalogue), biencoder.weights_path)
    writer = EncodingsWriter(folder, len(catalogue), biencoder.model.dim)
    encode_catalogue(biencoder, catalogue, config.encode_batch_size, out=writer.array)
    writer.commit(catalogue.entity_ids, EncodingsMeta(expected_model, fingerprint, len(catalogue), biencoder.model.dim,
                                                      biencoder.params.max_cand_length))
    return folder


class Linker:
    """BLINK entity linking over a corpus's entity vocabulary."""

    def __init__(self, config: LinkerConfig, build_encodings: bool = True) -> None:
        import torch

        from linker.biencoder import load_biencoder
        from linker.crossencoder import load_crossencoder

        config.validate()
        self.config = config
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        from linker.biencoder import resolve_device

        self.device = resolve_device(config.device)
        self.biencoder = load_biencoder(config.model, config.vocab or None)
        self.biencoder.model.to(self.device)
        self.catalogue = read_catalogue(config.corpus)
        folder = self._encodings(build_encodings)
        self.encodings, entity_ids = load_encodings(folder)
        if not np.array_equal(entity_ids, self.catalogue.entity_ids):
            raise ValueError(f"{folder} does not match the corpus's entity vocabulary; rebuild it (linker.cli index)")
        self.index = open_index(folder, self.encodings, config.index)
        self.aliases: AliasIndex = read_alias_index(config.corpus, self.catalogue.id_of_title(), config.alias_min_count)
        self.crossencoder = None if config.crossencoder == "no" else load_crossencoder(config.model, config.vocab or None)
        if self.crossencoder is not None:
            self.crossencoder.model.to(self.device)
        if config.crossencoder == "yes" and self.crossencoder is None:
            raise FileNotFoundError(f"--crossencoder yes but no crossencoder*.bin in {config.model}")
        self._cross_candidates: OrderedDict[int, list[int]] = OrderedDict()
        self._detector: MentionDetector | None = None

    def _encodings(self, build: bool) -> str:
        fingerprint = corpus_fingerprint(self.config.corpus)
        folder = encodings_folder(self.config, fingerprint)
        meta = read_meta(folder)
        fresh = (meta is not None and meta.corpus_fingerprint == fingerprint
                 and meta.model_digest == quick_digest(self.biencoder.weights_path))
        if fresh:
            return folder
        if not build:
            raise FileNotFoundError(
                f"no up-to-date entity encodings in {folder}: run "
                f"`python -m linker.cli index --model {self.config.model} --corpus {self.config.corpus}` first")
        return prepare_encodings(self.config, self.biencoder, self.catalogue, rebuild=True)

    @property
    def detector(self) -> MentionDetector:
        if self._detector is None:
            self._detector = MentionDetector(self.aliases, self.config.detector)
        return self._detector

    # ------------------------------------------------------------------ linking

    def detect(self, text: str, blocked: Sequence[tuple[int, int]] = ()) -> list[DetectedSpan]:
        return self.detector.detect(text, blocked)

    def link_text(self, text: str, blocked: Sequence[tuple[int, int]] = ()) -> list[LinkedMention]:
        """Detect mentions in ``text`` (avoiding ``blocked`` spans) and link them."""
        return self.link_spans(text, self.detect(text, blocked))

    def link_spans(self, text: str, spans: Sequence[DetectedSpan | tuple[int, int]]) -> list[LinkedMention]:
        return self.link_batch([(text, spans)])[0]

    def link_batch(self, items: Sequence[tuple[str, Sequence[DetectedSpan | tuple[int, int]]]]) -> list[list[LinkedMention]]:
        """Link the given spans of several texts in shared bi-encoder batches."""
        flat: list[tuple[int, DetectedSpan]] = []
        for i, (text, spans) in enumerate(items):
            for span in spans:
                if not isinstance(span, DetectedSpan):
                    start, end = span
                    span = DetectedSpan(start, end, text[start:end], "given", self.aliases.lookup(text[start:end]))
                flat.append((i, span))
        results: list[list[LinkedMention]] = [[] for _ in items]
        for lo in range(0, len(flat), self.config.batch_size):
            chunk = flat[lo: lo + self.config.batch_size]
            contexts = [self.biencoder.inputs.context_of_span(items[i][0], s.start, s.end) for i, s in chunk]
            for (i, _), linked in zip(chunk, self._link_contexts(contexts, [s for _, s in chunk])):
                if linked is not None:
                    results[i].append(linked)
        return results

    def encode_contexts(self, contexts: Sequence[ContextText]) -> np.ndarray:
        """Context-encoder vectors of mention contexts, float32 [n, dim]."""
        from linker.biencoder import encode_in_batches

        ids = self.biencoder.inputs.contexts(contexts)
        return encode_in_batches(self.biencoder.model.encode_context, ids, self.config.batch_size,
                                 self.biencoder.inputs.special.pad, self.device)

    def _link_contexts(self, contexts: Sequence[ContextText], spans: Sequence[DetectedSpan]) -> list[LinkedMention | None]:
        queries = self.encode_contexts(contexts)
        _, rows = self.index.search(queries, self.config.top_k)
        ranked: list[tuple[list[int], np.ndarray] | None] = []
        for q, (query, span) in enumerate(zip(queries, spans)):
            candidates = merge_candidates(rows[q], self._alias_rows(span.candidates))
            if not candidates:
                ranked.append(None)
                continue
            scores = np.asarray(self.encodings[np.array(candidates)], dtype=np.float32) @ query
            ranked.append(rank(candidates, scores))
        if self.crossencoder is not None:
            ranked = self._rerank(contexts, ranked)
        out: list[LinkedMention | None] = []
        for span, entry in zip(spans, ranked):
            if entry is None:
                out.append(None)
                continue
            candidates, scores = entry
            best = candidates[0]
            out.append(LinkedMention(
                start=span.start, end=span.end, surface=span.surface,
                entity_id=int(self.catalogue.entity_ids[best]), entity=self.catalogue.titles[best],
                score=float(softmax(scores.astype(np.float64))[0]), logit=float(scores[0]), origin=span.origin))
        return out

    def _rerank(self, contexts: Sequence[ContextText], ranked: list) -> list:
        """Cross-encoder logits for the top ``rerank_top_k`` of every mention, all pairs in shared batches."""
        cross = self.crossencoder
        context_ids = cross.inputs.contexts(contexts)
        pairs, owners = [], []
        for q, entry in enumerate(ranked):
            if entry is not None:
                for row in entry[0][: self.config.rerank_top_k]:
                    pairs.append(cross_ids(context_ids[q], self._cross_candidate(row), cross.params.max_seq_length))
                    owners.append(q)
        logits = cross.model.score_pairs(pairs, batch_size=self.config.batch_size)
        out, at = [], 0
        for entry in ranked:
            if entry is None:
                out.append(None)
                continue
            top = entry[0][: self.config.rerank_top_k]
            out.append(rank(top, logits[at: at + len(top)]))
            at += len(top)
        return out

    def _alias_rows(self, candidates: Sequence[AliasCandidate]) -> list[int]:
        rows = []
        for cand in candidates[: self.config.alias_candidates]:
            row = self.catalogue.row_of_id(cand.entity_id)
            if row is not None:
                rows.append(row)
        return rows

    def _cross_candidate(self, row: int, cache_size: int = 100_000) -> list[int]:
        ids = self._cross_candidates.get(row)
        if ids is None:
            ids = self.crossencoder.inputs.candidates([self.catalogue.titles[row]], [self.catalogue.descriptions[row]])[0]
            self._cross_candidates[row] = ids
            if len(self._cross_candidates) > cache_size:
                self._cross_candidates.popitem(last=False)
        else:
            self._cross_candidates.move_to_end(row)
        return ids
