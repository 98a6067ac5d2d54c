"""The Linker: detect mentions, retrieve candidates, (re-rank), combine with the alias prior.

For each mention span:

1. its BLINK context (``[CLS] left [unused0] mention [unused1] right [SEP]``)
   is encoded by the bi-encoder's context encoder;
2. the ``top_k`` entities with the highest dot product are retrieved from the
   knowledge base (the corpus's entities, or BLINK's released KB with
   ``--kb blink:DIR``); this is BLINK's own top-k, scores included;
3. the alias table's ``alias_candidates`` most linked entities for the surface
   form join them (the first-stage candidate list);
4. optionally (not with ``--fast``), the cross-encoder scores the bi-encoder's
   ``rerank_top_k`` and the alias candidates, as BLINK re-ranks its top-k;
5. the final score combines the model's scores with the alias prior (see
   :mod:`linker.combine`): ``score`` is the chosen entity's probability, and a
   mention is linked when it reaches ``threshold``.

Everything the workers read is prepared once, on the machine that launches a
job (:func:`prepare_linker`, also ``python -m linker.cli index``), into one
folder (``--encodings``; default: ``MODEL/entity_encodings/<corpus
fingerprint>`` for the corpus's entities, ``DIR/wikiedm/<corpus fingerprint>``
or ``~/.cache/wikiedm/...`` for a BLINK KB)::

    kb/                 the knowledge base, memory-mapped (linker.kb)
    encodings.npy, entity_ids.npy, meta.json, hnsw.faiss   entity encodings (corpus KB) and index
    aliases-*/          the alias candidate index(es), memory-mapped (linker.alias_index)
    combiner-*.json     the fitted combination(s) (linker.combine)

Workers open it with memory maps: no worker loads the alias table, the entity
descriptions or BLINK's 24 GB of encodings into its own memory.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from linker.catalogue import AliasCandidate, EntityCatalogue, corpus_fingerprint
from linker.combine import COMBINED, PRIOR, CandidateSet, Combiner, fit_combiner, fit_example, read_combiner
from linker.index import EncodingsMeta, EncodingsWriter, IndexConfig, load_encodings, open_index, read_meta
from linker.inputs import ContextText, cross_ids
from linker.mentions import DetectedSpan, DetectorConfig, MentionDetector
from wikiedm.config import FALSE_WORDS, TRUE_WORDS
from wikiedm.fields import option

log = logging.getLogger(__name__)

BLINK_SOURCE = "blink"
MODEL = "model"
COMBINER_CHOICES = ("fitted", "default", PRIOR, MODEL)
ALIASES_DIR = "aliases"
KB_DIR = "kb"


@dataclass
class LinkerConfig:
    model: str = option("", "model folder: biencoder*.bin + .json, vocab.txt, optional crossencoder*.bin (BLINK's release or linker.train's output)", path="dir")
    corpus: str = option("", "corpus output folder (OUT): entity_vocab/, entity_descriptions/, alias_table/, passages/ (optional with --kb blink:DIR)", path="corpus")
    kb: str = option("", "knowledge base: '' = the corpus's entities (encoded by the model); blink:DIR = BLINK's entity.jsonl + all_entities_large.t7 (+ faiss_*_index.pkl) used as they are")
    kb_unmapped: str = option("drop", "BLINK entities with no corpus entity (by title or redirect): drop (not linkable) or keep (linked under their BLINK title, entity_id -1)")
    vocab: str = option("", "WordPiece vocab.txt when not in the model folder (bert-large-uncased's for BLINK's release)", path="file")
    encodings: str = option("", "folder of everything prepared for the workers; '': MODEL/entity_encodings/<corpus fingerprint> (corpus KB), DIR/wikiedm/<corpus fingerprint> (BLINK KB)")
    top_k: int = option(10, "entities retrieved per mention by the bi-encoder (BLINK's top_k)")
    alias_candidates: int = option(5, "most linked alias-table entities added to the retrieved ones (0: none)")
    crossencoder: str = option("auto", "re-rank with the model folder's cross-encoder: auto (when present), true, false")
    fast: bool = option(False, "bi-encoder only, as BLINK's --fast (same as --crossencoder false)")
    rerank_top_k: int = option(10, "bi-encoder candidates the cross-encoder re-scores (with the alias candidates)")
    combiner: str = option("fitted", "final score: fitted (model + prior, weights fitted on the corpus's validation hyperlinks), default (unfitted weights), prior (alias prior, model when none), model (BLINK's ranking alone)")
    fit_mentions: int = option(2000, "validation hyperlinks the combination is fitted on (0: all)")
    threshold: float = option(0.5, "least final probability of a linked mention (link, link_mentions and the corpus job's BLINK labels)")
    batch_size: int = option(32, "mention contexts per bi-encoder batch")
    encode_batch_size: int = option(64, "entity descriptions per batch when building encodings")
    alias_min_count: int = option(0, "alias-table anchors used fewer times are ignored (titles and redirects are kept)")
    alias_top_k: int = option(64, "aliases kept per entity in the alias candidate index (titles and redirects first, then the most linked)")
    alias_max_candidates: int = option(64, "entities kept per alias in the alias candidate index (most linked first)")
    torch_threads: int = option(0, "torch CPU threads; 0: torch's default (use 1 per worker when workers share cores)")
    device: str = option("auto", "torch device of the models: auto (CUDA when available), cpu, cuda, cuda:1")
    index: IndexConfig = option(IndexConfig(), "candidate index")
    detector: DetectorConfig = option(DetectorConfig(), "mention detection")

    def __post_init__(self) -> None:
        # --crossencoder true|false (the one boolean rule; a YAML `no` too) is kept as yes|no, the form the
        # linker, its configs and the jobs' recorded configs use
        word = str(self.crossencoder).strip().lower()
        if word != "auto" and (word in TRUE_WORDS or word in FALSE_WORDS):
            self.crossencoder = "yes" if word in TRUE_WORDS else "no"

    def validate(self) -> None:
        from linker.kb import parse_kb_spec

        if not self.model:
            raise ValueError("--model is required (a folder with biencoder*.bin)")
        kind, _ = parse_kb_spec(self.kb)
        if not self.corpus and kind != "blink":
            raise ValueError("--corpus is required (a corpus output folder) unless --kb blink:DIR is given")
        if self.crossencoder not in ("auto", "yes", "no"):
            raise ValueError(f"--crossencoder must be auto, true or false, got {self.crossencoder!r}")
        if self.fast and self.crossencoder == "yes":
            raise ValueError("--fast true and --crossencoder true contradict each other")
        if self.top_k < 1:
            raise ValueError("--top_k must be >= 1")
        if self.combiner not in COMBINER_CHOICES:
            raise ValueError(f"--combiner must be one of {', '.join(COMBINER_CHOICES)}")
        if self.kb_unmapped not in ("drop", "keep"):
            raise ValueError("--kb_unmapped must be drop or keep")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError("--threshold is a probability in [0, 1]")
        if self.alias_top_k < 1 or self.alias_max_candidates < 1:
            raise ValueError("--alias_top_k and --alias_max_candidates must be >= 1")

    @property
    def use_crossencoder(self) -> str:
        return "no" if self.fast else self.crossencoder


@dataclass(frozen=True, slots=True)
class LinkedMention:
    start: int
    end: int
    surface: str
    entity_id: int  # the corpus's entity id; -1 for a BLINK entity outside the corpus vocabulary
    entity: str  # the corpus's title (BLINK's title when unmapped)
    score: float  # the final probability of the chosen entity (see linker.combine)
    logit: float  # its raw model score (dot product, or cross-encoder logit)
    origin: str = ""  # how the span was found: "alias", "ner", "given"
    kb_row: int = -1
    wikipedia_id: int = -1  # BLINK's curid (BLINK KB), -1 otherwise


@dataclass
class MentionResult:
    """Everything the linker computed for one mention."""

    span: DetectedSpan
    retrieved_rows: np.ndarray  # BLINK's bi-encoder top-k, best first
    retrieved_scores: np.ndarray  # their dot products
    candidates: CandidateSet  # retrieved + alias candidates, with every score
    order: np.ndarray  # final ranking (positions in candidates), best first
    probs: np.ndarray  # final probabilities, in that order

    def best(self) -> int | None:
        return int(self.order[0]) if len(self.order) else None

    def crossencoder_ranking(self, rerank_top_k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """BLINK's re-ranking: the bi-encoder top-k sorted by cross-encoder logit (rows, logits)."""
        cs = self.candidates
        if cs.crossencoder is None:
            return None
        position = {int(r): i for i, r in enumerate(cs.rows)}
        top = [int(r) for r in self.retrieved_rows[:rerank_top_k] if int(r) in position]
        logits = np.array([cs.crossencoder[position[r]] for r in top], dtype=np.float32)
        order = np.argsort(logits, kind="stable")[::-1]
        return np.array(top, dtype=np.int64)[order], logits[order]


def merge_candidates(retrieved_rows: Sequence[int], alias_rows: Sequence[int]) -> list[int]:
    """Retrieved rows first (best first), then alias rows not already there."""
    seen = dict.fromkeys(int(r) for r in retrieved_rows if r >= 0)
    for r in alias_rows:
        seen.setdefault(int(r), None)
    return list(seen)


def quick_digest(path: str, edge: int = 8 << 20) -> str:
    """Size plus sha256 of the first and last 8 MB: tells weight files apart without reading GBs."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(edge))
        if size > 2 * edge:
            fh.seek(size - edge)
            digest.update(fh.read(edge))
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------- the prepared folder


def _writable(folder: str) -> bool:
    probe = folder
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK)


def encodings_folder(config: LinkerConfig, fingerprint: str) -> str:
    """Where everything prepared for (model, KB, corpus) lives."""
    from linker.kb import parse_kb_spec

    if config.encodings:
        return config.encodings
    kind, blink_dir = parse_kb_spec(config.kb)
    if kind == "corpus":
        return os.path.join(config.model, "entity_encodings", fingerprint)
    name = fingerprint or "no-corpus"
    beside = os.path.join(blink_dir, "wikiedm", name)
    if _writable(beside):
        return beside
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(os.path.abspath(blink_dir).encode()).hexdigest()[:12]
    return os.path.join(cache, "wikiedm", "blink-kb", key, name)


def _fingerprint(config: LinkerConfig) -> str:
    return corpus_fingerprint(config.corpus) if config.corpus else ""


def _kb_is_fresh(config: LinkerConfig, meta: dict | None, fingerprint: str) -> bool:
    from linker.kb import blink_kb_is_fresh, parse_kb_spec

    kind, blink_dir = parse_kb_spec(config.kb)
    if kind == "blink":
        return blink_kb_is_fresh(meta, blink_dir, fingerprint)
    return bool(meta) and meta.get("kind") == "corpus" and (meta.get("corpus") or {}).get("fingerprint") == fingerprint


def ensure_kb(config: LinkerConfig, folder: str, fingerprint: str, build: bool, rebuild: bool = False):
    """The KB of ``folder`` (built when missing or stale and ``build``)."""
    from linker.kb import build_blink_kb, build_corpus_kb, open_kb, parse_kb_spec, read_kb_meta

    kb_folder = os.path.join(folder, KB_DIR)
    if not rebuild and _kb_is_fresh(config, read_kb_meta(kb_folder), fingerprint):
        return open_kb(kb_folder)
    if not build:
        raise FileNotFoundError(f"no up-to-date knowledge base in {kb_folder}: run "
                                f"`python -m linker.cli index --model {config.model} ...` first")
    kind, blink_dir = parse_kb_spec(config.kb)
    if kind == "blink":
        log.info("indexing BLINK's knowledge base in %s", blink_dir)
        return build_blink_kb(blink_dir, kb_folder, config.corpus, fingerprint)
    log.info("indexing the corpus's entities of %s", config.corpus)
    return build_corpus_kb(config.corpus, kb_folder, fingerprint)


def alias_settings(config: LinkerConfig):
    from linker.alias_index import AliasIndexSettings

    return AliasIndexSettings(config.alias_min_count, config.alias_top_k, config.alias_max_candidates)


def aliases_folder(folder: str, settings: dict) -> str:
    """``aliases-<digest of the settings>``: indexes built with other caps live side by side."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(folder, f"{ALIASES_DIR}-{digest}")


def ensure_aliases(config: LinkerConfig, folder: str, fingerprint: str, build: bool, rebuild: bool = False):
    """The alias candidate index (None without a corpus)."""
    from linker.alias_index import MappedAliasIndex, build_alias_index, read_alias_meta

    if not config.corpus:
        return None
    settings = alias_settings(config).to_dict()
    alias_folder = aliases_folder(folder, settings)
    meta = read_alias_meta(alias_folder)
    if rebuild or not meta or meta["corpus_fingerprint"] != fingerprint or meta["settings"] != settings:
        if not build:
            raise FileNotFoundError(f"no up-to-date alias candidate index in {alias_folder}: run "
                                    "`python -m linker.cli index` first")
        build_alias_index(config.corpus, alias_folder, alias_settings(config), fingerprint)
    return MappedAliasIndex(alias_folder)


def encode_catalogue(biencoder, catalogue, batch_size: int, out: np.ndarray | None = None,
                     chunk_entities: int = 8192) -> np.ndarray:
    """Candidate encodings of every entity (title + description), float32 [n, dim], into ``out``
    when given (e.g. a memory map); tokenised chunk by chunk to bound memory. ``catalogue``: an
    EntityCatalogue or a KnowledgeBase."""
    from linker.biencoder import encode_in_batches, model_device

    n = len(catalogue)
    out = np.empty((n, biencoder.model.dim), dtype=np.float32) if out is None else out
    for lo in range(0, n, chunk_entities):
        hi = min(n, lo + chunk_entities)
        if isinstance(catalogue, EntityCatalogue):
            titles, texts = catalogue.titles[lo:hi], catalogue.descriptions[lo:hi]
        else:
            titles, texts = catalogue.titles.slice(lo, hi), [t.strip() for t in catalogue.texts.slice(lo, hi)]
        ids = biencoder.inputs.candidates(titles, texts)
        out[lo:hi] = encode_in_batches(biencoder.model.encode_candidate, ids, batch_size,
                                       biencoder.inputs.special.pad, model_device(biencoder.model))
        if n > chunk_entities:
            log.info("encoded %d / %d entities", hi, n)
    return out


def ensure_encodings(config: LinkerConfig, folder: str, kb, biencoder, fingerprint: str, build: bool,
                     rebuild: bool = False) -> np.ndarray:
    """The entity encodings: BLINK's .t7 (mapped), or the corpus KB's encodings.npy (built by the model)."""
    if kb.kind == "blink":
        if kb.encodings.shape[1] != biencoder.model.dim:
            raise ValueError(f"BLINK's encodings are {kb.encodings.shape[1]}-dimensional, the bi-encoder's "
                             f"{biencoder.model.dim}: not this model's KB")
        return kb.encodings
    expected = quick_digest(biencoder.weights_path)
    meta = read_meta(folder)
    fresh = meta is not None and meta.corpus_fingerprint == fingerprint and meta.model_digest == expected
    if rebuild or not fresh:
        if not build:
            raise FileNotFoundError(
                f"no up-to-date entity encodings in {folder}: run "
                f"`python -m linker.cli index --model {config.model} --corpus {config.corpus}` first")
        log.info("encoding %d entities with %s", len(kb), biencoder.weights_path)
        writer = EncodingsWriter(folder, len(kb), biencoder.model.dim)
        encode_catalogue(biencoder, kb, config.encode_batch_size, out=writer.array)
        writer.commit(np.asarray(kb.entity_ids), EncodingsMeta(expected, fingerprint, len(kb), biencoder.model.dim,
                                                               biencoder.params.max_cand_length))
    encodings, entity_ids = load_encodings(folder)
    if not np.array_equal(entity_ids, kb.entity_ids):
        raise ValueError(f"{folder} does not match the corpus's entity vocabulary; rebuild it (linker.cli index)")
    return encodings


def combiner_identity(config: LinkerConfig, biencoder, crossencoder, kb, fingerprint: str) -> dict:
    """What a fitted combination depends on: a change of any of these refits it."""
    return {
        "biencoder": quick_digest(biencoder.weights_path) if biencoder.weights_path else "",
        "crossencoder": quick_digest(crossencoder.weights_path) if crossencoder is not None else None,
        "kb": {k: kb.meta.get(k) for k in ("kind", "count", "catalogue", "encodings_file")},
        "corpus": fingerprint,
        "aliases": alias_settings(config).to_dict(),
        "candidates": {"top_k": config.top_k, "alias_candidates": config.alias_candidates,
                       "rerank_top_k": config.rerank_top_k, "kb_unmapped": config.kb_unmapped},
        "fit_mentions": config.fit_mentions,
    }


def prepare_linker(config: LinkerConfig, rebuild: bool = False, biencoder=None) -> str:
    """Build (or reuse) everything the workers read, once: KB, encodings, index, alias index,
    fitted combination. Returns the folder."""
    linker = Linker(config, build_encodings=True, rebuild=rebuild, biencoder=biencoder)
    return linker.folder


prepare_encodings = prepare_linker  # the name the jobs have called since the first version


class Linker:
    """BLINK entity linking over a knowledge base, combined with the corpus's alias prior."""

    def __init__(self, config: LinkerConfig, build_encodings: bool = True, rebuild: bool = False,
                 biencoder=None) -> None:
        import torch

        from linker.biencoder import load_biencoder, resolve_device
        from linker.crossencoder import load_crossencoder

        config.validate()
        self.config = config
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        self.device = resolve_device(config.device)
        self.biencoder = biencoder or load_biencoder(config.model, config.vocab or None)
        self.biencoder.model.to(self.device)
        use_cross = config.use_crossencoder
        self.crossencoder = None if use_cross == "no" else load_crossencoder(config.model, config.vocab or None)
        if use_cross == "yes" and self.crossencoder is None:
            raise FileNotFoundError(f"--crossencoder yes but no crossencoder*.bin in {config.model}")
        if self.crossencoder is not None:
            self.crossencoder.model.to(self.device)

        fingerprint = _fingerprint(config)
        self.folder = encodings_folder(config, fingerprint)
        build = build_encodings
        self.kb = ensure_kb(config, self.folder, fingerprint, build, rebuild)
        self.encodings = ensure_encodings(config, self.folder, self.kb, self.biencoder, fingerprint, build, rebuild)
        blink_files = ({k: v["path"] for k, v in self.kb.meta.get("faiss", {}).items()}
                       if self.kb.kind == "blink" else None)
        self.index = open_index(self.folder, self.encodings, config.index, blink_files=blink_files, build=build)
        self.aliases = ensure_aliases(config, self.folder, fingerprint, build, rebuild)
        self.linkable = self._linkable_rows()
        self._cross_candidates: OrderedDict[int, list[int]] = OrderedDict()
        self._detector: MentionDetector | None = None
        self.combiner = self._combiner(fingerprint, build, rebuild)

    def _linkable_rows(self) -> np.ndarray | None:
        """Rows that may be linked (None: all): BLINK rows without a corpus entity are dropped unless kept."""
        if self.kb.kind == "blink" and self.config.corpus and self.config.kb_unmapped == "drop":
            return np.asarray(self.kb.entity_ids) >= 0
        return None

    def _combiner(self, fingerprint: str, build: bool, rebuild: bool) -> Combiner:
        choice = self.config.combiner
        if choice == PRIOR:
            return Combiner(PRIOR)
        model_only = Combiner(COMBINED, {"crossencoder": 1.0} if self.crossencoder else {"biencoder": 1.0})
        if choice == MODEL or not self.config.corpus:  # without a corpus there is no prior: BLINK's own ranking
            return model_only
        default = Combiner(COMBINED, {**Combiner().weights, **({} if self.crossencoder else {"crossencoder": 0.0})})
        if choice == "default":
            return default
        identity = combiner_identity(self.config, self.biencoder, self.crossencoder, self.kb, fingerprint)
        saved = read_combiner(self.folder, identity)
        if saved is not None and not rebuild:
            return saved
        if not build:
            raise FileNotFoundError(f"no up-to-date fitted combination in {self.folder}: run "
                                    "`python -m linker.cli index` first (or --combiner default)")
        self.combiner = default
        fitted = self.fit_combiner()
        fitted.identity = identity
        fitted.save(self.folder)
        return fitted

    def fit_combiner(self, examples=None) -> Combiner:
        """Fit the combination on the corpus's validation hyperlinks (the train split's when the
        validation split has none; ``examples``: MentionExamples to use instead)."""
        from linker.corpus_data import examples_with_fallback

        split = "given"
        if examples is None:
            split, examples = examples_with_fallback(self.config.corpus, limit=self.config.fit_mentions)
        examples = [ex for ex in examples if self.kb.row_of_entity_id(ex.entity_id) >= 0]
        results = self.rank_examples(examples)
        fit_data = [fit_example(r.candidates, ex.entity_id) for ex, r in zip(examples, results)]
        combiner = fit_combiner(fit_data, use_crossencoder=self.crossencoder is not None)
        combiner.report["split"] = split
        return combiner

    @property
    def detector(self) -> MentionDetector:
        if self._detector is None:
            self._detector = MentionDetector(self.aliases, self.config.detector)
        return self._detector

    @property
    def catalogue(self):
        return self.kb

    # ------------------------------------------------------------------ linking

    def detect(self, text: str, blocked: Sequence[tuple[int, int]] = ()) -> list[DetectedSpan]:
        return self.detector.detect(text, blocked)

    def link_text(self, text: str, blocked: Sequence[tuple[int, int]] = ()) -> list[LinkedMention]:
        """Detect mentions in ``text`` (avoiding ``blocked`` spans) and link them (every score; see
        :meth:`accepted` for the threshold)."""
        return self.link_spans(text, self.detect(text, blocked))

    def link_spans(self, text: str, spans: Sequence[DetectedSpan | tuple[int, int]]) -> list[LinkedMention]:
        return self.link_batch([(text, spans)])[0]

    def accepted(self, mention: LinkedMention) -> bool:
        return mention.score >= self.config.threshold

    def span_of(self, text: str, span: DetectedSpan | tuple[int, int]) -> DetectedSpan:
        if isinstance(span, DetectedSpan):
            return span
        start, end = span
        surface = text[start:end]
        return DetectedSpan(start, end, surface, "given", self.alias_candidates(surface))

    def alias_candidates(self, surface: str) -> tuple[AliasCandidate, ...]:
        return self.aliases.lookup(surface) if self.aliases is not None else ()

    def link_batch(self, items: Sequence[tuple[str, Sequence[DetectedSpan | tuple[int, int]]]]) -> list[list[LinkedMention]]:
        """Link the given spans of several texts in shared bi-encoder batches."""
        flat = [(i, self.span_of(text, span)) for i, (text, spans) in enumerate(items) for span in spans]
        results: list[list[LinkedMention]] = [[] for _ in items]
        contexts = [self.biencoder.inputs.context_of_span(items[i][0], s.start, s.end) for i, s in flat]
        for (i, _), result in zip(flat, self.rank_contexts(contexts, [s for _, s in flat])):
            linked = self.linked_mention(result)
            if linked is not None:
                results[i].append(linked)
        return results

    def linked_mention(self, result: MentionResult) -> LinkedMention | None:
        best = result.best()
        if best is None:
            return None
        cs, span = result.candidates, result.span
        row = int(cs.rows[best])
        return LinkedMention(
            start=span.start, end=span.end, surface=span.surface, entity_id=int(cs.entity_ids[best]),
            entity=self.entity_title(row), score=float(result.probs[0]), logit=float(cs.model_scores()[best]),
            origin=span.origin, kb_row=row, wikipedia_id=int(self.kb.wikipedia_ids[row]))

    def entity_title(self, row: int) -> str:
        """The corpus's title of a KB row (BLINK's own title when it maps to no corpus entity)."""
        return self.kb.entity_title(row)

    def rank_examples(self, examples) -> list[MentionResult]:
        """Rank the candidates of corpus MentionExamples (gold spans with their anchor text)."""
        spans = [DetectedSpan(0, len(ex.surface), ex.surface, "given", self.alias_candidates(ex.surface)) for ex in examples]
        return self.rank_contexts([ex.context for ex in examples], spans)

    def encode_contexts(self, contexts: Sequence[ContextText]) -> np.ndarray:
        """Context-encoder vectors of mention contexts, float32 [n, dim]."""
        from linker.biencoder import encode_in_batches

        ids = self.biencoder.inputs.contexts(contexts)
        return encode_in_batches(self.biencoder.model.encode_context, ids, self.config.batch_size,
                                 self.biencoder.inputs.special.pad, self.device)

    def rank_contexts(self, contexts: Sequence[ContextText], spans: Sequence[DetectedSpan],
                      chunk: int = 256) -> list[MentionResult]:
        out: list[MentionResult] = []
        for lo in range(0, len(contexts), chunk):
            out.extend(self._rank_chunk(contexts[lo: lo + chunk], spans[lo: lo + chunk]))
        return out

    def _retrieve(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self.config.top_k
        if self.linkable is None:
            return self.index.search(queries, k)
        scores, rows = self.index.search(queries, min(len(self.encodings), 2 * k + 10))
        keep_scores = np.full((len(rows), k), -np.inf, dtype=np.float32)
        keep_rows = np.full((len(rows), k), -1, dtype=np.int64)
        for q in range(len(rows)):
            ok = [(s, r) for s, r in zip(scores[q], rows[q]) if r >= 0 and self.linkable[r]][:k]
            keep_scores[q, :len(ok)] = [s for s, _ in ok]
            keep_rows[q, :len(ok)] = [r for _, r in ok]
        return keep_scores, keep_rows

    def _rank_chunk(self, contexts: Sequence[ContextText], spans: Sequence[DetectedSpan]) -> list[MentionResult]:
        if not contexts:
            return []
        queries = self.encode_contexts(contexts)
        scores, rows = self._retrieve(queries)
        cross = self.crossencoder is not None
        sets = []
        for q, span in enumerate(spans):
            valid = rows[q] >= 0
            retrieved_rows, retrieved_scores = rows[q][valid], scores[q][valid]
            first_stage = retrieved_rows[: self.config.rerank_top_k] if cross else retrieved_rows
            alias = {}
            for cand in span.candidates[: self.config.alias_candidates]:
                row = self.kb.row_of_entity_id(cand.entity_id)
                if row >= 0:
                    alias.setdefault(row, cand)
            candidate_rows = self._dedupe(merge_candidates(first_stage, list(alias)))
            # every candidate's features: the alias table knows more than the first alias_candidates
            known = {c.entity_id: c for c in span.candidates}
            sets.append((span, retrieved_rows, retrieved_scores, candidate_rows, known))
        cross_logits = self._cross_scores(contexts, [s[3] for s in sets]) if cross else None
        out = []
        for q, (span, retrieved_rows, retrieved_scores, candidate_rows, known) in enumerate(sets):
            cs = self._candidate_set(queries[q], candidate_rows, known,
                                     cross_logits[q] if cross_logits is not None else None)
            order, probs = self.combiner.rank(cs)
            out.append(MentionResult(span, retrieved_rows, retrieved_scores, cs, order, probs))
        return out

    def _dedupe(self, rows: list[int]) -> list[int]:
        """One row per corpus entity (BLINK rows mapped onto the same entity: the first one)."""
        if self.kb.kind != "blink" or not self.kb.mapped:
            return rows
        seen, out = set(), []
        for r in rows:
            key = int(self.kb.entity_ids[r])
            key = key if key >= 0 else -(r + 1)
            if key not in seen:
                seen.add(key)
                out.append(r)
        return out

    def _candidate_set(self, query: np.ndarray, rows: list[int], known: dict, cross: np.ndarray | None) -> CandidateSet:
        rows_arr = np.asarray(rows, dtype=np.int64)
        entity_ids = np.asarray(self.kb.entity_ids[rows_arr], dtype=np.int64) if len(rows) else np.zeros(0, np.int64)
        bi = (np.asarray(self.encodings[rows_arr], dtype=np.float32) @ query if len(rows)
              else np.zeros(0, np.float32))
        cands = [known.get(int(e)) if e >= 0 else None for e in entity_ids]
        return CandidateSet(
            rows=rows_arr, entity_ids=entity_ids, biencoder=bi, crossencoder=cross,
            prior=np.array([c.prior if c else 0.0 for c in cands], dtype=np.float64),
            alias_count=np.array([c.count if c else 0 for c in cands], dtype=np.int64),
            in_alias=np.array([c is not None for c in cands], dtype=bool),
            is_name=np.array([bool(c and c.is_name) for c in cands], dtype=bool),
            popularity=np.asarray(self.kb.counts[rows_arr], dtype=np.int64) if len(rows) else np.zeros(0, np.int64),
        )

    def _cross_scores(self, contexts: Sequence[ContextText], candidate_rows: list[list[int]]) -> list[np.ndarray]:
        """Cross-encoder logits of every (mention, candidate) pair, all pairs in shared batches."""
        cross = self.crossencoder
        context_ids = cross.inputs.contexts(contexts)
        pairs = [cross_ids(context_ids[q], self._cross_candidate(row), cross.params.max_seq_length)
                 for q, rows in enumerate(candidate_rows) for row in rows]
        logits = cross.model.score_pairs(pairs, batch_size=self.config.batch_size) if pairs else np.zeros(0)
        out, at = [], 0
        for rows in candidate_rows:
            out.append(np.asarray(logits[at: at + len(rows)], dtype=np.float32))
            at += len(rows)
        return out

    def _cross_candidate(self, row: int, cache_size: int = 100_000) -> list[int]:
        ids = self._cross_candidates.get(row)
        if ids is None:
            ids = self.crossencoder.inputs.candidates([self.kb.title(row)], [self.kb.text(row).strip()])[0]
            self._cross_candidates[row] = ids
            if len(self._cross_candidates) > cache_size:
                self._cross_candidates.popitem(last=False)
        else:
            self._cross_candidates.move_to_end(row)
        return ids

