"""wikiedm.config, the one config mechanism of the corpus job, the linker and the trainer."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest

from tests.conftest import REPO
from wikiedm.config import ConfigError, convert, parse_bool, parse_config
from wikiedm.fields import option


@dataclass
class Inner:
    ratio: float = option(0.5, "a float")
    names: tuple = option((), "words")


@dataclass
class Demo:
    flag: bool = option(False, "a switch")
    count: int = option(3, "an int")
    path: str | None = option(None, "optional text")
    stage: int | None = option(None, "optional int")
    betas: list[float] = option([0.9, 0.999], "floats")
    mode: str = option("auto", "text")
    inner: Inner = option(Inner(), "a section")


@pytest.mark.parametrize("word", ["true", "True", "TRUE", "yes", "Yes", "on", "1", True, 1])
def test_true_words(word):
    assert parse_bool(word) is True


@pytest.mark.parametrize("word", ["false", "False", "no", "NO", "off", "0", False, 0])
def test_false_words(word):
    assert parse_bool(word) is False


@pytest.mark.parametrize("word", ["maybe", "", "2", "t", 2])
def test_anything_else_is_not_a_boolean(word):
    with pytest.raises(ConfigError, match="not a boolean"):
        parse_bool(word)


def test_the_same_rule_on_the_command_line_in_yaml_and_in_the_linker(tmp_path):
    from linker.cli import _true

    (tmp_path / "c.yaml").write_text("flag: yes\n")
    assert parse_config(Demo, ["--config", str(tmp_path / "c.yaml")])[0].flag is True
    assert parse_config(Demo, ["--flag", "No"])[0].flag is False
    assert parse_config(Demo, ["--flag"])[0].flag is True  # alone: true
    assert parse_config(Demo, ["--flag", "--count", "4"])[0].flag is True
    assert _true("ON") is True and _true("0") is False
    with pytest.raises(ConfigError, match="flag: not a boolean"):
        parse_config(Demo, ["--flag=perhaps"])


def test_precedence_defaults_then_yaml_then_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("count: 7\nmode: fast\ninner:\n  ratio: 1e-4\n  names: [a, b]\n")
    cfg, rest = parse_config(Demo, ["--config", str(path), "--count=9", "--inner.names", "x,y", "--runner=Direct"])
    assert (cfg.count, cfg.mode, cfg.inner.ratio, cfg.inner.names) == (9, "fast", 1e-4, ("x", "y"))
    assert rest == ["--runner=Direct"]  # not a config flag: passed on (Beam's options)
    assert parse_config(Demo, [])[0] == Demo()


def test_values_take_their_fields_types():
    assert convert("1e-4", float) == 1e-4 and convert(300, float) == 300 and convert("300", float) == 300.0
    assert convert(False, str) == "false" and convert(3, str) == "3"
    assert convert("[0.9, 0.95]", list[float]) == [0.9, 0.95] and convert("0.9,0.95", list[float]) == [0.9, 0.95]
    assert convert("a, b", list) == ["a", "b"] and convert(["a"], tuple) == ("a",)
    for empty in ("", "null", "None", "~"):
        assert convert(empty, int | None) is None and convert(empty, str | None) is None
    assert convert("none", str) == "none"  # a plain text field keeps the word (e.g. --index none)
    assert convert("2", int | None) == 2 and convert(4.0, int) == 4
    for bad, tp in (("x", int), ("1.5", int), (1.5, int), ("x", float), (True, int), ([1], str)):
        with pytest.raises(ConfigError, match="key: .* is not a valid"):
            convert(bad, tp, "key")


def test_unknown_keys_fail_in_the_file_and_on_the_command_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner:\n  ratoi: 2\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown config key 'inner.ratoi'; did you mean 'inner.ratio'\?"):
        parse_config(Demo, ["--config", str(path)])
    with pytest.raises(ConfigError, match="unknown option --cuont; did you mean --count"):
        parse_config(Demo, ["--cuont", "1"], pass_unknown=False)
    with pytest.raises(ConfigError, match="unexpected argument 'stray'"):
        parse_config(Demo, ["stray"], pass_unknown=False)
    path.write_text("inner: 3\n")
    with pytest.raises(ConfigError, match="inner must be a mapping"):
        parse_config(Demo, ["--config", str(path)])


@dataclass
class InnerWithRemoved(Inner):
    REMOVED_OPTIONS: ClassVar[dict[str, str]] = {"spread": "set --inner.ratio instead"}


@dataclass
class DemoWithRemoved(Demo):
    REMOVED_OPTIONS: ClassVar[dict[str, str]] = {"shards": "files are written one per unit now"}
    inner: InnerWithRemoved = option(InnerWithRemoved(), "a section")


def test_a_removed_key_is_one_line_saying_what_replaced_it_in_the_file_and_on_the_command_line(tmp_path):
    """A key a config lists in REMOVED_OPTIONS (its own, or a section's) is neither unknown nor accepted: one line
    names it and what replaced it, with or without Beam's pass-through, in either flag spelling and in YAML."""
    for pass_unknown in (True, False):
        for argv in (["--shards", "4"], ["--shards=4"], ["--count", "1", "--shards"]):
            with pytest.raises(ConfigError, match=r"^--shards was removed: files are written one per unit now$"):
                parse_config(DemoWithRemoved, argv, pass_unknown=pass_unknown)
        with pytest.raises(ConfigError, match=r"^--inner.spread was removed: set --inner.ratio instead$"):
            parse_config(DemoWithRemoved, ["--inner.spread", "2"], pass_unknown=pass_unknown)
    path = tmp_path / "c.yaml"
    path.write_text("count: 2\nshards: 4\n")
    with pytest.raises(ConfigError, match=r"c.yaml: config key 'shards' was removed: files are written one per unit"):
        parse_config(DemoWithRemoved, ["--config", str(path)])
    path.write_text("inner:\n  spread: 2\n")
    with pytest.raises(ConfigError, match=r"c.yaml: config key 'inner.spread' was removed: set --inner.ratio instead"):
        parse_config(DemoWithRemoved, ["--config", str(path)])
    with pytest.raises(ConfigError, match="unknown option --shards"):  # a config that never had it: unknown
        parse_config(Demo, ["--shards", "4"], pass_unknown=False)
    cfg, rest = parse_config(DemoWithRemoved, ["--count", "5", "--runner", "Direct"])
    assert cfg.count == 5 and rest == ["--runner", "Direct"]


# ----------------------------------------------------------------------------- the documented command lines


def test_trainer_command_lines_of_the_readme_makefile_and_dag():
    from trainer.pretrain import parse_args

    make_demo = parse_args(["--num_gpus", "2", "--config", "configs/pretrain/tiny.yaml", "--corpus", "out/demo", "--output",
                            "runs/demo", "--max_steps", "40", "--data.overfit_passages", "64", "--train.log_every", "2"])
    assert (make_demo.data.path, make_demo.train.output_dir, make_demo.train.max_steps) == ("out/demo", "runs/demo", 40)
    assert (make_demo.data.overfit_passages, make_demo.train.log_every, make_demo.model.d_model) == (64, 2, 64)
    readme = parse_args(["--local_rank=0", "--config", "configs/pretrain/base.yaml", "--data", "OUT", "--output_dir",
                         "RUN", "--deepspeed_config", "configs/deepspeed/zero3.json", "--optim.lr", "3e-4",
                         "--model.entity_dim=64", "--model.memory_partition", "replicated", "--train.bf16", "true"])
    assert readme.train.deepspeed_config == "configs/deepspeed/zero3.json" and readme.optim.lr == 3e-4
    assert (readme.model.entity_dim, readme.model.memory_partition, readme.train.bf16) == (64, "replicated", "true")
    launcher = parse_args(["--local_rank", "1", "--deepspeed", "--config", "configs/pretrain/tiny.yaml",
                           "--deepspeed", "configs/deepspeed/zero1.json", "--zero_stage", "3", "--seed=5",
                           "--init_from", "/bart", "--train.eval_every", "0", "--optim.betas", "[0.9, 0.95]"])
    assert launcher.train.deepspeed_config == "configs/deepspeed/zero1.json"  # a bare --deepspeed is dropped
    assert (launcher.train.zero_stage, launcher.train.seed, launcher.model.init_from) == (3, 5, "/bart")
    assert launcher.train.eval_every == 0 and launcher.optim.betas == [0.9, 0.95]
    with pytest.raises(SystemExit, match="unknown option --model.nope"):
        parse_args(["--model.nope=1"])
    with pytest.raises(SystemExit, match="unexpected argument"):
        parse_args(["model.lr=1"])


def test_every_shipped_config_file_parses():
    from pipelines.config import WikiMentionsConfig
    from trainer.config import load_config

    for path in sorted((REPO / "configs" / "pretrain").glob("*.yaml")):
        assert load_config(str(path)).model.d_model > 0
    for path in sorted((REPO / "configs" / "pipeline").glob("*.yaml")):
        cfg, rest = parse_config(WikiMentionsConfig, ["--config", str(path), "--input", "I", "--output", "O"])
        cfg.validate()
        assert rest == [] and isinstance(cfg.progress_every_s, int)  # 60 stays 60: the manifest records it


def test_trainer_help_config_and_the_jobs_help_come_from_one_parser(capsys):
    from pipelines.config import WikiMentionsConfig
    from trainer.config import help_text

    with pytest.raises(SystemExit) as exit_:
        parse_config(WikiMentionsConfig, ["--help-config"], prog="wikiedm corpus")
    assert exit_.value.code == 0
    job_help = capsys.readouterr().out
    trainer_help = subprocess.run([sys.executable, "-m", "trainer.pretrain", "--help-config"], cwd=REPO,
                                  capture_output=True, text=True, timeout=300, check=True).stdout
    assert trainer_help.split("\noptions:\n", 1)[1] == help_text().split("\noptions:\n", 1)[1]
    for text, section, key in ((job_help, "labels.*", "--labels.min_prior VALUE"),
                               (trainer_help, "optim.*", "--optim.lr VALUE")):
        assert text.startswith("usage: ") and "[--config FILE.yaml] [--KEY VALUE | --KEY=VALUE ...]" in text
        assert f"\n{section}:\n" in text and key in text and "(default: " in text
    assert "peak learning rate (default: 0.0001)" in trainer_help
    assert "[other options]" in job_help and "[other options]" not in trainer_help  # Beam's options pass through
