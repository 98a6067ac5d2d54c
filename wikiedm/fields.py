"""One helper for config dataclasses: a field with help text (the CLI flags' help); shared by pipelines, linker and trainer."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import field


def option(default, help: str, **kw):  # noqa: A002 - "help" as in argparse
    """A dataclass field with ``metadata["help"]``; mutable defaults (lists, dicts,
    dataclass instances) get a factory that copies them."""
    if isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)
