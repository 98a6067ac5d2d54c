"""What an evaluation is judged against: baselines fitted on the training split, frequency bands, bootstrap intervals.

Pure functions over numpy arrays (``trainer.evaluate`` feeds them); each is tested against hand-computed values.

- ``TrainingStats``: from the training split of the evaluation corpus, streamed shard by shard: token
  frequencies (the unigram floor, the constant prediction), how often each entity is linked (frequency
  bands, the most-frequent-entity baseline) and the alias prior (surface tokens -> most linked entity).
- ``band_of``: a target's training-frequency band, 0 / 1-4 / 5-19 / >= 20 links.
- ``bootstrap_ratio``: the 95% percentile interval of a ratio of sums (an accuracy, a mean loss) when its
  units (mentions, passages) are resampled; with a second numerator on the same units, the paired
  difference's interval (the same resamples for both).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schemas.corpus import MentionSource

# Training-frequency bands of an EL target (hyperlinks to it in the training split): [low, high) link counts.
BANDS = {"0": (0, 1), "1-4": (1, 5), "5-19": (5, 20), ">=20": (20, math.inf)}
FREQUENT_BAND = ">=20"
# Add-alpha smoothing of the unigram floor: every word token gets alpha extra counts (a Jeffreys prior), so a
# token never seen in training costs a finite -log p.
UNIGRAM_ALPHA = 0.5
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
# Minimum effect sizes, declared before any run of this evaluation was seen (docs/ablation.md, "Protocol"):
# a difference smaller than these is reported as "no effect at this scale" even when its interval excludes 0.
MIN_EFFECT = {"lm_loss_nats": 0.05, "accuracy": 0.02}
# The positive control's pass criteria (issue 30): other-token loss this far below the unigram floor.
CONTROL_LOSS_MARGIN_NATS = 0.5


def band_of(links: int) -> str:
    """The training-frequency band of a target linked ``links`` times in training."""
    for name, (low, high) in BANDS.items():
        if low <= links < high:
            return name
    raise ValueError(f"negative link count {links}")


@dataclass
class TrainingStats:
    """Baselines' inputs, counted over the training split (token ids are the corpus tokenizer's)."""

    token_counts: np.ndarray  # [vocab] occurrences of each token id in the training passages' text
    entity_links: np.ndarray  # [n_entities] hyperlinks to each entity id
    alias_entity: dict = field(default_factory=dict)  # surface token ids (tuple) -> its most linked entity id
    word_ids: np.ndarray | None = None  # bool [vocab]: ids scored as words (not special)

    @property
    def most_frequent_entity(self) -> int:
        return int(np.argmax(self.entity_links))

    @property
    def constant_token(self) -> int:
        """The most frequent word token: the constant prediction."""
        counts = np.where(self.word_ids, self.token_counts, -1)
        return int(np.argmax(counts))

    def unigram_logprob(self, alpha: float = UNIGRAM_ALPHA) -> np.ndarray:
        """log p(token) over the word vocabulary (add-alpha); -inf at special ids."""
        counts = np.where(self.word_ids, self.token_counts + alpha, 0.0)
        with np.errstate(divide="ignore"):
            return np.log(counts) - np.log(counts.sum())

    def alias_prediction(self, surface: tuple[int, ...]) -> int:
        """The alias prior's answer for a visible mention: its surface's most linked entity, else the most
        frequent entity overall."""
        return self.alias_entity.get(tuple(surface), self.most_frequent_entity)


def training_stats(shards: list[Path], vocab_size: int, n_entities: int, special: tuple[int, ...]) -> TrainingStats:
    """Count tokens, hyperlinks and aliases over the training shards, one shard at a time. The alias table is
    a dict over the distinct hyperlink surfaces of the split (evaluation-time memory, not the trainer's)."""
    import pyarrow.parquet as pq

    tokens = np.zeros(vocab_size, dtype=np.int64)
    links = np.zeros(n_entities, dtype=np.int64)
    aliases: dict[tuple, Counter] = defaultdict(Counter)
    for shard in shards:
        table = pq.read_table(shard, columns=["token_ids", "mentions"])
        flat = table.column("token_ids").combine_chunks().flatten().to_numpy()
        tokens += np.bincount(flat, minlength=vocab_size)[:vocab_size]
        for token_ids, mentions in zip(table.column("token_ids").to_pylist(), table.column("mentions").to_pylist()):
            for m in mentions:
                if m["source"] != MentionSource.HYPERLINK or not 0 <= m["entity_id"] < n_entities:
                    continue
                links[m["entity_id"]] += 1
                aliases[tuple(token_ids[m["token_start"]:m["token_end"]])][m["entity_id"]] += 1
    word = np.ones(vocab_size, dtype=bool)
    word[list(special)] = False
    # ties broken by the smaller entity id (Counter.most_common keeps insertion order: make it deterministic)
    alias_entity = {s: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for s, c in aliases.items()}
    return TrainingStats(tokens, links, alias_entity, word)


def bootstrap_ratio(num: np.ndarray, den: np.ndarray, ref_num: np.ndarray | None = None,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """sum(num)/sum(den) and its 95% percentile bootstrap interval over the units (resampled with replacement);
    with ``ref_num``: also the paired difference num - ref_num (same units, same denominators, same resamples).

    -> {"value", "ci": [lo, hi], "n"} (+ "diff", "diff_ci"). None values when there are no units.
    """
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    n = len(num)
    if n == 0 or den.sum() == 0:
        out = {"value": None, "ci": None, "n": n}
        return {**out, "diff": None, "diff_ci": None} if ref_num is not None else out
    rng = np.random.default_rng(seed)
    stats, diffs = [], []
    ref = None if ref_num is None else np.asarray(ref_num, dtype=np.float64)
    for first in range(0, resamples, 100):  # multinomial weights: at most 100 x n floats at a time
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=min(100, resamples - first)).astype(np.float64)
        d = np.maximum(w @ den, 1e-300)
        stats.append((w @ num) / d)
        if ref is not None:
            diffs.append((w @ num - w @ ref) / d)
    stats = np.concatenate(stats)
    out = {"value": float(num.sum() / den.sum()), "ci": [float(x) for x in np.percentile(stats, [2.5, 97.5])],
           "n": int((den > 0).sum())}
    if ref is not None:
        out["diff"] = float((num.sum() - ref.sum()) / den.sum())
        out["diff_ci"] = [float(x) for x in np.percentile(np.concatenate(diffs), [2.5, 97.5])]
    return out


def supported(diff: float | None, diff_ci: list[float] | None, min_effect: float) -> bool | None:
    """An effect is supported when its interval excludes 0 and its size is at least the declared minimum."""
    if diff is None or diff_ci is None:
        return None
    lo, hi = diff_ci
    return bool((lo > 0 or hi < 0) and abs(diff) >= min_effect)
