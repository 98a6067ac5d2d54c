"""One config mechanism for every job: dataclasses with help text, YAML files, dotted command-line overrides.

    wikiedm corpus   --config configs/pipeline/enwiki.yaml --input DUMP --output OUT --labels.min_prior 0.05
    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT --output RUN --model.entity_dim=64
    wikiedm link-text --config configs/linker/blink_large.yaml --model M --corpus C --fast true

A config is a tree of dataclasses whose fields are declared with :func:`wikiedm.fields.option`
(default and help text). The rules, the same for the corpus job, the linker and the trainer:

- Precedence: the defaults, then the YAML file (``--config FILE``), then command-line flags.
- Every leaf field is a flag named by its dotted path (``--labels.min_prior``, ``--optim.lr``);
  ``--key value`` and ``--key=value`` are the same; a job may add short forms (``--corpus``) and
  keep old spellings working, unlisted (``--data``).
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
- ``--help`` lists the common options (short forms, the job's own flags, its epilog: the corpus
  job's runner options); ``--help-config`` every key with its help text and default, by section.
  The usage line names the required options unbracketed (``option(..., required=True)``).
- A field may take only some values (``option(..., choices=(...))``: an error names them), or name a path
  that must be there when the command starts (``path="file" | "dir" | "exists" | "corpus"``: checked by
  :func:`check_paths`). :meth:`ConfigParser.check` does all of it (command line, the config's
  ``validate()``, paths) in seconds, before a command imports its heavy modules; ``wikiedm`` runs it first.
- Every problem is a :class:`ConfigError` with one line that names the option; an unknown option names
  the nearest known one (``unknown option --windw; did you mean --window?``).
- A key a config had and no longer has stays listed in the class's ``REMOVED_OPTIONS`` (``{key: what replaced
  it}``): given on the command line or in a YAML file, it is an error that says so (``--num_shards was removed:
  ...``), not an unknown key, and never silently accepted.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
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
        raise ConfigError(f"{_flag(key)}{exc}") from None
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        raise ConfigError(f"{_flag(key)}{value!r} is not a valid {name}") from None


def _flag(key: str) -> str:
    return f"--{key}: " if key else ""


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
    removed = removed_options(cls)
    for name in unknown:
        if name in removed:
            raise removed_option(prefix + str(name), removed[name], where or "the config: ")
    if unknown:
        key = prefix + str(unknown[0])
        near = nearest(key, [prefix + k for k in known_keys(cls)])
        raise ConfigError(f"{where}unknown config key {key!r}" + (f"; did you mean {near!r}?" if near else ""))
    kwargs = {}
    for name, value in values.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, {} if value is None else value, where, prefix + name + ".")
        else:
            kwargs[name] = one_of(convert(value, tp, prefix + name), fields[name].metadata.get("choices", ()),
                                  prefix + name)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as exc:  # the config's own check of its values (__post_init__): the user's input, one line
        raise ConfigError(f"{where}--{prefix}{exc}" if prefix else f"{where}{exc}") from exc


def one_of(value, choices: tuple, key: str):
    """``value`` if ``choices`` is empty or holds it (text compared in any case, returned as listed)."""
    if not choices or value is None:
        return value
    for choice in choices:
        if value == choice or (isinstance(value, str) and isinstance(choice, str) and value.lower() == choice.lower()):
            return choice
    raise ConfigError(f"--{key}: {value!r} is not one of {', '.join(map(str, choices))}")


def nearest(word: str, candidates, cutoff: float = 0.6) -> str:
    """The candidate closest to a mistyped ``word`` (``--windw`` -> ``--window``), '' when none is close. A dotted
    candidate is also matched by its last part (``--lr`` -> ``--optim.lr``)."""
    candidates = list(dict.fromkeys(candidates))
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    if found:
        return found[0]
    bare = word.lstrip("-")
    by_leaf = {}
    for c in candidates:
        by_leaf.setdefault(c.lstrip("-").rpartition(".")[2], c)
    found = difflib.get_close_matches(bare.rpartition(".")[2], list(by_leaf), n=1, cutoff=max(cutoff, 0.75))
    return by_leaf[found[0]] if found else ""


def removed_options(cls, prefix: str = "") -> dict[str, str]:
    """The keys ``cls`` once had and has no more, each with what replaced it: its ``REMOVED_OPTIONS`` and its
    sections', by dotted name (``{"num_shards": ..., "labels.old_key": ...}``)."""
    removed = {prefix + key: why for key, why in (getattr(cls, "REMOVED_OPTIONS", None) or {}).items()}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            removed.update(removed_options(hints[f.name], prefix + f.name + "."))
    return removed


def removed_option(key: str, replaced_by: str, where: str = "") -> ConfigError:
    """``--num_shards was removed: ...`` (in a YAML file: ``FILE: config key 'num_shards' was removed: ...``)."""
    name = f"config key {key!r}" if where else f"--{key}"
    return ConfigError(f"{where}{name} was removed: {replaced_by}")


def unknown_option(flag: str, candidates) -> ConfigError:
    """``unknown option --windw; did you mean --window?`` (``--help-config`` lists every key)."""
    name = flag.split("=", 1)[0]
    near = nearest(name, [c for c in candidates if c.startswith("--")])
    return ConfigError(f"unknown option {name}" + (f"; did you mean {near}?" if near else
                                                   " (--help lists the common options, --help-config every key)"))


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


def _field_default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def default_text(value) -> str:
    """`` (default: X)`` as every help line ends: booleans as true/false, text quoted (an empty one shows as '')."""
    if value is dataclasses.MISSING or value is argparse.SUPPRESS:
        return ""
    if isinstance(value, bool):
        return f" (default: {'true' if value else 'false'})"
    return f" (default: {value!r})" if isinstance(value, str) else f" (default: {value})"


def _default_text(f: dataclasses.Field) -> str:
    return default_text(_field_default(f))


BOOL_METAVAR = "true|false"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (as the config keys' do), or says it is required."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "(default:" in text or "(required)" in text or action.nargs == 0:
            return text
        if action.required:
            return text + " (required)"
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        return text + default_text(action.default).replace("%", "%%")


def bool_arg(text: str) -> bool:
    """argparse ``type=`` of a boolean flag: the one boolean rule, as an argparse error when it fails."""
    try:
        return parse_bool(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_bool(parser, *flags: str, default: bool, help: str, **kwargs) -> argparse.Action:  # noqa: A002
    """``--name true|false`` (yes/no, on/off, 1/0 in any case; ``--name`` alone means true)."""
    return parser.add_argument(*flags, type=bool_arg, nargs="?", const=True, default=default, metavar=BOOL_METAVAR,
                               help=help, **kwargs)


class _PrintAndExit(argparse.Action):
    """``--help`` / ``--help-config``: print a text made on demand and exit 0."""

    def __init__(self, option_strings, text, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)
        self.text = text

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(self.text(), sys.stdout)
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse, whose complaints (a flag without its value, a value of the wrong type) are a ConfigError: the
    command reports it on one line, as every other problem with its command line."""

    def error(self, message):
        raise ConfigError(message)


class ConfigParser:
    """The command line of one config class: ``parse(argv) -> (config, other args)``.

    ``aliases`` maps short flags to dotted keys (``{"corpus": "data.path"}``); ``hidden_aliases`` the
    same for old spellings that keep working but are not shown (``{"data": "data.path"}``). With
    ``pass_unknown`` (the corpus job: Beam's options), arguments that are not config flags are
    returned; without it they are a :class:`ConfigError`.

    ``--help`` shows the common options: ``--config``, the short forms, the keys named in ``common``
    and the job's own flags (:meth:`add_argument`, :meth:`add_bool`), then ``epilog``; ``--help-config``
    shows every config key, grouped by section, each with its help text and default, and the job's
    flags. The job's flags, and flags whose ``dest`` starts with ``_`` or whose value is :data:`IGNORED`
    (launcher conventions), are left out of the config: :meth:`parse_with_extras` returns the former.

    ``required``: keys the command needs (default: the fields declared ``required=True``), named unbracketed
    in the usage line; ``positional``: the key an old positional spelling sets (``wikiedm report OUT``);
    ``validator``: a check of the whole config beside its own ``validate()`` (:meth:`check` runs both).
    """

    def __init__(self, cls, *, prog: str = "", description: str = "", aliases: dict[str, str] | None = None,
                 hidden_aliases: dict[str, str] | None = None, common: tuple[str, ...] = (), epilog: str = "",
                 pass_unknown: bool = True, required: tuple[str, ...] | None = None, positional: str = "",
                 validator=None) -> None:
        self.cls = cls
        self.pass_unknown = pass_unknown
        self.validator = validator
        self.extra_dests: set[str] = set()  # the job's own flags: not config keys
        if required is None:  # the fields declared option(..., required=True)
            required = tuple(name for name, f, _ in leaf_fields(cls) if f.metadata.get("required"))
        self.required = tuple(required)
        flag_of = {dotted: f"--{flag}" for flag, dotted in reversed(list((aliases or {}).items()))}
        self.flag_of = {name: flag_of.get(name, f"--{name}") for name in known_keys(cls)}
        usage = ("%(prog)s " + "".join(f"{self.flag_of[k]} {_metavar(cls, k)} " for k in self.required)
                 + "[--config FILE.yaml] [--KEY VALUE | --KEY=VALUE ...]" + (" [other options]" if pass_unknown else ""))
        more = "every config key, with its help text and default: --help-config"
        self.parser = _Parser(prog=prog or None, description=description, add_help=False, usage=usage,
                                              allow_abbrev=False, formatter_class=HelpFormatter)
        self.short = _Parser(prog=prog or None, description=description, add_help=False, usage=usage,
                                             epilog="\n\n".join(t for t in (epilog, more) if t),
                                             allow_abbrev=False, formatter_class=HelpFormatter)
        for parser in (self.parser, self.short):
            parser.add_argument("-h", "--help", action=_PrintAndExit, text=self.short.format_help,
                                help="show the common options and exit")
            parser.add_argument("--help-config", action=_PrintAndExit, text=self.parser.format_help,
                                help="show every config key, with its help text and default, and exit")
            parser.add_argument("--config", default="", metavar="FILE.yaml",
                                help="YAML file of config values (flags override it)")
        short: dict[str, list[str]] = {}
        for flag, dotted in (aliases or {}).items():
            short.setdefault(dotted, []).append(f"--{flag}")
        groups: dict[str, argparse._ArgumentGroup] = {}
        shown: dict[str, tuple] = {}
        for name, f, tp in leaf_fields(cls):
            section = name.rpartition(".")[0]
            if section and section not in groups:
                groups[section] = self.parser.add_argument_group(f"{section}.*", _section_help(cls, section))
            target = groups.get(section, self.parser)
            is_bool = _optional(tp)[0] is bool
            value = {"dest": name, "default": argparse.SUPPRESS, "nargs": "?" if is_bool else None,
                     "const": "true" if is_bool else None, "metavar": BOOL_METAVAR if is_bool else "VALUE"}
            if not is_bool:
                value["metavar"] = _metavar(cls, name)
            text = f.metadata.get("help", "")
            tail = " (required)" if name in self.required else _default_text(f)
            target.add_argument(f"--{name}", *short.get(name, ()), help=text + tail, **value)
            if name in short or name in common or name in self.required:  # the short help names a key by its short form
                shown[name] = (short.get(name, [f"--{name}"]), dict(value, help=text + (
                    f"; the config key {name}" if name in short else "") + tail))
        for name in [*self.required, *dict.fromkeys((aliases or {}).values()), *common]:  # required, short forms first
            if name in shown:
                flags, kwargs = shown.pop(name)
                self.short.add_argument(*flags, **kwargs)
        for flag, dotted in (hidden_aliases or {}).items():
            _, f, tp = next(x for x in leaf_fields(cls) if x[0] == dotted)
            is_bool = _optional(tp)[0] is bool
            self.parser.add_argument(f"--{flag}", dest=dotted, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                                     nargs="?" if is_bool else None, const="true" if is_bool else None)
        if positional:  # an old spelling: the value of key `positional` given without its flag (`wikiedm report OUT`)
            self.parser.add_argument(positional, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    def add_argument(self, *flags: str, **kwargs) -> argparse.Action:
        """A flag of the job itself (not a config key), shown by --help and --help-config unless hidden."""
        if kwargs.get("help") is not argparse.SUPPRESS:
            self.short.add_argument(*flags, **kwargs)
        action = self.parser.add_argument(*flags, **kwargs)
        self.extra_dests.add(action.dest)
        return action

    def add_bool(self, *flags: str, default: bool, help: str, **kwargs) -> argparse.Action:  # noqa: A002
        """A boolean flag of the job itself: ``--name true|false`` (alone: true)."""
        return add_bool(self, *flags, default=default, help=help, **kwargs)

    def format_help(self) -> str:
        """Every config key (``--help-config``)."""
        return self.parser.format_help()

    def format_short_help(self) -> str:
        """The common options (``--help``)."""
        return self.short.format_help()

    def option_strings(self) -> list[str]:
        """Every flag ``--help-config`` lists (the candidates of a did-you-mean)."""
        return [flag for action in self.parser._actions if action.help is not argparse.SUPPRESS
                for flag in action.option_strings]

    def parse(self, argv: list[str]):
        try:
            ns, rest = self.parser.parse_known_args(list(argv))
        except argparse.ArgumentError as exc:  # argparse's own complaint (a flag without its value), as one line
            raise ConfigError(str(exc)) from None
        given = {k: v for k, v in vars(ns).items()
                 if not k.startswith("_") and k not in self.extra_dests and v is not IGNORED and v != IGNORED}
        path = given.pop("config", "")
        removed = removed_options(self.cls)
        for arg in rest:  # a removed key is no config flag any more: argparse left it here
            name = arg.split("=", 1)[0][2:] if arg.startswith("--") else ""
            if name in removed:
                raise removed_option(name, removed[name])
        if rest and not self.pass_unknown:
            flag = next((a for a in rest if a.startswith("-")), rest[0])
            if flag.startswith("-"):
                raise unknown_option(flag, self.option_strings())
            raise ConfigError(f"unexpected argument {flag!r} (overrides look like --section.key=value)")
        if path and not os.path.isfile(path) and "://" not in path:
            raise ConfigError(f"--config {path}: no such file")
        values: dict = load_yaml(path) if path else {}
        for dotted, value in given.items():
            _set_dotted(values, dotted, value)
        config = build(self.cls, values, where=f"{path}: " if path else "")
        for name in self.required:
            if _get_dotted(config, name) in ("", None):
                raise ConfigError(f"{self.flag_of[name]} is required")
        return config, rest

    def check(self, argv: list[str]):
        """Everything a command can check before it imports, builds or writes anything: the command line, the
        config's own rules (its ``validate()``, the parser's ``validator``) and the paths it names
        (:func:`check_paths`). Returns what :meth:`parse_with_extras` does; a problem is a :class:`ConfigError`."""
        config, extras, rest = self.parse_with_extras(argv)
        try:
            if hasattr(config, "validate"):
                config.validate()
            if self.validator is not None:
                self.validator(config)
        except SystemExit as exc:  # the trainer's checks end the process with their message
            if isinstance(exc.code, str):
                raise ConfigError(exc.code) from None
            raise
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        check_paths(config, self.flag_of)
        return config, extras, rest

    def parse_with_extras(self, argv: list[str]):
        """(config, the job's own flags as a namespace, other args)."""
        try:
            ns, _ = self.parser.parse_known_args(list(argv))
        except argparse.ArgumentError as exc:
            raise ConfigError(str(exc)) from None
        extras = argparse.Namespace(**{k: v for k, v in vars(ns).items() if k in self.extra_dests})
        config, rest = self.parse(argv)
        return config, extras, rest


def _get_dotted(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def _metavar(cls, dotted: str) -> str:
    """VALUE, or what a path option names (DIR, FILE, PATH), or the choices of a text option (a|b|c)."""
    f = next(f for name, f, _ in leaf_fields(cls) if name == dotted)
    if f.metadata.get("metavar"):
        return f.metadata["metavar"]
    kind = f.metadata.get("path", "")
    if kind:
        return {"file": "FILE", "exists": "PATH"}.get(kind, "DIR")
    choices = f.metadata.get("choices", ())
    return "|".join(map(str, choices)) if choices else "VALUE"


def check_paths(config, flag_of: dict[str, str] | None = None) -> None:
    """Every path option (``option(..., path=KIND)``) that is set names what it must: ``exists``, a ``file``, a
    ``dir``, or a finished ``corpus`` folder (its manifest.json written). A :class:`ConfigError` names the option."""
    from wikiedm import storage

    for name, f, _ in leaf_fields(type(config)):
        kind, value = f.metadata.get("path", ""), _get_dotted(config, name)
        if not kind or not value or not isinstance(value, str):
            continue
        flag = (flag_of or {}).get(name, f"--{name}")
        if storage.is_remote(value):  # a bucket has files, not folders: a folder is checked by what it holds
            if kind in ("file", "exists") and not storage.exists(value):
                raise ConfigError(f"{flag} {value}: no such file")
        elif not os.path.exists(value):
            what = {"file": "file", "exists": "file or folder"}.get(kind, "folder")
            raise ConfigError(f"{flag} {value}: no such {what}")
        elif kind == "file" and not os.path.isfile(value):
            raise ConfigError(f"{flag} {value}: not a file")
        elif kind in ("dir", "corpus") and not os.path.isdir(value):
            raise ConfigError(f"{flag} {value}: not a folder")
        if kind == "corpus" and not storage.exists(storage.join(value, storage.MANIFEST)):
            raise ConfigError(f"{flag} {value}: not a finished corpus (no {storage.MANIFEST}: an incomplete run, "
                              "or another folder)")


def command_error(prog: str, message: str) -> int:
    """A usage error as every command reports one: ``PROG: error: MESSAGE`` on one line; exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return 2


def _section_help(cls, section: str) -> str:
    *parents, leaf = section.split(".")
    for p in parents:
        cls = typing.get_type_hints(cls)[p]
    f = next(f for f in dataclasses.fields(cls) if f.name == leaf)
    return f.metadata.get("help", "")


def parse_config(cls, argv: list[str], *, prog: str = "", description: str = "", aliases: dict[str, str] | None = None,
                 pass_unknown: bool = True, **kwargs):
    """Parse ``argv`` into (config, the arguments that are not config flags); ``kwargs``: :class:`ConfigParser`'s."""
    return ConfigParser(cls, prog=prog, description=description, aliases=aliases, pass_unknown=pass_unknown,
                        **kwargs).parse(argv)
