"""The linker's final score: the model's scores combined with the alias-table prior.

A BLINK model alone ranks candidates by a dot product (or a cross-encoder
logit). A small model trained on a small corpus ranks badly, while the alias
prior p(entity | surface) is a strong baseline on Wikipedia text. The linker
therefore scores each candidate ``c`` of a mention with a conditional logit::

    z(c) = w_bi    * log_softmax(bi-encoder scores)(c)
         + w_cross * log_softmax(cross-encoder logits)(c)        (when re-ranking)
         + w_prior * log(max(p(c | surface), 1e-4))              (0 prior: not an alias candidate)
         + w_name  * [the surface is a title or redirect of c]
         + w_count * log(1 + hyperlinks to c in the corpus)

    P(c | mention) = softmax(z)(c)      -> the linked entity is argmax; its P is the score

The weights are fitted on the corpus's validation hyperlinks (maximum
likelihood of the gold entity among the candidates, L2-regularised, Newton
steps). Then, on the same mentions, the fitted combination is compared with
the alias prior alone (``mode: prior``: the most linked entity of the
surface, ties by entity id, as the prior-only baseline ranks; the model
decides only when the surface has no alias candidate). The better one is
kept, so on the validation hyperlinks the linker's accuracy@1 is never below
the prior-only baseline's. The weights, both accuracies and a 2-fold
cross-fitted accuracy (fit on one half of the mentions, measured on the other)
are saved in ``combiner-<digest>.json`` (the digest of the model, KB, corpus and candidate
settings it was fitted for: a change of any refits it).

Without validation hyperlinks (no corpus, or an empty split) the default
weights are used: all 1 except ``w_count`` = 0 (the model's probability times
the prior), documented as unfitted in the file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

FEATURES = ("biencoder", "crossencoder", "log_prior", "is_name", "log_count")
DEFAULT_WEIGHTS = {"biencoder": 1.0, "crossencoder": 1.0, "log_prior": 1.0, "is_name": 1.0, "log_count": 0.0}
PRIOR_FLOOR = 1e-4
COMBINED, PRIOR = "combined", "prior"


@dataclass
class CandidateSet:
    """The candidates of one mention with everything the final score reads (aligned arrays)."""

    rows: np.ndarray  # KB rows
    entity_ids: np.ndarray  # corpus entity ids (-1: not in the corpus vocabulary)
    biencoder: np.ndarray  # raw dot products
    crossencoder: np.ndarray | None  # raw logits, or None without re-ranking
    prior: np.ndarray  # p(entity | surface); 0 when not an alias candidate
    alias_count: np.ndarray  # hyperlinks with the surface to the entity
    in_alias: np.ndarray  # bool: an alias-table candidate of the surface
    is_name: np.ndarray  # bool: the surface is a title or redirect of the entity
    popularity: np.ndarray  # hyperlinks to the entity in the corpus

    def __len__(self) -> int:
        return len(self.rows)

    def model_scores(self) -> np.ndarray:
        return self.crossencoder if self.crossencoder is not None else self.biencoder


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return x
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())


def features(cs: CandidateSet) -> np.ndarray:
    """[candidates, len(FEATURES)] feature matrix of a candidate set."""
    n = len(cs)
    out = np.zeros((n, len(FEATURES)), dtype=np.float64)
    if not n:
        return out
    out[:, 0] = log_softmax(cs.biencoder)
    if cs.crossencoder is not None:
        out[:, 1] = log_softmax(cs.crossencoder)
    out[:, 2] = np.log(np.maximum(np.asarray(cs.prior, dtype=np.float64), PRIOR_FLOOR))
    out[:, 3] = np.asarray(cs.is_name, dtype=np.float64)
    out[:, 4] = np.log1p(np.asarray(cs.popularity, dtype=np.float64))
    return out


def prior_order(cs: CandidateSet) -> np.ndarray:
    """The prior-only ranking: alias candidates by hyperlink count (ties: entity id), then the rest by model score."""
    model = np.asarray(cs.model_scores(), dtype=np.float64)
    alias_key = np.where(cs.in_alias, -np.asarray(cs.alias_count, dtype=np.float64), 0.0)
    id_key = np.where(cs.in_alias, cs.entity_ids, 0)
    model_key = np.where(cs.in_alias, 0.0, -model)
    return np.lexsort((np.arange(len(cs)), model_key, id_key, alias_key, ~np.asarray(cs.in_alias, dtype=bool)))


def softmax(z: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(z))


@dataclass
class Combiner:
    """The final ranking of a candidate set (see the module doc)."""

    mode: str = COMBINED
    weights: dict = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    fitted: bool = False
    report: dict = field(default_factory=dict)
    identity: dict = field(default_factory=dict)  # what it was fitted for (model, KB, corpus, aliases)

    def vector(self) -> np.ndarray:
        return np.array([self.weights.get(f, 0.0) for f in FEATURES], dtype=np.float64)

    def rank(self, cs: CandidateSet) -> tuple[np.ndarray, np.ndarray]:
        """(candidate positions best first, the probability of each, in that order)."""
        if not len(cs):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if self.mode == PRIOR:
            order = prior_order(cs)
            model_p = softmax(np.asarray(cs.model_scores(), dtype=np.float64))
            probs = np.where(cs.in_alias, cs.prior, model_p)[order]
            return order, probs.astype(np.float64)
        z = features(cs) @ self.vector()
        order = np.argsort(-z, kind="stable")
        return order, softmax(z)[order]

    def to_dict(self) -> dict:
        return {"mode": self.mode, "weights": self.weights, "fitted": self.fitted, "features": list(FEATURES),
                "report": self.report, "identity": self.identity}

    @classmethod
    def from_dict(cls, values: dict) -> "Combiner":
        if values.get("mode") not in (COMBINED, PRIOR):
            raise ValueError(f"unknown combiner mode {values.get('mode')!r}")
        return cls(values["mode"], dict(values["weights"]), bool(values.get("fitted")), values.get("report", {}),
                   values.get("identity", {}))

    def save(self, folder: str) -> str:
        from linker.mmap_store import write_json

        path = combiner_path(folder, self.identity)
        write_json(path, self.to_dict())
        return path


def combiner_path(folder: str, identity: dict) -> str:
    """``combiner-<digest of what it was fitted for>.json``: variants (with or without the
    cross-encoder, other top_k...) live side by side."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(folder, f"combiner-{digest}.json")


def read_combiner(folder: str, identity: dict) -> Combiner | None:
    path = combiner_path(folder, identity)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        combiner = Combiner.from_dict(json.load(fh))
    return combiner if combiner.identity == identity else None


# --------------------------------------------------------------------------- fitting


@dataclass
class FitExample:
    features: np.ndarray  # [candidates, FEATURES]
    gold: int  # position of the gold entity among the candidates, -1 when absent
    candidates: CandidateSet


def fit_example(cs: CandidateSet, gold_entity_id: int) -> FitExample:
    hits = np.flatnonzero(np.asarray(cs.entity_ids) == gold_entity_id)
    return FitExample(features(cs), int(hits[0]) if len(hits) else -1, cs)


def accuracy(combiner: Combiner, examples: list[FitExample]) -> float:
    if not examples:
        return 0.0
    hits = 0
    for ex in examples:
        if ex.gold >= 0 and len(ex.candidates):
            hits += int(combiner.rank(ex.candidates)[0][0] == ex.gold)
    return hits / len(examples)


def fit_weights(examples: list[FitExample], active: list[str], l2: float = 1e-2, steps: int = 50,
                start: dict | None = None) -> dict:
    """Maximum-likelihood weights of the conditional logit (Newton steps with backtracking)."""
    cols = [FEATURES.index(f) for f in active]
    data = [(ex.features[:, cols], ex.gold) for ex in examples if ex.gold >= 0 and len(ex.features) > 1]
    w = np.array([(start or DEFAULT_WEIGHTS).get(f, 0.0) for f in active], dtype=np.float64)
    if not data:
        return {f: float(v) for f, v in zip(active, w)}
    n = len(data)

    def objective(w):
        total, grad, hess = 0.0, np.zeros_like(w), np.zeros((len(w), len(w)))
        for x, g in data:
            z = x @ w
            lp = log_softmax(z)
            p = np.exp(lp)
            mean = p @ x
            total -= lp[g]
            grad -= x[g] - mean
            centred = x - mean
            hess += (centred * p[:, None]).T @ centred
        total = total / n + 0.5 * l2 * w @ w
        return total, grad / n + l2 * w, hess / n + l2 * np.eye(len(w))

    value, grad, hess = objective(w)
    for _ in range(steps):
        step = np.linalg.solve(hess, grad)
        scale = 1.0
        while scale > 1e-6:
            trial = w - scale * step
            trial_value, trial_grad, trial_hess = objective(trial)
            if trial_value <= value:
                break
            scale /= 2
        else:
            break
        converged = value - trial_value < 1e-10
        w, value, grad, hess = trial, trial_value, trial_grad, trial_hess
        if converged:
            break
    return {f: float(v) for f, v in zip(active, w)}


def _select(examples: list[FitExample], active: list[str], l2: float) -> tuple[Combiner, dict]:
    weights = {**{f: 0.0 for f in FEATURES}, **fit_weights(examples, active, l2)}
    fitted = Combiner(COMBINED, weights, fitted=True)
    prior = Combiner(PRIOR, weights, fitted=True)
    acc_fitted, acc_prior = accuracy(fitted, examples), accuracy(prior, examples)
    chosen = fitted if acc_fitted >= acc_prior else prior
    return chosen, {"accuracy@1_combined": acc_fitted, "accuracy@1_prior_mode": acc_prior}


def fit_combiner(examples: list[FitExample], use_crossencoder: bool, l2: float = 1e-2) -> Combiner:
    """Fit on ``examples``; keep the combination or the prior fallback, whichever links more of them."""
    active = [f for f in FEATURES if f != "crossencoder" or use_crossencoder]
    if not examples:
        weights = {**DEFAULT_WEIGHTS, **({} if use_crossencoder else {"crossencoder": 0.0})}
        return Combiner(COMBINED, weights, fitted=False, report={"mentions": 0, "note": "no validation hyperlinks: default weights"})
    chosen, scores = _select(examples, active, l2)
    halves = [examples[0::2], examples[1::2]]
    held_out_hits = 0
    for fit_half, test_half in (halves, halves[::-1]):
        if fit_half and test_half:
            fold, _ = _select(fit_half, active, l2)
            held_out_hits += accuracy(fold, test_half) * len(test_half)
    chosen.report = {
        "mentions": len(examples),
        "gold_among_candidates": sum(ex.gold >= 0 for ex in examples) / len(examples),
        **scores,
        "chosen": chosen.mode,
        "accuracy@1_cross_fitted": held_out_hits / len(examples),
        "l2": l2,
    }
    log.info("combiner fitted on %d mentions: %s", len(examples), json.dumps(chosen.report))
    return chosen
