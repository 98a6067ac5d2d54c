"""``wikiedm beam`` (also installed as ``beam``): run a Beam pipeline file or module with pipeline options.

    wikiedm beam run pipelines/wiki_mentions.py --input DUMP --output OUT --runner Direct
    wikiedm beam run pipelines.wiki_mentions --runner Dataflow --project P --region R ...

The project's own jobs have their subcommands (``wikiedm corpus``, ``wikiedm link``); this one
runs any pipeline file or module.

Apache Beam ships no such launcher. This one resolves the target (a ``.py``
file or an importable module), checks the ``--runner`` name before any work
starts (``Direct``, ``DirectRunner``, ``Dataflow``, ``DataflowRunner`` or a
fully-qualified runner class), and runs the target as ``__main__`` with the
remaining arguments, exactly as ``python FILE.py ARGS`` would.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import runpy
import sys

# Short names users type -> Beam's runner class names. Beam resolves these as
# well; we resolve them here too so a typo fails before a pipeline is built.
RUNNER_ALIASES = {
    "direct": "DirectRunner",
    "directrunner": "DirectRunner",
    "dataflow": "DataflowRunner",
    "dataflowrunner": "DataflowRunner",
    "prism": "PrismRunner",
    "prismrunner": "PrismRunner",
    "flink": "FlinkRunner",
    "flinkrunner": "FlinkRunner",
    "spark": "SparkRunner",
    "sparkrunner": "SparkRunner",
    "portable": "PortableRunner",
    "portablerunner": "PortableRunner",
    "interactive": "InteractiveRunner",
    "interactiverunner": "InteractiveRunner",
}


class CliError(Exception):
    """A usage error reported as one line and exit status 2."""


def canonical_runner(name: str) -> str:
    """Return Beam's name for a runner given by a user, or raise CliError."""
    if "." in name:  # a fully-qualified class: it must import
        module_name, _, class_name = name.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CliError(f"runner {name!r}: cannot import {module_name} ({exc})") from None
        if not hasattr(module, class_name):
            raise CliError(f"runner {name!r}: {module_name} has no {class_name}")
        return name
    resolved = RUNNER_ALIASES.get(name.lower())
    if resolved is None:
        known = ", ".join(sorted({v for v in RUNNER_ALIASES.values()}))
        raise CliError(f"unknown runner {name!r}; use one of {known} or a module.Class path")
    return resolved


def normalise_runner_args(args: list[str]) -> list[str]:
    """Rewrite ``--runner X`` / ``--runner=X`` to Beam's canonical runner name."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--runner":
            if i + 1 >= len(args):
                raise CliError("--runner needs a value")
            out += ["--runner", canonical_runner(args[i + 1])]
            i += 2
            continue
        if arg.startswith("--runner="):
            out.append("--runner=" + canonical_runner(arg.split("=", 1)[1]))
        else:
            out.append(arg)
        i += 1
    return out


def run_target(target: str, args: list[str]) -> None:
    """Run a pipeline file or module as ``__main__`` with ``args`` as its argv."""
    args = normalise_runner_args(args)
    if target.endswith(".py") or os.sep in target or os.path.exists(target):
        if not os.path.isfile(target):
            raise CliError(f"no such pipeline file: {target}")
        sys.argv = [target, *args]
        runpy.run_path(target, run_name="__main__")
        return
    try:
        found = importlib.util.find_spec(target) is not None
    except ModuleNotFoundError:  # a missing parent package
        found = False
    if not found:
        raise CliError(f"no such pipeline module: {target}")
    sys.argv = [target, *args]
    runpy.run_module(target, run_name="__main__", alter_sys=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="wikiedm beam",
        description="Run an Apache Beam pipeline file or module with pipeline options.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run FILE.py or MODULE; every further argument goes to the pipeline",
        description="Run FILE.py or MODULE as __main__; every further argument "
        "(--runner=Direct|Dataflow|..., --input, --output, Beam options) goes to it.",
    )
    run.add_argument("target", help="pipeline file (pipelines/wiki_mentions.py) or module (pipelines.wiki_mentions)")
    if argv and argv[0] == "run" and len(argv) >= 2 and not argv[1].startswith("-"):
        # Everything after the target belongs to the pipeline, even -h.
        target, rest = argv[1], argv[2:]
    else:
        parser.parse_args(argv)  # prints usage / help and exits
        return 2
    try:
        run_target(target, rest)
    except CliError as exc:
        print(f"wikiedm beam: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # the pipeline's own exit status
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
