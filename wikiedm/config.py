"""One config mechanism for every job: dataclasses with help text, YAML files, dotted command-line overrides.

    wikiedm corpus   --config configs/pipeline/enwiki.yaml --input DUMP --output OUT --labels.min_prior 0.05
    wikiedm pretrain --config configs/pretrain/tiny.yaml --data OUT --model.entity_dim=64
    wikiedm link-text --config configs/linker/blink_large.yaml --model M --corpus C --fast

A config is a tree of dataclasses whose fields are declared with :func:`wikiedm.fields.option`
(default and help text). The rules, the same for the corpus job, the linker and the trainer:

- Precedence: the defaults, then the YAML file (``--config FILE``), then command-line flags.
- Every leaf field is a flag named by its dotted path (``--labels.min_prior``, ``--optim.lr``);
  ``--key value`` and ``--key=value`` are the same; a job may add short forms (``--data``).
- One conversion for YAML values and command-line text, by the field's declared type:
  bool: ``true/false``, ``yes/no``, ``on/off``, ``1/0`` in any case (the words YAML reads as
  booleans, plus 1 and 0), anything else is an error; a bool flag given alone means true.
  int, float: Python's parsers (``1e-4`` is a float in YAML too; a YAML int is a valid float
  and is kept as written, so a manifest that records ``300`` keeps it). str: as given (a YAML
  ``false`` or ``3`` becomes the text ``"false"``, ``"3"``). list, tuple: a YAML list, a
  ``[a, b]`` flow list, or comma-separated words ``a,b``; items take the declared item type.
  ``X | None``: ``null``, ``none``, ``~`` or an empty value give None.
- An unknown key is an error (:class:`ConfigError`), in the file and on the command line, except
  that a job which passes other options on (the corpus job hands them to Beam: ``--runner``,
  ``--project`` ...) gets them back untouched.
- ``--help`` lists every key with its help text and default, grouped by section.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

import yaml

from wikiedm.fields import option  # noqa: F401 - the one way to declare a field, re-exported

TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})
NULL_WORDS = frozenset({"", "null", "none", "~"})
IGNORED = "__wikiedm.config.ignored__"  # the value of a flag that is accepted and dropped (launcher flags)


class ConfigError(ValueError):
    """A config key that does not exist, or a value its field's type cannot take."""


def parse_bool(value: Any) -> bool:
    """The one boolean rule (module docstring)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    low = str(value).strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ConfigError(f"not a boolean: {value!r} (use true/false, yes/no, on/off or 1/0)")


# ----------------------------------------------------------------------------- types and values


def _optional(tp) -> tuple[Any, bool]:
    """(the type inside ``X | None``, whether None is allowed)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1 and len(inner) < len(typing.get_args(tp)):
            return inner[0], True
    return tp, False


def _items(value: Any) -> list:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = yaml.safe_load(text)
        else:
            return [t.strip() for t in text.split(",") if t.strip()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    raise ConfigError(f"not a list: {value!r}")


def convert(value: Any, tp, key: str = "") -> Any:
    """``value`` (YAML-loaded or command-line text) as the declared type ``tp`` of field ``key``."""
    tp, nullable = _optional(tp)
    if value is None or (nullable and isinstance(value, str) and value.strip().lower() in NULL_WORDS):
        if nullable or value is None:
            return None
    try:
        origin = typing.get_origin(tp) or tp
        if tp is bool:
            return parse_bool(value)
        if tp is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            return int(value)
        if tp is float:
            if isinstance(value, bool):
                raise ValueError
            return value if isinstance(value, int) else float(value)  # a YAML int stays one (manifests keep 300)
        if tp is str:
            if isinstance(value, bool):
                return "true" if value else "false"
            if isinstance(value, (dict, list)):
                raise ValueError
            return str(value)
        if origin in (list, tuple, frozenset, set):
            args = [a for a in typing.get_args(tp) if a is not Ellipsis]
            items = _items(value)
            if len(args) == 1:
                items = [convert(v, args[0], key) for v in items]
            return origin(items)
        if origin is dict:
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
        return value
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        raise ConfigError(f"{key}: {value!r} is not a valid {name}") from None


def leaf_fields(cls, prefix: str = ""):
    """(dotted name, field, type) of every leaf field of a dataclass tree, in declaration order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from leaf_fields(tp, prefix + f.name + ".")
        else:
            yield prefix + f.name, f, tp


def known_keys(cls) -> list[str]:
    return [name for name, _, _ in leaf_fields(cls)]


def build(cls, values: dict, where: str = "", prefix: str = ""):
    """A ``cls`` from nested ``values`` (YAML and overrides merged), every value converted to its field's type."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}{prefix.rstrip('.') or 'the config'} must be a mapping of keys, got {values!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{where}unknown config key {prefix + str(unknown[0])!r}; known keys: "
                          f"{', '.join(prefix + k for k in known_keys(cls))}")
    kwargs = {}
    for name, value in values.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, {} if value is None else value, where, prefix + name + ".")
        else:
            kwargs[name] = convert(value, tp, prefix + name)
    return cls(**kwargs)


def _set_dotted(target: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        if not isinstance(target.get(p), dict):
            target[p] = {}
        target = target[p]
    target[leaf] = value


def load_yaml(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        loaded = yaml.safe_load(fh) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys")
    return loaded


# ----------------------------------------------------------------------------- the command line


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f" (default: {value!r})" if isinstance(value, str) else f" (default: {value})"


class ConfigParser:
    """The command line of one config class: ``parse(argv) -> (config, other args)``.

    ``aliases`` maps short flags to dotted keys (``{"data": "data.path"}``). With
    ``pass_unknown`` (the corpus job: Beam's options), arguments that are not config flags are
    returned; without it they are a :class:`ConfigError`. ``parser`` is the argparse parser, to
    which a job may add its own launcher flags (``dest`` starting with ``_`` or value
    :data:`IGNORED`: accepted and dropped).
    """

    def __init__(self, cls, *, prog: str = "", description: str = "", aliases: dict[str, str] | None = None,
                 pass_unknown: bool = True, help_flags: tuple[str, ...] = ("-h", "--help")) -> None:
        self.cls = cls
        self.pass_unknown = pass_unknown
        usage = "%(prog)s [--config FILE.yaml] [--KEY VALUE | --KEY=VALUE ...]" + (" [other options]" if pass_unknown else "")
        self.parser = argparse.ArgumentParser(prog=prog or None, description=description, add_help=False, usage=usage,
                                              allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.parser.add_argument(*help_flags, action="help", help="show this help (every config key) and exit")
        self.parser.add_argument("--config", default="", help="YAML file of config values (flags override it)")
        short = {}
        for flag, dotted in (aliases or {}).items():
            short.setdefault(dotted, []).append(f"--{flag}")
        groups: dict[str, argparse._ArgumentGroup] = {}
        for name, f, tp in leaf_fields(cls):
            section = name.rpartition(".")[0]
            if section and section not in groups:
                groups[section] = self.parser.add_argument_group(f"{section}.*", _section_help(cls, section))
            target = groups.get(section, self.parser)
            is_bool = _optional(tp)[0] is bool
            target.add_argument(f"--{name}", *short.get(name, ()), dest=name, default=argparse.SUPPRESS,
                                metavar="BOOL" if is_bool else "VALUE", nargs="?" if is_bool else None,
                                const="true" if is_bool else None,
                                help=f.metadata.get("help", "") + _default_text(f))

    def format_help(self) -> str:
        return self.parser.format_help()

    def parse(self, argv: list[str]):
        ns, rest = self.parser.parse_known_args(list(argv))
        given = {k: v for k, v in vars(ns).items() if not k.startswith("_") and v is not IGNORED and v != IGNORED}
        path = given.pop("config", "")
        if rest and not self.pass_unknown:
            flag = next((a for a in rest if a.startswith("-")), rest[0])
            if flag.startswith("--"):
                raise ConfigError(f"unknown config key {flag[2:].split('=', 1)[0]!r}; known keys: "
                                  f"{', '.join(known_keys(self.cls))}")
            raise ConfigError(f"unexpected argument {flag!r} (overrides look like --section.key=value)")
        values: dict = load_yaml(path) if path else {}
        for dotted, value in given.items():
            _set_dotted(values, dotted, value)
        return build(self.cls, values, where=f"{path}: " if path else ""), rest


def _section_help(cls, section: str) -> str:
    *parents, leaf = section.split(".")
    for p in parents:
        cls = typing.get_type_hints(cls)[p]
    f = next(f for f in dataclasses.fields(cls) if f.name == leaf)
    return f.metadata.get("help", "")


def parse_config(cls, argv: list[str], *, prog: str = "", description: str = "", aliases: dict[str, str] | None = None,
                 pass_unknown: bool = True):
    """Parse ``argv`` into (config, the arguments that are not config flags)."""
    return ConfigParser(cls, prog=prog, description=description, aliases=aliases, pass_unknown=pass_unknown).parse(argv)
