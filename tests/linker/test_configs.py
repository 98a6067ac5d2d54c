"""configs/linker/*.yaml parse into the linker's dataclass configs (a typo fails here, not in a job)."""
from __future__ import annotations

import pytest

from pipelines.config import parse_config
from tests.conftest import REPO

CONFIGS = sorted((REPO / "configs" / "linker").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_linker_config_files_parse(path):
    from linker.train import TrainConfig
    from pipelines.link_mentions import LinkMentionsConfig

    if path.name.startswith(("train", "finetune")):
        config, rest = parse_config(TrainConfig, ["--config", str(path), "--corpus", "C", "--output", "O"])
    else:
        config, rest = parse_config(LinkMentionsConfig, ["--config", str(path), "--model", "M", "--corpus", "C",
                                                         "--input", "I", "--output", "O"])
    assert rest == []
    config.validate()


def test_there_are_linker_configs():
    assert {p.name for p in CONFIGS} >= {"blink_large.yaml", "train_tiny.yaml"}
