"""The `beam` launcher and the config machinery (no pipeline run here)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipelines.cli import CliError, canonical_runner, normalise_runner_args
from pipelines.cli import main as beam_main
from pipelines.config import WikiMentionsConfig, parse_config
from pipelines.corpus.alias_table import alias_rows, clean_alias, merge_alias_evidence, vocab_rows


@pytest.mark.parametrize("given,expected", [
    ("Direct", "DirectRunner"), ("direct", "DirectRunner"), ("DirectRunner", "DirectRunner"),
    ("Dataflow", "DataflowRunner"), ("DataflowRunner", "DataflowRunner"),
    ("apache_beam.runners.direct.direct_runner.DirectRunner", "apache_beam.runners.direct.direct_runner.DirectRunner"),
])
def test_runner_names(given, expected):
    assert canonical_runner(given) == expected


def test_bad_runner_names_fail_early():
    with pytest.raises(CliError, match="unknown runner"):
        canonical_runner("Dataflw")
    with pytest.raises(CliError, match="cannot import"):
        canonical_runner("no.such.module.Runner")


def test_runner_args_rewritten_in_both_spellings():
    assert normalise_runner_args(["--runner", "Direct", "--x=1"]) == ["--runner", "DirectRunner", "--x=1"]
    assert normalise_runner_args(["--runner=Dataflow"]) == ["--runner=DataflowRunner"]


def test_beam_run_missing_target(capsys):
    assert beam_main(["run", "no_such_file.py"]) == 2
    assert "no such pipeline file" in capsys.readouterr().err
    assert beam_main(["run", "no_such.module"]) == 2


def test_config_yaml_then_flags_override(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("window: 64\noverlap: 8\nlabels:\n  min_alias_chars: 5\n")
    cfg, rest = parse_config(WikiMentionsConfig, [
        "--config", str(path), "--input", "x.xml", "--output", "o", "--overlap", "4",
        "--labels.min_prior", "0.2", "--keep_red_links", "true", "--runner=Direct"])
    assert (cfg.window, cfg.overlap) == (64, 4)
    assert cfg.labels.min_alias_chars == 5 and cfg.labels.min_prior == 0.2
    assert cfg.keep_red_links is True
    assert rest == ["--runner=Direct"]
    cfg.validate()


def test_config_rejects_bad_values(tmp_path):
    cfg, _ = parse_config(WikiMentionsConfig, ["--input", "x", "--output", "o", "--overlap", "128"])
    with pytest.raises(ValueError, match="overlap"):
        cfg.validate()
    path = tmp_path / "c.yaml"
    path.write_text("windw: 3\n")
    with pytest.raises(ValueError, match="windw"):
        parse_config(WikiMentionsConfig, ["--config", str(path)])


def test_alias_rows_priors_and_sources():
    rows = alias_rows("Paris", [("Paris", 8, frozenset({"anchor", "title"})), ("Paris, Texas", 2, frozenset({"anchor"})),
                                ("Paris (mythology)", 0, frozenset({"redirect"}))])
    assert [(r["entity"], r["prior"]) for r in rows] == [("Paris", 0.8), ("Paris (mythology)", 0.0), ("Paris, Texas", 0.2)]
    assert rows[0]["sources"] == ["anchor", "title"]
    assert merge_alias_evidence([(2, frozenset({"anchor"})), (0, frozenset({"title"}))]) == (2, frozenset({"anchor", "title"}))
    assert clean_alias("  New\n York ") == "New York"
    assert clean_alias("   ") is None and clean_alias("x" * 300) is None


def test_vocab_ids_are_by_count_then_title():
    rows = vocab_rows([("B", 5), ("A", 5), ("C", 9)])
    assert [(r["entity_id"], r["entity"]) for r in rows] == [(0, "[PAD]"), (1, "[UNK]"), (2, "[MASK]"), (3, "C"), (4, "A"), (5, "B")]


def test_wikiedm_lists_every_subcommand_and_each_has_help(capsys):
    from wikiedm.cli import SUBCOMMANDS, main

    argv_before = list(sys.argv)
    assert main(["--help"]) == 0
    listing = capsys.readouterr().out
    for name in ("corpus", "link", "train-linker", "evaluate-linker", "validate", "report", "card", "fetch",
                 "sample", "export", "pretrain"):
        assert f"\n  {name} " in listing
    for name in SUBCOMMANDS:
        assert main([name, "--help"]) == 0, name
        out = capsys.readouterr()
        assert "help" in (out.out + out.err).lower() or "usage" in (out.out + out.err).lower(), name
    assert main(["no-such-command"]) == 2
    assert sys.argv == argv_before, "the caller's argv is restored"


def test_wikiedm_subcommands_run_the_documented_modules(tmp_path):
    """`wikiedm sample` and `wikiedm validate` as a user types them (the installed console script)."""
    import shutil
    import subprocess

    exe = shutil.which("wikiedm", path=str(Path(sys.executable).parent))
    assert exe, "make venv installs the wikiedm console script"
    dump = tmp_path / "sample.xml.bz2"
    subprocess.run([exe, "sample", "--output", str(dump)], check=True, capture_output=True, timeout=120)
    assert dump.stat().st_size > 1000
    bad = subprocess.run([exe, "validate", "--corpus", str(tmp_path / "missing")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == f"wikiedm validate: error: --corpus {tmp_path / 'missing'}: no such folder"
    (tmp_path / "empty").mkdir()
    bad = subprocess.run([exe, "validate", "--corpus", str(tmp_path / "empty")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "manifest" in bad.stderr.lower()
