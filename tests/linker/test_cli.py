"""BLINK's interfaces on a corpus KB: mention records in (BLINK's --test_mentions), ranked candidates
and metrics out, --fast, and the interactive mode reading lines of text."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from linker.cli import expand_bare_flags, main
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_bare_blink_switches_get_a_value():
    assert expand_bare_flags(["--fast", "--top_k", "5", "-i"]) == ["--fast", "true", "--top_k", "5", "--interactive", "true"]
    assert expand_bare_flags(["--fast", "false"]) == ["--fast", "false"]


@pytest.fixture(scope="module")
def names(sample_corpus):
    from linker.catalogue import read_catalogue

    catalogue = read_catalogue(str(sample_corpus))
    return [(t, int(i)) for t, i in zip(catalogue.titles, catalogue.entity_ids) if " " not in t][:4]


def test_mention_records_give_blinks_output_and_metrics(indexed_release, sample_corpus, names, tmp_path):
    records = [{"id": i, "context_left": "They say that", "mention": title, "context_right": "is old.",
                "label_id": entity_id, "label_title": title} for i, (title, entity_id) in enumerate(names)]
    records.append({"id": 9, "context_left": "", "mention": names[0][0], "context_right": "", "label_title": "No Such Page"})
    path = tmp_path / "mentions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n{broken\n")
    out, metrics = tmp_path / "out.jsonl", tmp_path / "metrics.json"
    assert main(["link", "--model", str(indexed_release), "--corpus", str(sample_corpus), "--test_mentions", str(path),
                 "--fast", "--top_k", "5", "--output", str(out), "--metrics", str(metrics)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [0, 1, 2, 3, 9]
    for line, (title, entity_id) in zip(lines, names):
        assert len(line["biencoder"]) == 5 and "crossencoder" not in line  # --fast
        scores = [c["score"] for c in line["biencoder"]]
        assert scores == sorted(scores, reverse=True)  # raw dot products, best first
        assert line["linked"]["title"] == title and line["linked"]["entity_id"] == entity_id  # the prior helps
        assert 0 < line["linked"]["score"] <= 1 and line["gold_row"] >= 0
    got = json.loads(metrics.read_text())
    assert got["labelled"] == 5 and got["labels_not_in_kb"] == 1 and got["skipped_lines"] == 1
    assert got["linker_accuracy"] == 1.0 and set(got["recall@k"]) == {"1", "2", "3", "4", "5"}


def test_interactive_mode_reads_lines_and_prints_linked_mentions(indexed_release, sample_corpus, names):
    a, b = names[0][0], names[1][0]
    cmd = [sys.executable, "-m", "linker.cli", "interactive", "--model", str(indexed_release),
           "--corpus", str(sample_corpus), "--fast"]
    proc = subprocess.run(cmd, cwd=REPO, input=f"Where is {a}?\n\nnothing here\n{b} and {a}.\n",
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Where is [{a}]?" and lines[1].strip().startswith(f"{a} -> {a}")
    assert "nothing here" in lines and "  (no mention found)" in lines
    assert f"[{b}] and [{a}]." in lines
