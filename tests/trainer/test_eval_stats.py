"""The evaluation's metrics and baselines against hand-computed values (trainer.eval_stats, trainer.evaluate)."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.corpus import MentionSource
from trainer.eval_stats import (
    BANDS,
    band_of,
    bootstrap_ratio,
    supported,
    training_stats,
)
from trainer.evaluate import MENTION_FIELDS, PASSAGE_FIELDS, summarize_records


def test_bands_are_the_issues_edges():
    assert [band_of(n) for n in (0, 1, 4, 5, 19, 20, 10**6)] == ["0", "1-4", "1-4", "5-19", "5-19", ">=20", ">=20"]
    assert list(BANDS) == ["0", "1-4", "5-19", ">=20"]
    with pytest.raises(ValueError):
        band_of(-1)


def _mention(start, end, eid, source=MentionSource.HYPERLINK):
    return {"token_start": start, "token_end": end, "entity_id": eid, "entity": str(eid), "source": source,
            "surface": "x", "char_start": 0, "char_end": 1}


def test_training_stats_counts_tokens_hyperlinks_and_aliases(tmp_path):
    # vocabulary 10, specials 0 and 1; entities 0..5 (ids < 3 are special entities)
    rows = [{"token_ids": [5, 6, 7, 5], "mentions": [_mention(0, 1, 3), _mention(1, 3, 4)]},
            {"token_ids": [5, 9], "mentions": [_mention(0, 1, 4), _mention(0, 1, 4), _mention(1, 2, 5, "title_alias")]}]
    shard = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), shard)
    s = training_stats([shard], vocab_size=10, n_entities=6, special=(0, 1))
    assert s.token_counts.tolist() == [0, 0, 0, 0, 0, 3, 1, 1, 0, 1]
    assert s.entity_links.tolist() == [0, 0, 0, 1, 3, 0]  # the label (title_alias) is not a hyperlink
    assert s.most_frequent_entity == 4 and s.constant_token == 5
    # surface (5,) links to 3 once and to 4 twice: the prior says 4; (6, 7) -> 4; unseen -> most frequent
    assert s.alias_prediction((5,)) == 4 and s.alias_prediction((6, 7)) == 4 and s.alias_prediction((8,)) == 4
    lp = s.unigram_logprob(alpha=0.5)  # 8 word ids: total 6 + 8 x 0.5 = 10
    assert lp[0] == -math.inf and lp[1] == -math.inf
    assert math.isclose(lp[5], math.log(3.5 / 10)) and math.isclose(lp[8], math.log(0.5 / 10))


def test_bootstrap_ratio_value_interval_and_paired_difference():
    num, den = np.array([1, 0, 1, 1, 0, 1, 1, 1.0]), np.ones(8)
    r = bootstrap_ratio(num, den, ref_num=np.zeros(8), resamples=2000)
    assert r["value"] == 0.75 and r["diff"] == 0.75 and r["n"] == 8
    assert r["ci"][0] < 0.75 < r["ci"][1] and 0.3 < r["ci"][0] and r["ci"][1] == 1.0
    assert r["diff_ci"] == pytest.approx(r["ci"])  # the reference is 0 everywhere: the same resamples
    same = bootstrap_ratio(num, den, ref_num=num)
    assert same["diff"] == 0 and same["diff_ci"] == [0.0, 0.0]  # paired: identical models never differ
    assert bootstrap_ratio(num, den, resamples=500) == bootstrap_ratio(num, den, resamples=500)  # seeded
    empty = bootstrap_ratio(np.zeros(0), np.zeros(0), ref_num=np.zeros(0))
    assert empty["value"] is None and empty["diff_ci"] is None


def test_supported_needs_the_interval_and_the_minimum_effect():
    assert supported(0.1, [0.05, 0.15], 0.05) and supported(-0.1, [-0.2, -0.01], 0.05)
    assert not supported(0.1, [-0.01, 0.2], 0.05)  # interval includes 0
    assert not supported(0.03, [0.01, 0.05], 0.05)  # below the declared minimum
    assert supported(None, None, 0.05) is None


def _records(mentions: list[dict], passages: list[dict]):
    m = {k: np.array([float(r.get(k, 0.0)) for r in mentions]) for k in MENTION_FIELDS}
    p = {k: np.array([float(r.get(k, 0.0)) for r in passages]) for k in PASSAGE_FIELDS}
    return m, p


def test_summary_of_records_by_hand():
    mentions = [  # 3 known targets: links 0, 7, 30; one unknown (outside the model's vocabulary)
        dict(tokens=2, nll=4.0, full_nll=3.0, correct=1, unigram_nll=10, constant_correct=0, first_correct=1,
             known=1, links=0, el_correct=0, most_frequent_correct=0, alias_correct=0),
        dict(tokens=1, nll=2.0, full_nll=2.0, correct=0, unigram_nll=5, constant_correct=1, first_constant_correct=1,
             known=1, links=7, el_correct=1, most_frequent_correct=0, alias_correct=1),
        dict(tokens=3, nll=3.0, full_nll=3.0, correct=3, unigram_nll=9, first_correct=1,
             known=1, links=30, el_correct=1, most_frequent_correct=1, alias_correct=1),
        dict(tokens=1, nll=1.0, full_nll=1.0, known=0, links=0, el_correct=0, most_frequent_correct=1),
    ]
    passages = [dict(tokens=10, nll=4.0, full_nll=5.0, correct=6, unigram_nll=30, constant_correct=1),
                dict(tokens=0)]
    m = summarize_records(*_records(mentions, passages), has_memory=True)
    assert m["mention_lm_loss"] == 10 / 7 and m["mention_token_acc"] == 4 / 7
    assert m["mention_first_token_acc"] == 2 / 4 and m["baselines"]["constant_first_token_acc"] == 1 / 4
    assert m["other_lm_loss"] == 0.4 and m["other_token_acc"] == 0.6 and m["baselines"]["unigram_other_loss"] == 3
    # the word softmax renormalises away the specials' mass s: word loss = full loss + log(1 - s)
    assert m["other_lm_loss_full_vocab"] == 0.5 and math.isclose(m["other_special_mass"], 1 - math.exp(-0.1))
    assert m["el_acc"] == 2 / 3 and m["el_targets"] == 3  # the unknown target is no linking target
    assert m["baselines"]["el_most_frequent"] == 1 / 3 and m["baselines"]["el_alias_prior"] == 2 / 3
    bands = m["el_acc_by_band"]
    assert [bands[b]["targets"] for b in BANDS] == [1, 0, 1, 1]
    assert bands["0"]["el_acc"] == 0 and bands["5-19"]["el_acc"] == 1 and math.isnan(bands["1-4"]["most_frequent"])
    assert m["el_acc_frequent"] == 1.0 and m["baselines"]["el_most_frequent_frequent"] == 1.0
    assert m["intervals"]["el_acc_frequent"]["diff"] == 0.0
    assert m["intervals"]["other_lm_loss"]["diff"] == pytest.approx(0.4 - 3.0)
    bart = summarize_records(*_records(mentions, passages), has_memory=False)
    assert bart["el_acc"] is None and bart["el_acc_frequent"] is None and "el_acc" not in bart["intervals"]
