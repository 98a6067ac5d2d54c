"""One helper for config dataclasses: a field with help text (the CLI flags' help); shared by pipelines, linker and trainer."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import field

# What a path option must name, checked by wikiedm.config.check_paths before a command does any work.
PATH_KINDS = ("exists", "file", "dir", "corpus")


def option(default, help: str, *, choices: tuple | None = None, path: str = "", required: bool = False,  # noqa: A002
           metavar: str = "", **kw):
    """A dataclass field with ``metadata["help"]``; mutable defaults (lists, dicts, dataclass instances) get a
    factory that copies them. ``choices``: the only values a text field takes (checked when the config is
    built; the help lists them). ``path``: the field names something that must be there when the command
    starts (:data:`PATH_KINDS`: ``exists``, ``file``, ``dir``, or ``corpus``: a finished corpus folder).
    ``required``: the command cannot run without it (the usage line shows it, ``(required)`` in the help).
    ``metavar``: how the help names its value (FILE, DIR ...; default: from ``path`` or ``choices``, else VALUE)."""
    if path and path not in PATH_KINDS:
        raise ValueError(f"path={path!r}: use one of {', '.join(PATH_KINDS)}")
    metadata = {"help": help, "choices": tuple(choices) if choices else (), "path": path, "required": required, "metavar": metavar}
    if isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata, **kw)
    return field(default=default, metadata=metadata, **kw)
