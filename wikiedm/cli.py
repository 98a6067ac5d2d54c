"""The ``wikiedm`` command: every user-facing job of the toolkit as one subcommand.

    wikiedm corpus --input DUMP --output OUT [--config FILE.yaml] [--runner Direct ...]
    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT --output RUN [--num_gpus N]
    wikiedm SUBCOMMAND --help            (the common options; --help-config: every config key)

The conventions of every subcommand: the corpus folder a command reads is --corpus DIR, where it
writes is --output; booleans are --name true|false (yes/no, 1/0 too; --name alone means true).
Each subcommand runs its module's ``main()`` as ``python -m MODULE ARGS`` does (the same code and
command line). Before that, the subcommand's command line, config and input paths are checked by its
parser from a light module (no torch, DeepSpeed or Beam): a bad value, an unknown option (with the
nearest one suggested) or a missing path is one line, ``wikiedm SUB: error: ...``, and exit status 2,
in seconds, before anything is built or written; ``--help`` is answered there too. Input errors raised
later (a missing file, a damaged corpus) are one line as well (``WIKIEDM_TRACEBACK=1``: the traceback).

    wikiedm --version
    eval "$(wikiedm --completion)"       shell completion of subcommands and options (bash; zsh: bashcompinit)
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import NamedTuple


class Subcommand(NamedTuple):
    module: str  # its main() runs
    fixed_args: tuple[str, ...]  # put before the user's arguments
    summary: str
    # "module:function", light (no torch, Beam or DeepSpeed): the command line checked before `module` is imported.
    # parser: function(prog) -> its wikiedm.config.ConfigParser; check (when parsing is not all there is to check):
    # function(prog, argv), raises ConfigError.
    parser: str = ""
    check: str = ""


SUBCOMMANDS: dict[str, Subcommand] = {
    "corpus": Subcommand("pipelines.wiki_mentions", (), "dump -> passages, alias table, entity vocabulary, descriptions (Beam)",
                         parser="pipelines.config:corpus_parser", check="pipelines.config:check_corpus_command"),
    "train-tokenizer": Subcommand("wikiedm.train_tokenizer", (), "learn a byte-level BPE tokenizer of a corpus's own language (for corpus --tokenizer)",
                                  parser="wikiedm.train_tokenizer:train_tokenizer_parser",
                                  check="wikiedm.train_tokenizer:check_train_tokenizer_command"),
    "link": Subcommand("pipelines.link_mentions", (), "link the mentions of a corpus's passages with a BLINK model (Beam)",
                       parser="pipelines.link_config:link_parser",
                       check="pipelines.link_config:check_link_command"),
    "link-text": Subcommand("linker.cli", ("link",), "link mentions in text, JSONL or BLINK mention records",
                            parser="linker.options:link_parser"),
    "interactive": Subcommand("linker.cli", ("interactive",), "type text, see its linked mentions",
                              parser="linker.options:interactive_parser"),
    "index-linker": Subcommand("linker.cli", ("index",), "prepare a linker folder: KB, alias candidate index, FAISS index",
                               parser="linker.options:index_parser"),
    "linker-vocab": Subcommand("linker.cli", ("vocab",), "build a WordPiece vocab.txt from a corpus (a bi-encoder trained from scratch)",
                               parser="linker.options:vocab_parser"),
    "train-linker": Subcommand("linker.train", (), "train a BLINK-format bi-encoder on a corpus's hyperlinks",
                               parser="linker.options:train_parser"),
    "evaluate-linker": Subcommand("linker.evaluate", (), "accuracy of bi-encoder, cross-encoder, linker and alias prior",
                                  parser="linker.options:evaluate_parser"),
    "pretrain": Subcommand("trainer.pretrain", (), "EDMem pre-training on DeepSpeed (--num_gpus N: N ranks)",
                           parser="trainer.config:config_parser", check="trainer.config:check_pretrain_command"),
    "evaluate": Subcommand("trainer.evaluate", (), "fixed evaluation of a checkpoint on a corpus's validation hyperlinks",
                           parser="trainer.config:evaluate_parser"),
    "export": Subcommand("trainer.export", (), "a checkpoint -> one safetensors file with the full entity table",
                         parser="trainer.config:export_parser", check="trainer.config:check_export_command"),
    "validate": Subcommand("pipelines.validate", (), "check a corpus folder against its manifest.json",
                           parser="wikiedm.validate:validate_parser"),
    "report": Subcommand("pipelines.report", (), "label coverage plot and summary of a corpus folder",
                         parser="pipelines.config:report_parser"),
    "card": Subcommand("pipelines.dataset_card", (), "(re)write a corpus folder's dataset card README.md",
                       parser="pipelines.config:card_parser"),
    "fetch": Subcommand("pipelines.fetch_dump", (), "download a dump and verify it against Wikimedia's checksums",
                        parser="pipelines.config:fetch_parser"),
    "sample": Subcommand("pipelines.sample_dump", (), "write the project's own small sample dump",
                         parser="pipelines.config:sample_parser"),
    "beam": Subcommand("pipelines.cli", (), "run any Beam pipeline file or module (`wikiedm beam run FILE.py ...`)"),
}
# Exceptions that mean "this input is wrong", reported as one line (`wikiedm NAME: error: ...`), not a traceback;
# matched by class name so that no job module is imported to name them. WIKIEDM_TRACEBACK=1 shows the traceback.
INPUT_ERRORS = frozenset({"ConfigError", "FileNotFoundError", "NotADirectoryError", "IsADirectoryError",
                          "PermissionError", "InvalidOutputError", "CorpusError", "DumpError", "FetchError", "CliError"})


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("wikiedm")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [__doc__.strip(), "", "subcommands:"]
    lines += [f"  {name:<{width}}  {sub.summary}  [python -m {' '.join((sub.module, *sub.fixed_args))}]"
              for name, sub in SUBCOMMANDS.items()]
    return "\n".join(lines) + "\n"


def _function(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def light_parser(name: str):
    """The subcommand's ConfigParser, from a light module; None for one that has none (`beam`)."""
    sub = SUBCOMMANDS[name]
    return _function(sub.parser)(f"wikiedm {name}") if sub.parser else None


def check(name: str, argv: list[str]) -> None:
    """The subcommand's command line, config and paths, checked before its module is imported (ConfigError)."""
    from wikiedm.config import ConfigError

    sub = SUBCOMMANDS[name]
    if sub.check:
        _function(sub.check)(f"wikiedm {name}", argv)
    elif sub.parser:
        _, _, rest = _function(sub.parser)(f"wikiedm {name}").check(argv)
        if rest:
            raise ConfigError(f"unexpected argument(s): {' '.join(rest)}")


COMPLETION = """# wikiedm's shell completion (bash; zsh after `autoload -U bashcompinit && bashcompinit`):
#   eval "$(wikiedm --completion)"
_wikiedm_complete() {
    local IFS=$'\\n'
    COMPREPLY=($(compgen -W "$(wikiedm --complete "${COMP_WORDS[@]:1:COMP_CWORD}")" -- "${COMP_WORDS[COMP_CWORD]}"))
}
complete -o default -o nospace -F _wikiedm_complete wikiedm
"""


def completions(words: list[str]) -> list[str]:
    """The words that may come next after ``wikiedm WORDS[:-1]`` (the last word is the one being typed)."""
    if len(words) <= 1:
        return [*SUBCOMMANDS, "--help", "--version", "--completion"]
    if words[0] not in SUBCOMMANDS:
        return []
    parser = light_parser(words[0])
    if parser is None:
        return ["run"] if len(words) == 2 else []
    flags = parser.option_strings()
    previous = words[-2]
    if previous in flags and previous not in ("-h", "--help", "--help-config"):  # a flag's value: the shell's files
        action = next(a for a in parser.parser._actions if previous in a.option_strings)
        return ["true", "false"] if action.metavar == "true|false" else []
    return [f + " " for f in flags if f.startswith("--")]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"wikiedm {version()}")
        return 0
    if argv[0] == "--completion":
        sys.stdout.write(COMPLETION)
        return 0
    if argv[0] == "--complete":
        print("\n".join(completions(argv[1:])))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        from wikiedm.config import nearest

        near = nearest(name, SUBCOMMANDS)
        sys.stderr.write(f"wikiedm: unknown subcommand {name!r}" + (f"; did you mean {near!r}?" if near else "")
                         + "\n\n" + usage())
        return 2
    sub = SUBCOMMANDS[name]
    prog = f"wikiedm {name}"
    try:
        check(name, rest)  # seconds, before any heavy import, build or write; --help is answered here too
    except SystemExit as exit_:  # --help, --help-config
        return exit_.code if isinstance(exit_.code, int) else 0
    except Exception as exc:  # noqa: BLE001 - an input error is one line; anything else is re-raised
        return _report(prog, exc)
    # argv[0] names the subcommand, so each module's argparse usage reads `wikiedm NAME ...`.
    saved_argv = sys.argv
    sys.argv = [prog, *sub.fixed_args, *rest]
    try:  # the module's own main(), which reads sys.argv as under `python -m MODULE`
        returned = importlib.import_module(sub.module).main()
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or 0
        message = str(code)
        sys.stderr.write((message if message.startswith(("wikiedm", "[")) else f"{prog}: error: {message}") + "\n")
        return 1
    except Exception as exc:  # noqa: BLE001
        return _report(prog, exc)
    finally:  # a caller in the same process (a test, a notebook) keeps its own argv
        sys.argv = saved_argv
    return returned if isinstance(returned, int) else 0


def _report(prog: str, exc: Exception) -> int:
    """An input error as one line, exit status 2; any other exception propagates (a traceback: a bug)."""
    if os.environ.get("WIKIEDM_TRACEBACK") or not any(c.__name__ in INPUT_ERRORS for c in type(exc).__mro__):
        raise exc
    from wikiedm.config import command_error

    return command_error(prog, str(exc))


if __name__ == "__main__":
    sys.exit(main())
