"""The command-line conventions of every `wikiedm` subcommand, read from what a user sees (`wikiedm SUB --help`,
run in this process): usage lines name `wikiedm SUB`; every option has help text and shows its default (or says it
is required); booleans read --name true|false; --help shows the common options and --help-config every config key;
the corpus job's --help lists the runner options; the old spellings keep working and are not listed."""
from __future__ import annotations

import re
import shutil

import pytest

from wikiedm.cli import SUBCOMMANDS, main

# The subcommands over a config class (wikiedm.config.ConfigParser): they have --help-config.
CONFIG_COMMANDS = ("corpus", "link", "link-text", "interactive", "index-linker", "train-linker", "evaluate-linker",
                   "pretrain", "train-tokenizer")
HELP_FLAGS = ("-h, --help", "--help-config")
EPILOGS = ("runner options", "every config key")  # lines after which a help text lists no option of its own


def help_of(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0, argv
    out = capsys.readouterr()
    assert out.err == "", (argv, out.err)
    return out.out


def listed_options(text: str) -> list[tuple[str, str]]:
    """(invocation, help text) of each option an argparse help text lists, its epilog left out."""
    options: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(EPILOGS):
            break
        head = re.match(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$", line)
        if head:
            options.append([head.group(1), head.group(2) or ""])
        elif options and re.match(r"^ {4,}\S", line):  # the help text, continued (or begun under a long invocation)
            options[-1][1] = (options[-1][1] + " " + line.strip()).strip()
    return [(flag, text) for flag, text in options]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_option_has_help_text_and_shows_its_default(capsys, name):
    texts = [help_of(capsys, name, "--help")]
    if name in CONFIG_COMMANDS:
        texts.append(help_of(capsys, name, "--help-config"))
    for text in texts:
        assert text.startswith(f"usage: wikiedm {name} ") or text.startswith(f"usage: wikiedm {name}\n"), text[:200]
        options = listed_options(text)
        assert options, text
        for flag, help_text in options:
            assert help_text, f"wikiedm {name}: {flag} has no help text"
            if flag not in HELP_FLAGS:
                assert "(default: " in help_text or "(required)" in help_text, f"wikiedm {name}: {flag}: {help_text}"
            if re.search(r"\(default: (true|false)\)", help_text):  # a boolean: --name true|false
                assert flag.endswith("[true|false]"), f"wikiedm {name}: {flag}"


def test_the_walk_catches_an_option_without_help():
    text = ("usage: wikiedm x [-h] [--a A] [--bb BB]\n\noptions:\n  -h, --help  show this help\n  --a A\n"
            "  --bb BB     the bb (default: 3)\n  --a_long_flag_name A_LONG_FLAG_NAME\n                the long one\n")
    assert listed_options(text) == [("-h, --help", "show this help"), ("--a A", ""), ("--bb BB", "the bb (default: 3)"),
                                    ("--a_long_flag_name A_LONG_FLAG_NAME", "the long one")]


@pytest.mark.parametrize("name", CONFIG_COMMANDS)
def test_help_shows_the_common_options_and_help_config_every_key(capsys, name):
    short, full = help_of(capsys, name, "--help"), help_of(capsys, name, "--help-config")
    assert short != full
    assert "--help-config" in short and "every config key" in short
    shown = {re.findall(r"--[\w.-]+", flag)[0] for flag, _ in listed_options(short)}
    assert shown < {f for flag, _ in listed_options(full) for f in re.findall(r"--[\w.-]+", flag)}
    if name == "pretrain":
        from trainer.config import Config

        cls = Config
        assert {"--config", "--corpus", "--output", "--max_steps", "--num_gpus", "--num_nodes", "--hostfile",
                "--master_port"} <= shown
    elif name in ("corpus", "link"):
        from pipelines.config import WikiMentionsConfig
        from pipelines.link_mentions import LinkMentionsConfig

        cls = WikiMentionsConfig if name == "corpus" else LinkMentionsConfig
        assert {"--input", "--output"} <= shown
    elif name == "train-tokenizer":
        from wikiedm.train_tokenizer import TrainTokenizerConfig

        cls = TrainTokenizerConfig
        assert {"--corpus", "--output", "--vocab_size", "--overwrite"} <= shown
    else:
        from linker.link import LinkerConfig
        from linker.train import TrainConfig

        cls = TrainConfig if name == "train-linker" else LinkerConfig
        assert "--corpus" in shown
    from wikiedm.config import known_keys

    for key in known_keys(cls):
        assert f"--{key} " in full, (name, key)


@pytest.mark.parametrize("name", ["corpus", "link"])
def test_the_beam_jobs_help_lists_the_runner_options_beam_knows(capsys, name):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.launch import RUNNER_OPTIONS

    text = help_of(capsys, name, "--help")
    beam_knows = set(PipelineOptions([]).get_all_options(drop_default=False))
    for flag, _ in RUNNER_OPTIONS:
        assert f"\n  {flag} " in text
        assert flag.split()[0][2:] in beam_knows, flag
    for flag in ("--runner", "--dry_run", "--setup_file", "--project", "--region", "--temp_location",
                 "--num_workers", "--direct_num_workers", "--direct_running_mode"):
        assert f"  {flag} " in text, flag


def test_dry_run_reads_true_and_false():
    from apache_beam.options.pipeline_options import StandardOptions, TestOptions

    from pipelines.launch import beam_options

    for given, expected in ((["--dry_run", "true"], True), (["--dry_run", "false"], False), (["--dry_run=No"], False),
                            ([], False)):
        assert beam_options(given).view_as(TestOptions).dry_run is expected, given
    assert beam_options(["--runner", "Direct"]).view_as(StandardOptions).runner == "DirectRunner"  # as `beam run`
    with pytest.raises(ValueError, match="not a boolean"):
        beam_options(["--dry_run", "maybe"])


def test_the_trainer_reads_corpus_and_output_and_still_the_old_spellings(capsys):
    from trainer.pretrain import parse_args

    new = parse_args(["--corpus", "OUT", "--output", "RUN", "--train.plot", "false", "--data.verify_sha256"])
    old = parse_args(["--data", "OUT", "--output_dir", "RUN", "--train.plot", "no", "--data.verify_sha256", "1"])
    assert new == old and (new.data.path, new.train.output_dir, new.train.plot) == ("OUT", "RUN", False)
    for text in (help_of(capsys, "pretrain", "--help"), help_of(capsys, "pretrain", "--help-config")):
        assert not re.search(r"--data\b(?!\.)", text) and "--output_dir" not in text


def test_crossencoder_reads_true_false_and_keeps_yes_no():
    from linker.link import LinkerConfig
    from wikiedm.config import parse_config

    def crossencoder(value):
        return parse_config(LinkerConfig, ["--model", "M", "--corpus", "C", "--crossencoder", value])[0].crossencoder

    assert [crossencoder(v) for v in ("true", "false", "yes", "no", "On", "0", "auto")] == \
        ["yes", "no", "yes", "no", "yes", "no", "auto"]
    config, _ = parse_config(LinkerConfig, ["--model", "M", "--corpus", "C", "--crossencoder", "sometimes"])
    with pytest.raises(ValueError, match="auto, true or false"):
        config.validate()


def test_the_launcher_command_runs_the_installed_trainer():
    import importlib.util
    import sys
    from pathlib import Path

    from trainer.launch import launcher_command

    argv = ["--config", "C.yaml", "--num_gpus", "2", "--corpus", "OUT", "--master_port=29600", "--num_nodes", "1",
            "--hostfile", "hosts", "--output", "RUN"]
    cmd = launcher_command(argv, environ={})
    script = importlib.util.find_spec("trainer.pretrain").origin
    assert Path(script).is_file()
    assert cmd == [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus=2", "--num_nodes=1",
                   "--hostfile=hosts", "--master_port=29600", script, "--config", "C.yaml", "--corpus", "OUT",
                   "--output", "RUN"]
    assert launcher_command(["--corpus", "OUT"], environ={}) is None  # one process, no launcher
    assert launcher_command(argv, environ={"LOCAL_RANK": "0"}) is None  # a rank the launcher started
    assert "--master_port=29700" in launcher_command(["--num_gpus", "2"], environ={"MASTER_PORT": "29700"})


def test_report_to_names_its_sinks():
    from trainer.metrics import report_sinks

    assert report_sinks(["auto"]) == ["tensorboard"]  # installed here (requirements.txt)
    assert report_sinks(["none"]) == [] and report_sinks("tensorboard,tensorboard".split(",")) == ["tensorboard"]
    with pytest.raises(SystemExit, match="unknown mlflow"):
        report_sinks(["mlflow"])
    if importlib_util_missing("wandb"):
        with pytest.raises(SystemExit, match="wandb package is not installed"):
            report_sinks(["tensorboard", "wandb"])


def importlib_util_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


# ----------------------------------------------------------------------------- the plain commands, run for real


def test_validate_sha256_true_false_and_the_old_spellings(sample_corpus, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(sample_corpus, corpus)
    config = corpus / "tokenizer" / "tokenizer_config.json"
    text = config.read_text()
    config.write_text(text.replace("{", "[", 1))  # the same size, another sha256
    for argv, code in ((["--corpus", str(corpus)], 1), (["--corpus", str(corpus), "--sha256", "false"], 0),
                       (["--corpus", str(corpus), "--sha256", "no"], 0), ([str(corpus), "--no_sha256"], 0),
                       ([str(corpus)], 1)):
        assert main(["validate", *argv]) == code, argv
        assert ("does not match the manifest" in capsys.readouterr().err) == (code == 1)
    assert "--no_sha256" not in help_of(capsys, "validate", "--help")
    assert main(["validate"]) == 2  # no corpus: a usage error
    assert "--corpus is required" in capsys.readouterr().err


def test_report_card_and_sample_take_corpus_and_output(sample_corpus, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(sample_corpus, corpus)
    for argv, png in ((["--corpus", str(corpus), "--output", str(tmp_path / "a.png")], tmp_path / "a.png"),
                      ([str(corpus), "--png", str(tmp_path / "b.png")], tmp_path / "b.png"),
                      (["--corpus", str(corpus)], corpus / "label_coverage.png")):
        assert main(["report", *argv]) == 0
        assert png.stat().st_size > 0 and capsys.readouterr().out.strip() == str(png)
    (corpus / "README.md").unlink(missing_ok=True)
    assert main(["card", "--corpus", str(corpus)]) == 0 and (corpus / "README.md").stat().st_size > 0
    capsys.readouterr()
    assert main(["sample", "--output", str(tmp_path / "s.xml"), "--per_kind", "3"]) == 0
    assert main(["sample", str(tmp_path / "t.xml"), "--per_kind", "3"]) == 0  # the old positional
    assert (tmp_path / "s.xml").read_bytes() == (tmp_path / "t.xml").read_bytes()
    for name in ("report", "card", "sample"):
        text = help_of(capsys, name, "--help")
        assert "--png" not in text and "positional" not in text
