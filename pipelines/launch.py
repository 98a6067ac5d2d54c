"""What every Beam job of the project does at launch: Beam options, logging, faster graph building."""
from __future__ import annotations

import logging
import os
import weakref

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions
from apache_beam.transforms import userstate

from pipelines.config import RUNNER_OPTIONS, runner_help  # noqa: F401 - re-exported (the jobs' --help)
from wikiedm.config import parse_bool


def beam_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the leftover args; an unknown flag is an error, not a silent drop. A short runner name
    (``--runner Direct``) becomes Beam's (DirectRunner), as ``beam run`` writes it, whatever the entry point."""
    from pipelines.cli import CliError, normalise_runner_args

    try:
        beam_args = normalise_runner_args(beam_args)
    except CliError as exc:
        raise ValueError(str(exc)) from None
    known = set(PipelineOptions([]).get_all_options(drop_default=False))
    given = PipelineOptions(beam_args).get_all_options(retain_unknown_options=True)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"unknown option(s): {', '.join('--' + u for u in unknown)}")
    memoize_dofn_specs()
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = "DirectRunner"
    test = options.view_as(TestOptions)  # Beam keeps --dry_run's text: "false" would read as true
    test.dry_run = parse_bool(test.dry_run) if test.dry_run else False
    return options


def configure_logging() -> None:
    """INFO lines with timestamps (LOGLEVEL overrides); Beam's own chatter at WARNING."""
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)


def memoize_dofn_specs() -> None:
    """Keep each DoFn's state and timer specs once Beam has worked them out.

    While it builds and translates the graph, Beam asks for a DoFn's specs about 7 times per ParDo
    (is_stateful_dofn, validate_stateful_dofn, to_runner_api), each time taking inspect.signature of every
    method of the DoFn: 3.3 of the 12 s CPU of a 7-page job (apache-beam 2.77, ~400 ParDos). The specs come
    from the methods' default arguments, fixed once the DoFn exists, so one answer per DoFn instance is the
    same answer. Idempotent.
    """
    if not isinstance(userstate.get_dofn_specs, MemoizedDofnSpecs):
        userstate.get_dofn_specs = MemoizedDofnSpecs(userstate.get_dofn_specs)


class MemoizedDofnSpecs:
    """``compute(dofn)`` (Beam's get_dofn_specs) asked once per DoFn instance, by identity (a DoFn's __eq__
    must not merge two); a DoFn that cannot be weakly referenced is asked every time."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self.known: dict[int, tuple[weakref.ref, set, set]] = {}

    def __call__(self, dofn):
        key = id(dofn)
        entry = self.known.get(key)
        if entry is None or entry[0]() is not dofn:
            states, timers = self.compute(dofn)
            try:
                ref = weakref.ref(dofn, lambda _, key=key: self.known.pop(key, None))
            except TypeError:
                return states, timers
            entry = self.known[key] = (ref, states, timers)
        return set(entry[1]), set(entry[2])  # fresh sets, as Beam's own function returns
