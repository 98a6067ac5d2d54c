"""What every Beam job of the project does at launch: Beam options, logging."""
from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions


def beam_options(beam_args: list[str]) -> PipelineOptions:
    """Beam options from the leftover args; an unknown flag is an error, not a silent drop."""
    known = set(PipelineOptions([]).get_all_options(drop_default=False))
    given = PipelineOptions(beam_args).get_all_options(retain_unknown_options=True)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"unknown option(s): {', '.join('--' + u for u in unknown)}")
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = "DirectRunner"
    return options


def configure_logging() -> None:
    """INFO lines with timestamps (LOGLEVEL overrides); Beam's own chatter at WARNING."""
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
