"""``wikiedm link``'s configuration and command line, in a light module (no Beam): ``wikiedm`` checks a command
line here before it imports the job. The job is the linker's (LinkerConfig) over JSONL records, so this module,
like pipelines.transforms.blink, imports linker.link."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from linker.link import LinkerConfig
from pipelines.config import check_beam_options, runner_help
from wikiedm.config import ConfigParser
from wikiedm.fields import option

# The keys `wikiedm link --help` shows (--help-config: all of them).
COMMON = ("input", "output", "model", "corpus", "kb", "text_field", "tokenizer", "threshold", "top_k", "fast",
          "crossencoder", "num_shards")


@dataclass
class LinkMentionsConfig(LinkerConfig):
    """The linker's options (model, corpus, top_k, crossencoder, detector.*, index.*) plus the job's."""

    input: str = option("", "JSONL file(s) (a glob; local or gs://...), one JSON object per line", required=True,
                        metavar="FILE")
    output: str = option("", "output folder", required=True, metavar="DIR")
    text_field: str = option("text", "record field holding the text to link")
    mentions_field: str = option("mentions", "record field the mentions are written to")
    tokenizer: str = option("", "tokenizer for token spans and token_ids ('gpt2-bpe', OUT/tokenizer, a local path); '': none")
    num_shards: int = option(1, "output JSONL shards")
    records_per_batch: int = option(32, "records linked together (bi-encoder batches span records)")

    def validate(self) -> None:
        super().validate()
        if not self.input or not self.output:
            raise ValueError("--input and --output are required")
        if self.num_shards < 1 or self.records_per_batch < 1:
            raise ValueError("--num_shards and --records_per_batch must be >= 1")

    def linker_config(self) -> LinkerConfig:
        names = {f.name for f in dataclasses.fields(LinkerConfig)}
        return LinkerConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names} |
                            {"index": self.index, "detector": self.detector})


def link_parser(prog: str = "wikiedm link") -> ConfigParser:
    return ConfigParser(LinkMentionsConfig, prog=prog, common=COMMON, epilog=runner_help(),
                        description="link the mentions of JSONL records with a BLINK model (Beam)")


def check_link_command(prog: str, argv: list[str]) -> None:
    parser = link_parser(prog)
    _, _, rest = parser.check(argv)
    check_beam_options(rest, parser.option_strings())
