"""The command lines of the linker's subcommands, in one light module (no torch): ``wikiedm`` checks a command
line here before it imports the command, and each command (linker.cli, linker.train, linker.evaluate) parses
its own with the same parser. Nothing here imports a command module, so none of them imports another's.

    link-text / interactive / index-linker / evaluate-linker   the shared parser over LinkerConfig (+ their flags)
    train-linker                                               TrainConfig
    linker-vocab                                               VocabConfig
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from linker.link import LinkerConfig
from wikiedm.config import ConfigError, ConfigParser
from wikiedm.fields import option

BARE_FLAGS = ("--fast", "--interactive", "--rebuild")  # BLINK's switches, accepted without a value
# The keys every linker command's --help shows (--help-config: all of them).
COMMON = ("model", "corpus", "kb", "vocab", "encodings", "top_k", "crossencoder", "fast", "threshold", "device")
HYPERLINK = "hyperlink"  # schemas.corpus.MentionSource.HYPERLINK: the mention source of a Wikipedia link
DEFAULT_KS = (1, 5, 10, 100)  # evaluate-linker's recall@k cut-offs (linker.evaluate uses the same)


def expand_bare_flags(argv: list[str]) -> list[str]:
    """``--fast`` -> ``--fast true`` when no value follows (BLINK's command lines); ``-i`` -> ``--interactive``."""
    out = []
    for i, arg in enumerate(argv):
        arg = "--interactive" if arg == "-i" else arg
        out.append(arg)
        following = argv[i + 1] if i + 1 < len(argv) else None
        if arg in BARE_FLAGS and (following is None or following.startswith("-")):
            out.append("true")
    return out


class LinkerParser(ConfigParser):
    """The shared parser over LinkerConfig: BLINK's bare switches are expanded before parsing."""

    def parse_with_extras(self, argv: list[str]):
        return super().parse_with_extras(expand_bare_flags(argv))

    def parse(self, argv: list[str]):
        return super().parse(expand_bare_flags(argv))


def linker_parser(prog: str, description: str, aliases: dict[str, str] | None = None) -> LinkerParser:
    """The shared config parser over LinkerConfig, to which a command adds its own flags."""
    return LinkerParser(LinkerConfig, prog=prog, description=description, common=COMMON, pass_unknown=False,
                        aliases=aliases)


def linker_config(parser, argv: list[str]):
    """(the validated LinkerConfig, the command's own flags) from ``argv``; anything else is an error."""
    config, extras, rest = parser.parse_with_extras(argv)
    if rest:
        raise ConfigError(f"unexpected argument(s): {' '.join(rest)}")
    config.validate()
    return config, extras


# ----------------------------------------------------------------------------- each subcommand's parser


def index_parser(prog: str = "wikiedm index-linker") -> LinkerParser:
    parser = linker_parser(prog, "prepare a linker folder once: the knowledge base, the entity encodings and index, "
                                 "the alias candidate index, the fitted combination",
                           aliases={"output": "encodings"})  # what it writes is --output, as for every command
    parser.add_bool("--rebuild", default=False, help="rebuild everything even when up to date")
    return parser


def link_parser(prog: str = "wikiedm link-text") -> LinkerParser:
    parser = linker_parser(prog, "link the mentions of texts, of JSONL records or of BLINK mention records; or, with "
                                 "--interactive true, of lines typed on the terminal")
    parser.add_argument("--text", action="append", default=[], help="a text to link (repeatable)")
    parser.add_argument("--input", default="", metavar="FILE", help="JSONL file of records with a text")
    parser.add_argument("--text_field", default="text", help="field of a record holding its text")
    parser.add_argument("--mentions", default="", metavar="FILE",
                        help="JSONL file of BLINK mention records (context_left, mention, context_right[, label_id])")
    parser.parser.add_argument("--test_mentions", dest="mentions", help=argparse.SUPPRESS)  # BLINK's name
    parser.add_argument("--metrics", default="", metavar="FILE", help="with --mentions: write BLINK's metrics to this JSON file")
    parser.add_bool("--interactive", default=False, help="read lines of text from stdin, print the linked mentions")
    parser.add_argument("--output", default="", metavar="FILE", help="write the JSONL output here; '': standard output")
    return parser


def interactive_parser(prog: str = "wikiedm interactive") -> LinkerParser:
    return link_parser(prog)


def evaluate_parser(prog: str = "wikiedm evaluate-linker") -> LinkerParser:
    parser = linker_parser(prog, "accuracy@1 and recall@k of the linker on a corpus split, system by system, "
                                 "beside the alias prior")
    parser.add_argument("--split", default="validation",
                        help="passages split: validation or train (train when validation has no hyperlink)")
    parser.add_argument("--sources", default=HYPERLINK, help="comma-separated mention sources counted as gold")
    parser.add_argument("--limit", type=int, default=0, help="mentions evaluated (0: all)")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="recall@k cut-offs")
    parser.add_argument("--output", default="", metavar="FILE", help="also write the metrics (JSON) to this file")
    parser.parser.add_argument("--json", dest="output", help=argparse.SUPPRESS)  # the old name of --output
    return parser


def check_linker_command(parser: LinkerParser, argv: list[str]) -> None:
    """What ``wikiedm`` checks before it imports a linker command: its command line, its config, its paths."""
    _, _, rest = parser.check(argv)
    if rest:
        raise ConfigError(f"unexpected argument(s): {' '.join(rest)}")


@dataclass
class BertShape:
    """Size of a bi-encoder trained from scratch (ignored with --init_model)."""

    hidden_size: int = option(256, "BERT width (BLINK's release: 1024)")
    num_hidden_layers: int = option(4, "BERT layers (BLINK's release: 24)")
    num_attention_heads: int = option(4, "attention heads")
    intermediate_size: int = option(1024, "feed-forward width")
    max_position_embeddings: int = option(512, "positions (>= max_cand_length)")
    dropout: float = option(0.1, "hidden and attention dropout (0 trains tiny models from scratch faster)")


@dataclass
class TrainConfig:
    corpus: str = option("", "corpus output folder (OUT) whose passages/train-* hyperlinks are the training data",
                         path="corpus", required=True)
    output: str = option("", "model folder to write (biencoder.bin, biencoder.json, vocab.txt, metrics.json)",
                         required=True, metavar="DIR")
    init_model: str = option("", "start from this model folder (BLINK's release or an earlier run); '': from scratch",
                             path="dir")
    vocab: str = option("", "WordPiece vocab.txt; '': the init model's, or one built from the corpus (from scratch)",
                        path="file")
    vocab_size: int = option(8000, "size of a vocabulary built from the corpus")
    bert: BertShape = option(BertShape(), "from-scratch model size")
    max_context_length: int = option(32, "context word pieces (BLINK: 32)")
    max_cand_length: int = option(128, "candidate word pieces (BLINK: 128)")
    sources: list = option([HYPERLINK], "mention sources used as gold (hyperlink; the heuristic labels are easy cases)")
    batch_size: int = option(32, "mentions per batch (in-batch negatives: the other mentions' entities)")
    max_steps: int = option(1000, "optimizer steps")
    lr: float = option(1e-4, "peak learning rate (BLINK fine-tuning: 1e-5..3e-5; from scratch: ~1e-3 for tiny models)")
    warmup_fraction: float = option(0.1, "linear warm-up, then linear decay")
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    grad_clip: float = option(1.0, "gradient norm clip")
    shuffle_buffer: int = option(10000, "examples in the streaming shuffle buffer")
    seed: int = option(1234, "random seed")
    eval_every: int = option(0, "steps between validation runs (0: only at the end)")
    eval_examples: int = option(2000, "validation mentions evaluated (0: all)")
    log_every: int = option(20, "steps between loss lines")
    torch_threads: int = option(0, "torch CPU threads; 0: default")
    device: str = option("auto", "torch device: auto (CUDA when available), cpu, cuda, cuda:1")

    def validate(self) -> None:
        if not self.corpus or not self.output:
            raise ValueError("--corpus and --output are required")
        if self.batch_size < 2:
            raise ValueError("--batch_size must be >= 2 (in-batch negatives)")
        if self.max_steps < 1:
            raise ValueError("--max_steps must be >= 1")
        for name in ("lr", "weight_decay", "grad_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_fraction <= 1.0:
            raise ValueError(f"--warmup_fraction must be in [0, 1], got {self.warmup_fraction}")
        for name in ("shuffle_buffer", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "eval_examples", "torch_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")


def train_parser(prog: str = "wikiedm train-linker") -> ConfigParser:
    return ConfigParser(TrainConfig, prog=prog, description="train a BLINK-format bi-encoder on a corpus's hyperlinks",
                        pass_unknown=False,
                        common=("corpus", "output", "init_model", "max_steps", "batch_size", "lr", "device"))


@dataclass
class VocabConfig:
    corpus: str = option("", "corpus output folder (OUT) the vocabulary is built from", path="corpus", required=True)
    output: str = option("", "vocab.txt to write", required=True, metavar="FILE")
    size: int = option(8000, "word pieces in the vocabulary")
    max_mentions: int = option(200_000, "training contexts read for the vocabulary")

    def validate(self) -> None:
        for name in ("size", "max_mentions"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")


def vocab_parser(prog: str = "wikiedm linker-vocab") -> ConfigParser:
    return ConfigParser(VocabConfig, prog=prog, pass_unknown=False, common=("size",),
                        description="build a WordPiece vocab.txt from a corpus's entities and contexts")
