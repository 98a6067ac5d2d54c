"""The ``wikiedm`` command: every user-facing job of the toolkit as one subcommand.

    wikiedm corpus --input DUMP --output OUT [--config FILE.yaml] [--runner Direct ...]
    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT --output RUN [--num_gpus N]
    wikiedm SUBCOMMAND --help            (the common options; --help-config: every config key)

The conventions of every subcommand: the corpus folder a command reads is --corpus DIR, where it
writes is --output; booleans are --name true|false (yes/no, 1/0 too; --name alone means true).
Each subcommand runs its module's ``main()`` as ``python -m MODULE ARGS`` does (the same code and
command line). Modules are imported only when their subcommand runs, so ``wikiedm --help`` is
instant and needs neither Beam nor torch.
"""
from __future__ import annotations

import importlib
import sys
from typing import NamedTuple


class Subcommand(NamedTuple):
    module: str  # its main() runs
    fixed_args: tuple[str, ...]  # put before the user's arguments
    summary: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "corpus": Subcommand("pipelines.wiki_mentions", (), "dump -> passages, alias table, entity vocabulary, descriptions (Beam)"),
    "train-tokenizer": Subcommand("wikiedm.train_tokenizer", (), "learn a byte-level BPE tokenizer of a corpus's own language (for corpus --tokenizer)"),
    "link": Subcommand("pipelines.link_mentions", (), "link the mentions of a corpus's passages with a BLINK model (Beam)"),
    "link-text": Subcommand("linker.cli", ("link",), "link mentions in text, JSONL or BLINK mention records"),
    "interactive": Subcommand("linker.cli", ("interactive",), "type text, see its linked mentions"),
    "index-linker": Subcommand("linker.cli", ("index",), "prepare a linker folder: KB, alias candidate index, FAISS index"),
    "linker-vocab": Subcommand("linker.cli", ("vocab",), "build a WordPiece vocab.txt from a corpus (a bi-encoder trained from scratch)"),
    "train-linker": Subcommand("linker.train", (), "train a BLINK-format bi-encoder on a corpus's hyperlinks"),
    "evaluate-linker": Subcommand("linker.evaluate", (), "accuracy of bi-encoder, cross-encoder, linker and alias prior"),
    "pretrain": Subcommand("trainer.pretrain", (), "EDMem pre-training on DeepSpeed (--num_gpus N: N ranks)"),
    "evaluate": Subcommand("trainer.evaluate", (), "fixed evaluation of a checkpoint on a corpus's validation hyperlinks"),
    "export": Subcommand("trainer.export", (), "a checkpoint -> one safetensors file with the full entity table"),
    "validate": Subcommand("pipelines.validate", (), "check a corpus folder against its manifest.json"),
    "report": Subcommand("pipelines.report", (), "label coverage plot and summary of a corpus folder"),
    "card": Subcommand("pipelines.dataset_card", (), "(re)write a corpus folder's dataset card README.md"),
    "fetch": Subcommand("pipelines.fetch_dump", (), "download a dump and verify it against Wikimedia's checksums"),
    "sample": Subcommand("pipelines.sample_dump", (), "write the project's own small sample dump"),
    "beam": Subcommand("pipelines.cli", (), "run any Beam pipeline file or module (`wikiedm beam run FILE.py ...`)"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [__doc__.strip(), "", "subcommands:"]
    lines += [f"  {name:<{width}}  {sub.summary}  [python -m {' '.join((sub.module, *sub.fixed_args))}]"
              for name, sub in SUBCOMMANDS.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        sys.stderr.write(f"wikiedm: unknown subcommand {name!r}\n\n{usage()}")
        return 2
    sub = SUBCOMMANDS[name]
    # argv[0] names the subcommand, so each module's argparse usage reads `wikiedm NAME ...`.
    saved_argv = sys.argv
    sys.argv = [f"wikiedm {name}", *sub.fixed_args, *rest]
    try:  # the module's own main(), which reads sys.argv as under `python -m MODULE`
        returned = importlib.import_module(sub.module).main()
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or 0
        sys.stderr.write(f"{code}\n")
        return 1
    finally:  # a caller in the same process (a test, a notebook) keeps its own argv
        sys.argv = saved_argv
    return returned if isinstance(returned, int) else 0


if __name__ == "__main__":
    sys.exit(main())
