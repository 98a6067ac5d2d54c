"""benchmarks/results/learning.json (the positive control, issue 30) has the keys a reader checks, and its pass/fail
follows from them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_learning import GRIDS, pass_criteria  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "learning.json"
KEYS = ("baselines.unigram_other_loss", "baselines.el_most_frequent_frequent", "edmem.other_lm_loss",
        "edmem.el_acc_frequent", "edmem.el_acc_frequent_ci", "bart.other_lm_loss", "bart.el_acc_frequent",
        "bart.el_acc_frequent_ci", "wall_s_per_run", "steps", "machine", "pass")


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def test_learning_json_has_the_keys_and_its_verdict_follows_from_them():
    results = json.loads(RESULTS.read_text())
    for key in KEYS:
        _get(results, key)  # KeyError names a missing key
    assert results["steps"] == GRIDS["cpu"]["steps"] and results["wall_s_per_run"]
    assert results["bart"]["el_acc_frequent"] is None  # BART has no linker
    lo, hi = results["edmem"]["el_acc_frequent_ci"]
    assert lo <= results["edmem"]["el_acc_frequent"] <= hi
    assert results["pass"] == pass_criteria(results)
    # all validation passages were scored
    for arm in results["arms"].values():
        metrics = arm["metrics"]
        assert "validation_passages" not in metrics and metrics["passages"] == results["corpora"]["hyperlinks"][
            "validation"]["passages"]


def _results(other: float, el: float, el_ci, diff_ci) -> dict:
    return {"baselines": {"unigram_other_loss": 7.0, "el_most_frequent_frequent": 0.05},
            "edmem": {"other_lm_loss": other, "el_acc_frequent": el, "el_acc_frequent_ci": el_ci,
                      "el_frequent_minus_most_frequent_ci": diff_ci}}


@pytest.mark.parametrize("other, el, diff_ci, loss_ok, el_ok", [
    (6.5, 0.20, [0.1, 0.2], True, True),
    (6.51, 0.20, [0.1, 0.2], False, True),  # 0.49 nats below the floor: not enough
    (6.0, 0.07, [-0.01, 0.05], True, False),  # above the baseline, but the interval includes it
    (6.0, 0.04, [-0.05, 0.0], True, False),
])
def test_pass_criteria(other, el, diff_ci, loss_ok, el_ok):
    verdict = pass_criteria(_results(other, el, [el - 0.02, el + 0.02], diff_ci))
    assert verdict == {"other_loss_below_unigram_by_0.5": loss_ok, "el_frequent_above_most_frequent": el_ok,
                       "passed": loss_ok and el_ok}


def test_gpu_grid_is_the_issues_geometry_and_parses(tmp_path):
    """The GPU grid's command line (one H100): d_model 512, 2 + 4 layers per stack, entity_dim 128, batch 128-256;
    every arm's arguments parse as a trainer config (its plumbing ran end to end with --tiny on CPU)."""
    from bench_learning import ARMS, train_args

    from trainer.config import config_parser

    for corpus, model in ARMS["ablation"]:
        args = train_args("gpu", tmp_path / corpus, tmp_path / "run", model, GRIDS["gpu"]["steps"])
        cfg, _ = config_parser().parse(args)
        assert (cfg.model.d_model, cfg.model.lower_layers, cfg.model.upper_layers, cfg.model.entity_dim) == (512, 2, 4,
                                                                                                            128)
        assert 128 <= cfg.train.global_batch_size <= 256 and cfg.train.max_steps == GRIDS["gpu"]["steps"]
        assert cfg.model.memory == {"edmem": "entity", "bart": "none"}[model] and cfg.train.keep_checkpoints == 0
