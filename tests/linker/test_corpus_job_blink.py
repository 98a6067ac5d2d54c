"""The corpus job with --blink_model: BLINK labels join the passages as source 'blink'."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_job
from tests.corpus_checks import check_passage_contract, passages

pytestmark = pytest.mark.slow


def test_corpus_job_adds_blink_labels_that_never_overlap(tmp_path: Path, sample_dump: str, sample_corpus: Path,
                                                         fake_release: Path):
    """The corpus job's BLINK labels with the labelling config (bi-encoder only, the combined score):
    the launcher prepares the linker once (KB, encodings, alias candidate index, fitted combination)."""
    out = tmp_path / "with_blink"
    proc = run_job(sample_dump, out, "--validation_fraction", "0.1",
                   "--blink_model", str(fake_release), "--blink_corpus", str(sample_corpus),
                   "--blink_config", str(REPO / "configs" / "linker" / "corpus_labels.yaml"), "--blink_threshold", "0.5")
    counters = json.loads((out / "stats.json").read_text())["counters"]
    assert counters["mentions/blink"] > 0
    assert counters["blink/detected_spans"] == (counters["mentions/blink"] + counters.get("blink/rejected_below_threshold", 0)
                                                + counters.get("blink/rejected_overlapping", 0))
    prepared = fake_release / "entity_encodings"
    assert any(prepared.glob("*/aliases-*/aliases.json")) and any(prepared.glob("*/combiner-*.json"))

    assert counters["mentions/hyperlink"] == json.loads((sample_corpus / "stats.json").read_text())["counters"]["mentions/hyperlink"]
    totals = check_passage_contract(out)
    assert totals.get("mentions/blink", 0) > 0
    for split in ("train", "validation"):
        for row in passages(out, split):
            spans = sorted((m["token_start"], m["token_end"]) for m in row["mentions"])
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), row["passage_id"]
    assert "mentions/blink" in proc.stdout


def test_blink_model_without_corpus_is_a_clear_error(tmp_path: Path, sample_dump: str):
    proc = run_job(sample_dump, tmp_path / "o", "--blink_model", "x", check=False)
    assert proc.returncode == 2 and "--blink_corpus" in proc.stderr
