"""The combination of model scores and alias prior: fitted weights, the prior fallback, never worse
than the prior alone on the mentions it is fitted on."""
from __future__ import annotations

import numpy as np
import pytest

from linker.combine import (
    COMBINED,
    PRIOR,
    CandidateSet,
    Combiner,
    accuracy,
    features,
    fit_combiner,
    fit_example,
    prior_order,
    read_combiner,
)


def candidate_set(bi, prior, count=None, entity_ids=None, in_alias=None, is_name=None, popularity=None, cross=None):
    n = len(bi)
    prior = np.asarray(prior, dtype=float)
    return CandidateSet(
        rows=np.arange(n), entity_ids=np.asarray(entity_ids if entity_ids is not None else np.arange(10, 10 + n)),
        biencoder=np.asarray(bi, dtype=np.float32), crossencoder=None if cross is None else np.asarray(cross, np.float32),
        prior=prior, alias_count=np.asarray(count if count is not None else (prior * 10).astype(int)),
        in_alias=np.asarray(in_alias if in_alias is not None else prior > 0),
        is_name=np.asarray(is_name if is_name is not None else np.zeros(n, bool)),
        popularity=np.asarray(popularity if popularity is not None else np.zeros(n, int)))


def test_prior_order_is_the_alias_tables_then_the_models():
    cs = candidate_set(bi=[5.0, 1.0, 9.0, 2.0], prior=[0.0, 0.5, 0.0, 0.5], count=[0, 3, 0, 3],
                       entity_ids=[40, 31, 20, 30])
    # alias candidates by count, ties by entity id (30 before 31); then the rest by model score
    assert prior_order(cs).tolist() == [3, 1, 2, 0]
    order, probs = Combiner(PRIOR).rank(cs)
    assert order.tolist() == [3, 1, 2, 0] and probs[0] == pytest.approx(0.5)


def test_features_are_scale_free_model_scores_and_log_prior():
    cs = candidate_set(bi=[10.0, 12.0], prior=[0.9, 0.0], is_name=[True, False], popularity=[0, 9])
    f = features(cs)
    assert np.exp(f[:, 0]).sum() == pytest.approx(1.0)  # log-softmax of the dot products
    assert f[0, 2] == pytest.approx(np.log(0.9)) and f[1, 2] == pytest.approx(np.log(1e-4))
    assert f[:, 3].tolist() == [1.0, 0.0] and f[1, 4] == pytest.approx(np.log(10))
    assert f[:, 1].tolist() == [0.0, 0.0]  # no cross-encoder


def synthetic(n, rng, model_signal: float, ambiguous: float = 0.5):
    """Mentions with 6 candidates; the gold is the prior's favourite unless the alias is ambiguous,
    where it is another alias candidate; the model sees the gold with ``model_signal``."""
    examples = []
    for _ in range(n):
        prior = np.array([0.6, 0.3, 0.1, 0.0, 0.0, 0.0])
        gold = 0 if rng.random() > ambiguous else int(rng.integers(1, 3))
        bi = rng.normal(size=6) * 3
        bi[gold] += model_signal
        cs = candidate_set(bi=bi, prior=prior, count=(prior * 10).astype(int))
        examples.append(fit_example(cs, int(cs.entity_ids[gold])))
    return examples


def test_an_informative_model_beats_the_prior_and_a_noise_model_never_loses_to_it():
    rng = np.random.default_rng(0)
    good = synthetic(400, rng, model_signal=8.0)
    combiner = fit_combiner(good, use_crossencoder=False)
    assert combiner.mode == COMBINED and combiner.weights["biencoder"] > 0.5
    assert accuracy(combiner, good) > accuracy(Combiner(PRIOR), good) + 0.2
    assert combiner.report["accuracy@1_cross_fitted"] > combiner.report["accuracy@1_prior_mode"]

    noise = synthetic(400, rng, model_signal=0.0, ambiguous=0.3)
    combiner = fit_combiner(noise, use_crossencoder=False)
    assert accuracy(combiner, noise) >= accuracy(Combiner(PRIOR), noise)
    assert combiner.report["accuracy@1_combined"] <= accuracy(combiner, noise) + 1e-12


def test_without_mentions_the_default_weights_are_kept_and_said_to_be_unfitted():
    combiner = fit_combiner([], use_crossencoder=False)
    assert not combiner.fitted and combiner.weights["crossencoder"] == 0.0 and combiner.report["mentions"] == 0


def test_saved_combination_is_found_only_for_what_it_was_fitted_for(tmp_path):
    combiner = fit_combiner(synthetic(50, np.random.default_rng(1), 5.0), use_crossencoder=False)
    combiner.identity = {"biencoder": "abc", "top_k": 10}
    combiner.save(str(tmp_path))
    again = read_combiner(str(tmp_path), {"biencoder": "abc", "top_k": 10})
    assert again is not None and again.weights == combiner.weights and again.mode == combiner.mode
    assert read_combiner(str(tmp_path), {"biencoder": "abc", "top_k": 20}) is None
