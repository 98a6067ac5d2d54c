"""The front door, from the command line: every subcommand checks its whole command line before it imports its
job, builds or writes anything (a bad value: one line naming the option and its allowed values, exit 2, in
seconds, nothing written); a missing or wrong path is one line for every subcommand; an unknown option gets the
nearest one; the corpus job refuses to replace a corpus of another dump or config without --overwrite true."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wikiedm.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parent.parent
FAST_S = 10  # a check that imports no torch, DeepSpeed or Beam takes about a second; the machine may be loaded


def wikiedm(*argv: str, cwd: Path | None = None, timeout: int = 120) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "wikiedm.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or REPO)
    return proc, time.monotonic() - started


def bad_values(corpus: Path, out: Path, dump: str) -> dict[str, tuple[list[str], str]]:
    """subcommand -> (a command line with one bad value, what its one-line error must say)."""
    c, o = str(corpus), str(out)
    return {
        "corpus": (["--input", dump, "--output", o, "--window", "many"], "--window: 'many' is not a valid int"),
        "link": (["--input", "x.jsonl", "--output", o, "--top_k", "lots"], "--top_k: 'lots' is not a valid int"),
        "link-text": (["--model", o, "--corpus", c, "--crossencoder", "sometimes"], "--crossencoder must be auto, true or false"),
        "interactive": (["--model", o, "--corpus", c, "--top_k", "lots"], "--top_k"),
        "index-linker": (["--model", o, "--corpus", c, "--rebuild", "maybe"], "not a boolean"),
        "linker-vocab": (["--corpus", c, "--output", f"{o}/vocab.txt", "--size", "big"], "--size: 'big' is not a valid int"),
        "train-linker": (["--corpus", c, "--output", o, "--max_steps", "many"], "--max_steps"),
        "evaluate-linker": (["--model", o, "--corpus", c, "--limit", "all"], "--limit"),
        "pretrain": (["--corpus", c, "--output", o, "--train.bf16", "maybe"],
                     "--train.bf16: 'maybe' is not one of auto, true, false"),
        "evaluate": (["--checkpoint", o, "--corpus", c, "--batch_size", "big"], "--batch_size"),
        "export": (["--checkpoint", o, "--output", f"{o}/m.safetensors", "--dtype", "bf16"], "unknown option --dtype"),
        "validate": (["--corpus", c, "--sha256", "maybe"], "--sha256"),
        "report": (["--corpus", c, "--output", f"{o}/x.png", "--dpi", "300"], "unknown option --dpi"),
        "card": (["--corpus", c, "--dump_dat", "20200101"], "unknown option --dump_dat; did you mean --date?"),
        "fetch": (["--wiki", "enwiki", "--date", "20200101", "--output", o, "--retries", "many"], "--retries"),
        "sample": (["--output", f"{o}/s.xml", "--per_kind", "many"], "--per_kind"),
        "train-tokenizer": (["--corpus", c, "--output", f"{o}/tok", "--vocab_size", "big"],
                            "--vocab_size: 'big' is not a valid int"),
    }


def test_every_subcommand_is_in_the_walk(tmp_path):
    assert set(bad_values(tmp_path, tmp_path, "")) == set(SUBCOMMANDS) - {"beam"}


def test_a_bad_value_is_one_line_exit_2_in_seconds_and_nothing_written(tmp_path, sample_corpus, sample_dump):
    out = tmp_path / "out"
    out.mkdir()
    for name, (argv, says) in bad_values(sample_corpus, out, sample_dump).items():
        proc, seconds = wikiedm(name, *argv)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (name, proc.stderr)
        assert len(lines) == 1 and lines[0].startswith(f"wikiedm {name}: error: ") and says in lines[0], (name, lines)
        assert seconds < FAST_S, (name, seconds)
        assert not any(out.iterdir()), (name, list(out.iterdir()))  # nothing written


@pytest.mark.parametrize("flag, value, says", [
    ("--labels.min_prior", "5", "--labels.min_prior must be in [0, 1], got 5.0"),
    ("--labels.top_aliases_per_page", "0", "--labels.top_aliases_per_page must be in [1, max_aliases_per_entity"),
    ("--labels.min_alias_chars", "0", "--labels.min_alias_chars must be >= 1, got 0"),
    ("--labels.stopwords", "klingon", "--labels.stopwords: unknown stopword list 'klingon'"),
    ("--read_range_mb", "0", "--read_range_mb must be >= 1"),
])
def test_a_value_the_config_s_own_checks_refuse_is_one_line_naming_the_flag(tmp_path, sample_dump, flag, value, says):
    out = tmp_path / "out"
    proc, seconds = wikiedm("corpus", "--input", sample_dump, "--output", str(out), flag, value)
    assert proc.returncode == 2 and seconds < FAST_S, proc.stderr
    assert proc.stderr.startswith(f"wikiedm corpus: error: {says}") and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("flag, value, says", [
    ("--model.d_model", "0", "model.d_model must be >= 1, got 0"),  # was a ZeroDivisionError inside the ranks
    ("--train.max_steps", "0", "train.max_steps must be >= 1, got 0"),
    ("--model.dropout", "1.5", "model.dropout must be in [0, 1], got 1.5"),
    ("--train.log_every", "0", "train.log_every must be >= 1, got 0"),  # was a ZeroDivisionError inside the ranks
])
def test_pretrain_refuses_an_impossible_size_before_any_rank_starts(tmp_path, sample_corpus, flag, value, says):
    proc, seconds = wikiedm("pretrain", "--corpus", str(sample_corpus), "--output", str(tmp_path / "X"), flag, value)
    assert proc.returncode == 2 and seconds < FAST_S and not (tmp_path / "X").exists(), proc.stderr
    assert proc.stderr == f"wikiedm pretrain: error: {says}\n"


def test_evaluate_refuses_an_empty_batch_in_one_line(tmp_path, sample_corpus):
    proc, seconds = wikiedm("evaluate", "--checkpoint", str(tmp_path), "--corpus", str(sample_corpus), "--batch_size", "0")
    assert proc.returncode == 2 and seconds < FAST_S, proc.stderr
    assert proc.stderr == "wikiedm evaluate: error: --batch_size must be >= 1, got 0\n"


def test_sample_refuses_too_few_entities_in_one_line(tmp_path):
    proc, seconds = wikiedm("sample", "--output", str(tmp_path / "s.xml"), "--per_kind", "1")  # was an IndexError
    assert proc.returncode == 2 and seconds < FAST_S and not (tmp_path / "s.xml").exists(), proc.stderr
    assert proc.stderr == "wikiedm sample: error: --per_kind must be >= 2, got 1\n"


def test_pretrain_with_a_bad_value_writes_no_run_folder(tmp_path, sample_corpus):
    proc, seconds = wikiedm("pretrain", "--corpus", str(sample_corpus), "--output", str(tmp_path / "X"),
                            "--train.bf16", "maybe")
    assert proc.returncode == 2 and seconds < FAST_S and not (tmp_path / "X").exists()
    assert proc.stderr == "wikiedm pretrain: error: --train.bf16: 'maybe' is not one of auto, true, false\n"


def missing_paths(corpus: Path, out: Path) -> dict[str, list[str]]:
    """subcommand -> a command line whose input path does not exist (fetch and sample read no path)."""
    nope, c, o = "/nope/nowhere", str(corpus), str(out)
    return {
        "corpus": ["--input", nope, "--output", o],
        "link": ["--input", "x.jsonl", "--output", o, "--model", nope, "--corpus", c],
        "link-text": ["--model", nope, "--corpus", c, "--text", "x"],
        "interactive": ["--model", o, "--corpus", nope],
        "index-linker": ["--model", nope, "--corpus", c],
        "linker-vocab": ["--corpus", nope, "--output", f"{o}/v.txt"],
        "train-linker": ["--corpus", nope, "--output", o],
        "evaluate-linker": ["--model", o, "--corpus", nope],
        "pretrain": ["--corpus", nope, "--output", o],
        "evaluate": ["--checkpoint", nope, "--corpus", c],
        "export": ["--checkpoint", nope, "--output", f"{o}/m.safetensors"],
        "validate": ["--corpus", nope],
        "report": ["--corpus", nope],
        "card": ["--corpus", nope],
        "train-tokenizer": ["--corpus", nope, "--output", f"{o}/tok"],
        "beam": ["run", f"{nope}.py"],
    }


def test_a_missing_or_wrong_path_is_one_line_for_every_subcommand(tmp_path, sample_corpus, capsys):
    walk = missing_paths(sample_corpus, tmp_path)
    assert set(walk) == set(SUBCOMMANDS) - {"fetch", "sample"}
    for name, argv in walk.items():
        assert main([name, *argv]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"wikiedm {name}: error: ") and "/nope/nowhere" in err[0], (name, err)
    not_a_corpus = tmp_path / "some_folder"
    not_a_corpus.mkdir()
    for name in ("report", "card", "pretrain", "train-linker"):
        argv = ["--corpus", str(not_a_corpus), *(["--output", str(tmp_path / "o")] if name in ("pretrain", "train-linker") else [])]
        assert main([name, *argv]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a finished corpus (no manifest.json" in err, (name, err)


def test_an_unknown_option_gets_the_nearest_one_and_names_the_subcommand(tmp_path, sample_dump):
    proc, seconds = wikiedm("corpus", "--input", sample_dump, "--output", str(tmp_path / "o"), "--windw", "64")
    assert proc.returncode == 2 and seconds < 3 * FAST_S  # it asks Beam for its options: a Beam import
    assert proc.stderr == "wikiedm corpus: error: unknown option --windw; did you mean --window?\n"
    assert not (tmp_path / "o").exists()
    proc, seconds = wikiedm("pretrain", "--corpus", str(tmp_path), "--max_step", "3")
    assert proc.stderr == "wikiedm pretrain: error: unknown option --max_step; did you mean --max_steps?\n"
    assert proc.returncode == 2 and seconds < FAST_S
    proc, _ = wikiedm("corpsu")
    assert proc.returncode == 2 and "did you mean 'corpus'?" in proc.stderr


def test_a_removed_option_is_one_line_that_says_what_replaced_it(tmp_path, sample_dump, capsys):
    """The shuffle job's options are gone: on the command line (either spelling, through wikiedm and through the
    job's own module) or in a YAML file, each is one line naming it, saying it was removed and what replaced it;
    nothing is written, nothing accepted silently."""
    from pipelines.config import WikiMentionsConfig
    from pipelines.wiki_mentions import run

    removed = WikiMentionsConfig.REMOVED_OPTIONS
    assert set(removed) == {"num_shards", "passages_per_shard", "alias_rows_per_shard", "description_shards",
                            "descriptions_per_shard", "max_join_group", "job"}
    replaced_by = {"job": "two-pass job", "num_shards": "--cache_chunk_articles", "passages_per_shard": "--cache_chunk_articles",
                   "description_shards": "entity_descriptions file", "descriptions_per_shard": "--read_range_mb",
                   "alias_rows_per_shard": "--alias_shards", "max_join_group": "sorted run files"}
    out = tmp_path / "o"
    for name in removed:
        for argv in (["--input", sample_dump, "--output", str(out), f"--{name}", "3"],
                     ["--input", sample_dump, f"--{name}=3", "--output", str(out)]):
            assert main(["corpus", *argv]) == 2, name
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith(f"wikiedm corpus: error: --{name} was removed: "), err
            assert replaced_by[name] in err, err
        assert run(["--input", sample_dump, "--output", str(out), f"--{name}", "3"]) == 2  # python -m pipelines...
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--{name} was removed: " in err and "Traceback" not in err, err
        config = tmp_path / f"{name}.yaml"
        config.write_text(f"window: 64\n{name}: 3\n")
        assert main(["corpus", "--config", str(config), "--input", sample_dump, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == f"wikiedm corpus: error: {config}: config key '{name}' was removed: {removed[name]}\n", err
    assert not out.exists()
    proc, _ = wikiedm("corpus", "--input", sample_dump, "--output", str(out), "--num_shards", "1")  # a fresh process
    assert proc.returncode == 2 and proc.stderr.startswith("wikiedm corpus: error: --num_shards was removed: ")
    assert proc.stderr.count("\n") == 1 and not out.exists()
    proc, _ = wikiedm("corpus", "--help-config")
    assert not any(f"--{name}" in proc.stdout for name in removed)


def test_usage_lines_show_required_options_without_brackets(capsys):
    for name, usage in (("validate", "usage: wikiedm validate --corpus DIR [--config"),
                        ("sample", "usage: wikiedm sample --output FILE [--config"),
                        ("fetch", "usage: wikiedm fetch --wiki NAME --date YYYYMMDD --output DIR [--config"),
                        ("corpus", "usage: wikiedm corpus --input FILE --output DIR [--config")):
        assert main([name, "--help"]) == 0
        assert capsys.readouterr().out.startswith(usage), name


def test_version_and_completion(capsys):
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("wikiedm ")
    assert main(["--completion"]) == 0 and "complete -o default" in capsys.readouterr().out
    assert main(["--complete", "cor"]) == 0 and "corpus" in capsys.readouterr().out.split()
    assert main(["--complete", "corpus", "--win"]) == 0 and "--window" in capsys.readouterr().out.split()
    assert main(["--complete", "validate", "--sha256", ""]) == 0 and capsys.readouterr().out.split() == ["true", "false"]


def test_defaults_and_names_agree():
    from linker.link import LinkerConfig
    from linker.options import TrainConfig
    from trainer.config import EvaluateConfig

    assert LinkerConfig().device == TrainConfig().device == EvaluateConfig().device == "auto"
    from pipelines.config import card_parser, corpus_parser, fetch_parser

    assert card_parser().parse(["--corpus", "C", "--dump_date", "20200101"])[0].date == "20200101"  # the old name
    assert fetch_parser().parse(["--wiki", "w", "--date", "20200101", "--output", "O"])[0].date == "20200101"
    assert corpus_parser().parse(["--input", "I", "--output", "O", "--corpus", "C"])[0] == \
        corpus_parser().parse(["--input", "I", "--output", "O", "--blink_corpus", "C"])[0]  # the old spelling
    assert "--corpus " not in corpus_parser().format_help()


# ----------------------------------------------------------------------------- --output of the corpus job


def test_the_corpus_job_refuses_another_config_in_a_corpus_folder(tmp_path, sample_corpus, sample_dump):
    corpus = tmp_path / "corpus"
    shutil.copytree(sample_corpus, corpus)
    before = sorted(p.relative_to(corpus) for p in corpus.rglob("*"))
    proc, _ = wikiedm("corpus", "--input", sample_dump, "--output", str(corpus), "--validation_fraction", "0.1",
                      "--window", "64")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wikiedm corpus: error: --output {corpus} holds a corpus of "
                                                   "another dump or config (")
    assert "config.window 128 -> 64" in lines[0] and lines[0].endswith("pass --overwrite true to replace it, or "
                                                                        "choose another folder")
    assert sorted(p.relative_to(corpus) for p in corpus.rglob("*")) == before


def test_the_output_guard(tmp_path):
    from pipelines.output_guard import RUN_RECORD, OutputInUseError, guard_output

    dump = tmp_path / "dump.xml"
    dump.write_text("<mediawiki/>")
    config = {"input": str(dump), "output": str(tmp_path / "out"), "window": 128}
    out = tmp_path / "out"
    assert guard_output(str(out), config, overwrite=False) == "new"
    assert json.loads((out / RUN_RECORD).read_text())["input"] == {"path": str(dump), "size": 12}
    for name in ("manifest.json", "README.md", "label_coverage.png", "passages/train-00000.parquet"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("old")
    assert guard_output(str(out), dict(config), overwrite=False) == "rerun"  # Airflow's retry: allowed
    assert guard_output(str(out), {**config, "progress_every_s": 60.0}, overwrite=False) == "rerun"  # how it runs
    assert (out / "README.md").exists()
    other = {**config, "window": 64}
    with pytest.raises(OutputInUseError, match=r"config.window 128 -> 64\); pass --overwrite true"):
        guard_output(str(out), other, overwrite=False)
    dump.write_text("<mediawiki>another dump</mediawiki>")  # the same path, another file
    with pytest.raises(OutputInUseError, match="input.size 12 -> 35"):
        guard_output(str(out), config, overwrite=False)
    assert guard_output(str(out), other, overwrite=True) == "overwritten"
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [RUN_RECORD]  # nothing of the old corpus
    (out / RUN_RECORD).unlink()
    (out / "manifest.json").write_text(json.dumps({"config": {**other, "output": "elsewhere"}}))
    assert guard_output(str(out), other, overwrite=False) == "rerun"  # a corpus from before the record: its manifest
    record = json.loads((out / RUN_RECORD).read_text())
    record["config"]["job"] = "twopass"  # the record of an earlier version, with its retired --job option
    (out / RUN_RECORD).write_text(json.dumps(record))
    assert guard_output(str(out), other, overwrite=False) == "rerun"
    retired = {"num_shards": 3, "passages_per_shard": 250000, "alias_rows_per_shard": 2000000,
               "description_shards": 0, "descriptions_per_shard": 100000, "max_join_group": 10000}
    record["config"].update(retired)  # and the shuffle job's options, removed since
    (out / RUN_RECORD).write_text(json.dumps(record))
    assert guard_output(str(out), other, overwrite=False) == "rerun"
    assert not set(retired) & set(json.loads((out / RUN_RECORD).read_text())["config"])  # this run's record: none
    (out / RUN_RECORD).unlink()  # a corpus of an earlier version with no record: its manifest holds them too
    (out / "manifest.json").write_text(json.dumps({"config": {**other, **retired, "job": "shuffle"}}))
    assert guard_output(str(out), other, overwrite=False) == "rerun"
    (out / RUN_RECORD).unlink()
    (out / "manifest.json").write_text(json.dumps({"config": {**other, **retired, "window": 32}}))
    with pytest.raises(OutputInUseError, match=r"\(config.window 32 -> 64\); pass"):  # what differs is still seen
        guard_output(str(out), other, overwrite=False)
    stranger = tmp_path / "home"
    stranger.mkdir()
    (stranger / "thesis.tex").write_text("mine")
    for overwrite in (False, True):  # not a corpus: never emptied
        with pytest.raises(OutputInUseError, match="no wikiedm corpus; choose a new or empty folder"):
            guard_output(str(stranger), config, overwrite=overwrite)
    assert (stranger / "thesis.tex").read_text() == "mine"


# ----------------------------------------------------------------------------- what the corpus teaches


def test_the_dataset_card_and_the_dag_teach_commands_that_parse(sample_corpus, capsys, tmp_path):
    import re
    import shlex

    from wikiedm.cli import check

    run = tmp_path / "run"  # a fresh run folder: the pretrain check reads what a folder holds
    card = (sample_corpus / "README.md").read_text()
    commands = re.findall(r"`(wikiedm [^`]+)`", card)
    assert any(c.startswith("wikiedm pretrain") for c in commands) and any(c.startswith("wikiedm validate") for c in commands)
    assert "deepspeed trainer/pretrain.py" not in card and "python -m pipelines.validate" not in card
    for command in commands:
        words = shlex.split(command.replace("path/to/this/folder", str(sample_corpus)).replace("RUN", str(run)))
        check(words[1], words[2:])  # raises on a retired spelling
    from dags.wiki_corpus_tasks import train_command

    params = {"train_config": "configs/pretrain/tiny.yaml", "train_max_steps": 5, "train_num_procs": 2}
    for launcher in ("", "python"):
        cmd = train_command({**params, "train_launcher": launcher}, str(sample_corpus), str(run), sys.executable, 29555)
        assert cmd[1:4] == ["-m", "wikiedm.cli", "pretrain"] and "--data" not in cmd and "--output_dir" not in cmd
        check("pretrain", cmd[4:])
    for launcher, ranks in (("torchrun", "--nproc_per_node"), ("/opt/venv/bin/deepspeed", "--num_gpus")):
        cmd = train_command({**params, "train_launcher": launcher}, str(sample_corpus), str(run), sys.executable, 29555)
        assert cmd[:3] == [launcher, ranks, "2"] and cmd[5].endswith("trainer/pretrain.py")
        check("pretrain", cmd[6:])


def test_the_checks_import_no_torch_deepspeed_or_beam():
    script = ("import sys, wikiedm.cli as c\n"
              "for name in c.SUBCOMMANDS: c.light_parser(name)\n"
              "print(sorted(m for m in ('torch', 'deepspeed', 'apache_beam', 'matplotlib', 'transformers') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr[-2000:]


def test_a_dry_run_checks_the_output_but_never_waits_minutes_on_an_unreachable_store(tmp_path, caplog):
    """A dry run refuses a folder in use as a real run does, writes nothing, and when the store does not answer
    in time (gs:// offline: the client retries for minutes) it says so and goes on."""
    import time

    from pipelines.output_guard import RUN_RECORD, OutputInUseError, guard_output_for_dry_run

    (tmp_path / "someone-else.txt").write_text("theirs")
    with pytest.raises(OutputInUseError, match="no wikiedm corpus"):
        guard_output_for_dry_run(str(tmp_path), {"input": ""}, overwrite=True)
    assert guard_output_for_dry_run(str(tmp_path / "new"), {"input": ""}, overwrite=False) == "new"
    assert not (tmp_path / "new" / RUN_RECORD).exists()
    started = time.monotonic()
    with caplog.at_level("WARNING"):
        found = guard_output_for_dry_run("gs://wikiedm-dry-run/out", {"input": ""}, overwrite=False, wait_s=1.0)
    assert time.monotonic() - started < 10
    if found == "unchecked":  # offline, as here; with network and no credentials the store refuses quickly
        assert "was not checked" in caplog.text or "could not be checked" in caplog.text


def test_a_dry_run_on_the_direct_runner_builds_the_graph_and_writes_nothing(tmp_path, sample_dump):
    """Beam's DirectRunner ignores --dry_run and runs the whole job: the job itself must not call it."""
    out = tmp_path / "out"
    proc, _ = wikiedm("corpus", "--input", sample_dump, "--output", str(out), "--dry_run", "true")
    assert proc.returncode == 0, proc.stderr
    assert "the job graph was built; nothing was run or written" in proc.stdout
    assert not out.exists()


def test_an_output_that_is_a_file_is_one_line(tmp_path, sample_dump):
    a_file = tmp_path / "out"
    a_file.write_text("not a folder")
    proc, _ = wikiedm("corpus", "--input", sample_dump, "--output", str(a_file))
    assert proc.returncode == 2 and a_file.read_text() == "not a folder", proc.stderr
    assert proc.stderr == f"wikiedm corpus: error: --output {a_file} is a file: the corpus is a folder; choose a new or empty folder\n"


def test_linker_vocab_refuses_a_negative_size_in_one_line(tmp_path, sample_corpus):
    proc, _ = wikiedm("linker-vocab", "--corpus", str(sample_corpus), "--output", str(tmp_path / "v.txt"), "--size", "-5")
    assert proc.returncode == 2 and not (tmp_path / "v.txt").exists(), proc.stderr  # was an OverflowError
    assert proc.stderr == "wikiedm linker-vocab: error: --size must be >= 1, got -5\n"


@pytest.mark.parametrize("command, says", [
    (["train-linker", "--lr", "-1"], "--lr must be >= 0, got -1.0"),  # was torch's ValueError, a traceback
    (["fetch", "--wiki", "enwiki", "--date", "20200101", "--retries", "-1"], "--retries must be >= 0, got -1"),
])
def test_a_negative_rate_or_count_is_one_line(tmp_path, sample_corpus, command, says):
    name, *argv = command
    paths = {"train-linker": ["--corpus", str(sample_corpus), "--output", str(tmp_path / "o")],
             "fetch": ["--output", str(tmp_path / "o")]}[name]
    proc, seconds = wikiedm(name, *paths, *argv)
    assert proc.returncode == 2 and seconds < FAST_S and not (tmp_path / "o").exists(), proc.stderr
    assert proc.stderr == f"wikiedm {name}: error: {says}\n"
