"""Inline templates rendered to text: the one table to extend.

The pre-pass (:mod:`pipelines.wikitext.prepass`) removes every template call
``{{name|args}}`` from the wikitext, except those this registry knows. For a
known name it splits the arguments (like MediaWiki's preprocessor: top-level
``|`` and ``=``, nested templates, links, comments and extension tags kept
whole), cleans each argument it uses (nested templates rendered or removed,
refs and comments dropped), and calls the template's renderer. The renderer
returns *wikitext* (usually plain text; it may hold ``[[links]]``, ``''x''``
or ``<sup>``), which replaces the call before parsing, so a link inside a
rendered template becomes a mention with exact offsets like any other.

Each call ends one of three ways, counted per page by name
(:attr:`Extraction.template_names`):

* ``rendered``: a renderer produced the text (``{{convert|5|km}}`` -> "5 km");
* ``omitted``: the registry knows the template shows nothing that belongs in
  prose (``{{citation needed}}``, footnotes, hatnotes, maintenance banners);
* ``dropped``: unknown to the registry, or a renderer declined this call
  (e.g. ``{{flag|FRA}}``, a country code it cannot resolve): removed whole.
  The job's summary lists the most frequent dropped names: the templates to
  add here next.

Extending
---------
Add a :class:`TemplateSpec` to ``_GLOBAL`` (names valid on every wiki; most
wikis copy enwiki's inline templates under the same names), or to
``_LANGUAGE_SPECS[lang]`` for a wiki's own templates, or map a local name to a
global one in ``_LANGUAGE_ALIASES[lang]``. Name patterns (``Lang-fr``,
``IPA-de``, ``Pp-semi-indef``) go in ``_PATTERNS``. A renderer is a small pure
function ``(TemplateCall) -> str | None`` (``None``: cannot render this call,
count it as dropped). Names are matched like MediaWiki matches page titles:
first letter case-insensitive, ``_`` = space, runs of spaces folded, an
optional ``Template:`` prefix (in any of the wiki's names for namespace 10)
and ``subst:`` removed. Template redirects are listed as aliases.

Rendering choices (documented in docs/extraction.md): values and units as
written, no conversion (``{{convert}}``, ``{{val}}``); English month names
for the date templates; no age for ``{{birth date and age}}`` (it depends on
the day the page is viewed; ``{{death date and age}}`` gets its fixed
"(aged N)"); language labels of ``{{lang-xx}}`` dropped, the foreign text
kept; fractions as ``1/2`` and ``3 1/2``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

from pipelines.records import SiteInfo
from pipelines.wikitext.namespaces import NS_TEMPLATE, namespace_table, prefix_key

RENDERED, OMITTED, DROPPED = "rendered", "omitted", "dropped"
# Templates that emit table syntax: they open / close a wiki table.
TABLE_OPEN_NAMES = frozenset(("(!",))
TABLE_CLOSE_NAMES = frozenset(("!)",))


class TemplateCall:
    """One call's arguments, cleaned on first use; records which were used.

    ``arg(1)`` is the first positional argument (or ``1=``), stripped of
    surrounding whitespace, with nested markup already handled by the
    pre-pass; ``arg("df")`` a named one. Arguments never read count their
    links as hidden in a template.
    """

    __slots__ = ("name", "title", "_raw", "_clean", "_cleaned", "_count")

    def __init__(self, name: str, raw: dict[int | str, str], count: int,
                 clean: Callable[[str], str], title: str = "") -> None:
        self.name = name
        self.title = title
        self._raw = raw  # key (1-based position or stripped name) -> raw wikitext
        self._count = count  # number of positional arguments
        self._clean = clean
        self._cleaned: dict[int | str, str] = {}

    def arg(self, key: int | str, default: str = "") -> str:
        value = self._cleaned.get(key)
        if value is None:
            raw = self._raw.get(key)
            if raw is None:
                return default
            value = self._cleaned[key] = self._clean(raw).strip()
        return value or default

    def has(self, key: int | str) -> bool:
        return key in self._raw

    def flag(self, key: str) -> bool:
        """A yes/no parameter (``df=y``, ``hide=yes``, ``lc=true``) that is set."""
        return self._raw.get(key, "").strip().lower() in ("y", "yes", "true", "on", "1")

    def positional(self) -> list[str]:
        """All positional arguments, cleaned, in order (empty ones kept)."""
        return [self.arg(i) for i in range(1, self._count + 1)]

    @property
    def count(self) -> int:
        return self._count

    def unused_raw(self) -> Iterable[str]:
        return (raw for key, raw in self._raw.items() if key not in self._cleaned)


Renderer = Callable[[TemplateCall], "str | None"]


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A template the extraction knows: its canonical name, aliases, renderer.

    ``render=None`` means *omitted*: the template shows nothing that belongs
    in the article's prose.
    """

    name: str
    render: Renderer | None = None
    aliases: tuple[str, ...] = ()


# -- small helpers for renderers ---------------------------------------------------
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_MONTH_NUMBERS = {name.lower(): index for index, name in enumerate(_MONTHS, 1)}
_MONTH_NUMBERS.update({name[:3].lower(): index for index, name in enumerate(_MONTHS, 1)})
_NUMBER = re.compile(r"[-+\u2212]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_YEAR = re.compile(r"-?\d{1,4}")
_SAFE_LINK_TARGET = re.compile(r"[^\[\]{}|<>\n]+")
_LANGUAGE_CODE = re.compile(r"[a-zA-Z]{2,3}(?:-[a-zA-Z0-9]{2,8})*")


def _first(call: TemplateCall) -> str:
    return call.arg(1)


def _last_positional(call: TemplateCall) -> str | None:
    for index in range(call.count, 0, -1):
        value = call.arg(index)
        if value:
            return value
    return None


def _text_param(*keys: int | str) -> Renderer:
    """Render the first non-empty of these arguments."""
    def render(call: TemplateCall) -> str | None:
        for key in keys:
            value = call.arg(key)
            if value:
                return value
        return None
    return render


def _constant(text: str) -> Renderer:
    return lambda _call: text


def _link(target: str, label: str = "") -> str:
    """``[[target|label]]`` when the target is a safe title, else the label alone."""
    target = target.strip()
    if not target or not _SAFE_LINK_TARGET.fullmatch(target):
        return label or target
    return f"[[{target}|{label}]]" if label and label != target else f"[[{target}]]"


def _month(value: str) -> int | None:
    value = value.strip()
    if value.isdigit():
        number = int(value)
        return number if 1 <= number <= 12 else None
    return _MONTH_NUMBERS.get(value.lower()[:3] if len(value) >= 3 else "")


def _date_parts(call: TemplateCall, first: int) -> tuple[int, int | None, int | None] | None:
    """(year, month, day) from positional arguments first, first+1, first+2."""
    year = call.arg(first)
    if not _YEAR.fullmatch(year):
        return None
    month = _month(call.arg(first + 1)) if call.arg(first + 1) else None
    day_text = call.arg(first + 2)
    day = int(day_text) if month and day_text.isdigit() and 1 <= int(day_text) <= 31 else None
    return int(year), month, day


def _format_date(parts: tuple[int, int | None, int | None], day_first: bool) -> str:
    year, month, day = parts
    if month is None:
        return str(year)
    if day is None:
        return f"{_MONTHS[month - 1]} {year}"
    return f"{day} {_MONTHS[month - 1]} {year}" if day_first else f"{_MONTHS[month - 1]} {day}, {year}"


def _day_first(call: TemplateCall) -> bool:
    return call.flag("df") and not call.flag("mf")


def _date(first: int = 1) -> Renderer:
    def render(call: TemplateCall) -> str | None:
        parts = _date_parts(call, first)
        return _format_date(parts, _day_first(call)) if parts else None
    return render


def _age(born: tuple[int, int | None, int | None], died: tuple[int, int | None, int | None]) -> str:
    years = died[0] - born[0]
    if born[1] and died[1] and born[2] and died[2]:
        if (died[1], died[2]) < (born[1], born[2]):
            years -= 1
        return f"(aged {years})"
    if born[1] and died[1] and born[1] != died[1]:
        return f"(aged {years - 1 if died[1] < born[1] else years})"
    return f"(aged {years - 1}\u2013{years})"


def _death_date_and_age(call: TemplateCall) -> str | None:
    died, born = _date_parts(call, 1), _date_parts(call, 4)
    if not died:
        return None
    text = _format_date(died, _day_first(call))
    return f"{text} {_age(born, died)}" if born else text


def _death_year_and_age(call: TemplateCall) -> str | None:
    died, born = call.arg(1), call.arg(2)
    if not _YEAR.fullmatch(died):
        return None
    if _YEAR.fullmatch(born):
        return f"{died} {_age((int(born), None, None), (int(died), None, None))}"
    return died


def _as_of(call: TemplateCall) -> str | None:
    alt = call.arg("alt")
    if alt:
        return alt
    parts = _date_parts(call, 1)
    if not parts:
        return None
    word = "Since" if call.flag("since") else "As of"
    if call.flag("lc"):
        word = word.lower()
    day_first = call.arg("df").upper() != "US"
    return f"{word} {_format_date(parts, day_first)}"


def _circa(call: TemplateCall) -> str:
    first, second = call.arg(1), call.arg(2)
    if first and second:
        return f"c.\u00a0{first} \u2013 c.\u00a0{second}"
    return f"c.\u00a0{first}" if first else "c."


def _prefixed(prefix: str) -> Renderer:
    def render(call: TemplateCall) -> str:
        values = [value for value in call.positional() if value]
        if len(values) >= 2:
            return f"{prefix}\u00a0{values[0]}\u2013{values[1]}"
        return f"{prefix}\u00a0{values[0]}" if values else prefix
    return render


# {{convert}}: value(s) and unit as written. Range words between two values.
_CONVERT_RANGES = {
    "-": "\u2013", "\u2013": "\u2013", "to": " to ", "to(-)": " to ", "and": " and ",
    "and(-)": " and ", "or": " or ", "x": " \u00d7 ", "\u00d7": " \u00d7 ", "by": " by ",
    "+/-": " \u00b1 ", "\u00b1": " \u00b1 ", "+": " + ", ",": ", ", ", and": ", and ",
    ", or": ", or ", "-to-": " to ", "xx": "\u00d7", "*": "\u00d7",
}
# Unit codes shown differently from how they are written (the rest as written).
_UNIT_SYMBOLS = {
    "C": "\u00b0C", "F": "\u00b0F", "degC": "\u00b0C", "degF": "\u00b0F",
    "km2": "km\u00b2", "m2": "m\u00b2", "cm2": "cm\u00b2", "mm2": "mm\u00b2", "sqkm": "km\u00b2",
    "sqm": "m\u00b2", "sqmi": "sq\u00a0mi", "sqft": "sq\u00a0ft", "ft2": "sq\u00a0ft",
    "sqyd": "sq\u00a0yd", "sqin": "sq\u00a0in", "m3": "m\u00b3", "km3": "km\u00b3",
    "cm3": "cm\u00b3", "cuft": "cu\u00a0ft", "ft3": "cu\u00a0ft", "cuyd": "cu\u00a0yd",
    "kph": "km/h", "kmh": "km/h", "kmph": "km/h", "ftin": "ft",
}


_UNIT_MULTIPLIERS = {"e3": "thousand", "e6": "million", "e9": "billion", "e12": "trillion"}


def _unit(code: str) -> str:
    """A {{convert}} unit code as shown: "km2" -> "km²", "e6acre" -> "million acre"."""
    symbol = _UNIT_SYMBOLS.get(code)
    if symbol:
        return symbol
    for prefix, word in _UNIT_MULTIPLIERS.items():
        if code.startswith(prefix) and len(code) > len(prefix) and code[len(prefix)].isalpha():
            return f"{word} {_unit(code[len(prefix):])}"
    return code


def _is_number(value: str) -> bool:
    return bool(_NUMBER.fullmatch(value.replace("\u00a0", "")))


def _convert(call: TemplateCall) -> str | None:
    args = call.positional()
    if not args or not _is_number(args[0]):
        return None
    text = args[0]
    index = 1
    while index + 1 < len(args) and args[index] in _CONVERT_RANGES and _is_number(args[index + 1]):
        text += _CONVERT_RANGES[args[index]] + args[index + 1]
        index += 2
    if index >= len(args) or not args[index]:
        return None
    text += "\u00a0" + _unit(args[index])
    # Mixed input units: {{convert|5|ft|6|in|m}} -> "5 ft 6 in".
    while index + 2 < len(args) and _is_number(args[index + 1]) and args[index + 2] \
            and not _is_number(args[index + 2]):
        text += f" {args[index + 1]}\u00a0{_unit(args[index + 2])}"
        index += 2
    return text


def _val(call: TemplateCall) -> str | None:
    value = call.arg(1)
    if not value:
        return None
    text = value
    error, lower = call.arg(2), call.arg(3)
    if error.startswith("("):
        text += error
    elif error and lower:
        text += "+" + error.lstrip("+") + "\u2212" + lower.lstrip("-\u2212")
    elif error:
        text += f"\u00b1{error}"
    exponent = call.arg("e")
    if exponent:
        text += f"\u00d710<sup>{exponent}</sup>"
    unit = call.arg("u") or call.arg("ul") or call.arg("up") or call.arg("upl")
    if unit:
        text += ("" if unit.startswith(("%", "\u00b0", "\u2032", "\u2033")) else "\u00a0") + unit
    return text


def _frac(call: TemplateCall) -> str | None:
    values = [value for value in call.positional()]
    if len(values) == 1:
        return f"1/{values[0]}" if values[0] else None
    if len(values) == 2:
        return f"{values[0]}/{values[1]}"
    if len(values) >= 3:
        whole = f"{values[0]} " if values[0] else ""
        return f"{whole}{values[1]}/{values[2]}"
    return "/"


def _nihongo(order: str) -> Renderer:
    """{{nihongo|english|kanji|romaji|extra|extra2}} and its relatives."""
    def render(call: TemplateCall) -> str | None:
        english, kanji, romaji, extra, extra2 = (call.arg(i) for i in range(1, 6))
        fields = {"e": english, "k": kanji, "r": romaji}
        ordered = [fields[key] for key in order if fields[key]]
        if not ordered:
            return None
        head, inside = ordered[0], ordered[1:]
        if extra:
            inside.append(extra)
        text = f"{head} ({', '.join(inside)})" if inside else head
        return f"{text} {extra2}" if extra2 else text
    return render


def _lang(call: TemplateCall) -> str | None:
    """{{lang|fr|text}}: the text (argument 2)."""
    return call.arg(2) or call.arg("text") or None


def _ipa(call: TemplateCall) -> str | None:
    """{{IPA|/pɛər/}} (old form) or {{IPA|fr|pʁɛ}} (language code first): the transcription."""
    first, second = call.arg(1), call.arg(2)
    if second and _LANGUAGE_CODE.fullmatch(first):
        return second
    return first or None


_IPAC_LABELS = frozenset((
    "lang", "local", "pron", "ipa", "also", "us", "uk", "ga", "rp", "au", "nz", "ca", "ie",
    "sa", "in", "ng", "usually", "often", "sometimes", "formerly", "locally", "ukalso",
    "usalso", "uklang", "uslang",
))


def _ipac(call: TemplateCall) -> str | None:
    """{{IPAc-en|ˈ|p|ɛər}} -> "/ˈpɛər/": the pieces as written, labels left out."""
    pieces = []
    for piece in call.positional():
        if piece.lower() in _IPAC_LABELS and not pieces:
            continue
        pieces.append("\u00a0" if piece == "_" else piece)
    text = "".join(pieces).strip()
    return f"/{text}/" if text else None


def _respell(call: TemplateCall) -> str | None:
    pieces = [piece.replace("_", " ") for piece in call.positional() if piece]
    return "-".join(pieces) or None


def _sic(call: TemplateCall) -> str:
    text = "".join(call.positional())
    if not text:
        return "[sic]"
    return text if call.flag("hide") else f"{text} [sic]"


def _nbsp(call: TemplateCall) -> str:
    count = call.arg(1)
    return "&nbsp;" * (int(count) if count.isdigit() and 0 < int(count) <= 20 else 1)


def _abbr(call: TemplateCall) -> str | None:
    return call.arg(1) or None


def _interlanguage_link(call: TemplateCall) -> str | None:
    """{{ill|Local title|de|Fremder Titel|lt=label}}: a link to the local title."""
    target = call.arg(1)
    if not target:
        return None
    return _link(target, call.arg("lt") or target)


def _untranslated_link(call: TemplateCall) -> str | None:
    """{{Не перекладено|Local title|label|en|Foreign title}} (uk, ru): a link to the local title."""
    target = call.arg(1)
    if not target:
        return None
    return _link(target, call.arg(2) or target)


_COUNTRY_CODE = re.compile(r"[A-Z]{2,3}")


def _flag(call: TemplateCall) -> str | None:
    """{{flag|France}} -> a link to the country; codes and variants cannot be resolved here."""
    country = call.arg(1)
    if not country or _COUNTRY_CODE.fullmatch(country) or call.arg(2):
        return None
    return _link(country, call.arg("name") or country)


def _quote(call: TemplateCall) -> str | None:
    text = call.arg("text") or call.arg("quote") or call.arg(1)
    return f"\n{text}\n" if text else None


def _angle_brackets(call: TemplateCall) -> str:
    return f"\u27e8{call.arg(1)}\u27e9"


def _join(separator: str) -> Renderer:
    return lambda call: separator.join(value for value in call.positional() if value) or None


def _page_name(call: TemplateCall) -> str | None:
    return call.title or None


def _case(transform: Callable[[str], str]) -> Renderer:
    return lambda call: transform(call.arg(1)) if call.arg(1) else None


def _spaced(text: str) -> Renderer:
    return _constant(f"&nbsp;{text} ")


_TEXT = _text_param(1)

# -- the registry --------------------------------------------------------------------
_GLOBAL: tuple[TemplateSpec, ...] = (
    # numbers, units, fractions
    TemplateSpec("Convert", _convert, ("Cvt", "Conv", "Convert2")),
    TemplateSpec("Val", _val, ("Value",)),
    TemplateSpec("Frac", _frac, ("Fraction", "Fract")),
    TemplateSpec("Sfrac", _frac, ("Stacked fraction",)),
    TemplateSpec("Nts", _TEXT, ("Number table sorting",)),
    # languages, scripts, transcriptions
    TemplateSpec("Lang", _lang, ("Language text",)),
    TemplateSpec("Langx", _lang, ("Lang-x",)),
    TemplateSpec("Lang-xx", _TEXT),  # {{lang-fr|text}}; see _PATTERNS
    TemplateSpec("Transl", _last_positional, ("Transliteration", "Tlit", "Translit")),
    TemplateSpec("Nihongo", _nihongo("ekr"), ("Nihongo4", "Nihon go")),
    TemplateSpec("Nihongo2", _nihongo("k")),
    TemplateSpec("Nihongo3", _nihongo("rke")),
    TemplateSpec("Nihongo foot", _nihongo("e")),
    TemplateSpec("IPA", _ipa, ("IPA2", "IPA-all", "Ipa")),
    TemplateSpec("IPA-xx", _TEXT),  # {{IPA-de|...}}; see _PATTERNS
    TemplateSpec("IPAc-xx", _ipac),  # {{IPAc-en|ˈ|p|ɛər}}; see _PATTERNS
    TemplateSpec("Respell", _respell),
    TemplateSpec("Script", _last_positional, ("Scri",)),
    TemplateSpec("Unicode", _TEXT, ("Unicode font", "Polytonic", "Coptic", "Hebrew")),
    # formatting wrappers: the text as written
    TemplateSpec("Nowrap", _TEXT, ("Nobr", "Nobreak", "Nowr", "No wrap", "NoWrap", "Nobreakspace")),
    TemplateSpec("Math", _TEXT, ("Mathematics", "Math2")),
    TemplateSpec("Mvar", _TEXT, ("Math variable", "Mathvar")),
    TemplateSpec("Small", _TEXT, ("Smaller", "Small2", "Midsize", "Big", "Larger", "Large",
                                  "Huge", "Resize2")),
    TemplateSpec("Resize", _last_positional, ("Font size", "Font-size")),
    TemplateSpec("Sup", _TEXT, ("Superscript",)),
    TemplateSpec("Sub", _TEXT, ("Subscript",)),
    TemplateSpec("Em", _TEXT, ("Emphasis", "Strong", "Var", "Code", "Mono", "Monospace", "Tt",
                               "Samp", "Kbd", "Smallcaps", "Sc", "Small caps", "Sc1",
                               "Not a typo", "Proper name", "As written", "Notatypo",
                               "Nobold", "Noitalic", "Normal")),
    TemplateSpec("Abbr", _abbr, ("Abbreviation", "Tooltip", "Hover title", "H:title",
                                 "Abbrlink", "Comment", "Hover")),
    TemplateSpec("Vanchor", _TEXT, ("Visible anchor",)),
    TemplateSpec("Angbr", _angle_brackets, ("Angle bracket", "Angle brackets", "Angbr IPA")),
    TemplateSpec("Linktext", _join("")),
    TemplateSpec("Quote", _quote, ("Blockquote", "Cquote", "Quotation", "Bquote", "Quote box",
                                   "Centered pull quote", "Cquotetxt")),
    TemplateSpec("Sic", _sic, ("Typo-sic",)),
    # dates
    TemplateSpec("Start date", _date(), ("Startdate", "End date", "Enddate",
                                          "Start date and age", "End date and age",
                                          "Film date", "Release date")),
    TemplateSpec("Birth date", _date(), ("Birthdate", "Dob", "Date of birth", "Birth date and age",
                                          "Bda", "Birth-date and age", "Birthdate and age",
                                          "Death date", "Deathdate", "Dod", "Date of death")),
    TemplateSpec("Death date and age", _death_date_and_age, ("Dda", "Death-date and age",
                                                             "Deathdateandage")),
    TemplateSpec("Birth year and age", _TEXT, ("Bya", "Birth year")),
    TemplateSpec("Death year and age", _death_year_and_age, ("Dya",)),
    TemplateSpec("As of", _as_of, ("Asof", "As at", "As Of")),
    TemplateSpec("Circa", _circa, ("C.", "Ca.", "Circ")),
    TemplateSpec("Floruit", _prefixed("fl."), ("Fl.", "Fl")),
    TemplateSpec("Reign", _prefixed("r."), ("R.", "Ruled")),
    # characters and punctuation
    TemplateSpec("Nbsp", _nbsp, ("Nbs", "Non-breaking space", "Spaces", "Space", "Thinsp",
                                 "Thin space", "Hair space", "Nnbsp")),
    TemplateSpec("'", _constant("&#39;"), ("Apostrophe",)),
    TemplateSpec("'s", _constant("&#39;s")),
    TemplateSpec("'\"", _constant("&#39;&quot;")),
    TemplateSpec("\"'", _constant("&quot;&#39;")),
    TemplateSpec("!", _constant("&#124;")),
    TemplateSpec("!!", _constant("&#124;&#124;")),
    TemplateSpec("=", _constant("&#61;")),
    TemplateSpec("Ndash", _constant("\u2013"), ("En dash", "Endash", "–")),
    TemplateSpec("Mdash", _constant("\u2014"), ("Em dash", "Emdash", "—")),
    TemplateSpec("Snd", _constant("&nbsp;\u2013 "), ("Spaced ndash", "Spaced en dash", "Snds",
                                                     "Sndash", "Spnd", "Dash")),
    TemplateSpec("Spaced mdash", _constant("&nbsp;\u2014 "), ("Smd", "Spmd")),
    TemplateSpec("Middot", _spaced("\u00b7"), ("·", "Dot", "Dot-sep")),
    TemplateSpec("Bullet", _spaced("\u2022"), ("•", "Bull")),
    TemplateSpec("Chem", _join(""), ("Chemical formula",)),
    TemplateSpec("Okina", _constant("\u02bb")),
    TemplateSpec("Break", _constant("<br />"), ("Br", "Crlf", "Crlf2")),
    TemplateSpec("Pi", _constant("\u03c0")),
    TemplateSpec("Shy", _constant(""), ("Zwsp", "Wbr", "Zwj", "Zwnj", "Allow wrap")),
    TemplateSpec("Nbhyph", _constant("\u2011"), ("Non-breaking hyphen",)),
    # magic words and parser functions rendered as text
    TemplateSpec("PAGENAME", _page_name, ("FULLPAGENAME", "BASEPAGENAME", "ARTICLEPAGENAME")),
    TemplateSpec("formatnum:", _TEXT),
    TemplateSpec("lc:", _case(str.lower)),
    TemplateSpec("uc:", _case(str.upper)),
    TemplateSpec("lcfirst:", _case(lambda s: s[:1].lower() + s[1:])),
    TemplateSpec("ucfirst:", _case(lambda s: s[:1].upper() + s[1:])),
    # links
    TemplateSpec("Ill", _interlanguage_link, ("Interlanguage link", "Interlanguage link multi",
                                              "Link-interwiki", "Illm", "Ill2", "Iii")),
    TemplateSpec("Flag", _flag, ("Flagcountry", "Flagu", "Flag country")),
    TemplateSpec("Citation needed span", _TEXT, ("Cn span", "Cn-span", "Fact span",
                                                 "Clarify span", "Dubious span",
                                                 "Disputed-inline span", "Vague span")),
    *(TemplateSpec(name, None, aliases) for name, aliases in {
        # -- omitted: nothing that belongs in prose. Citation-needed family:
        "Citation needed": ("Cn", "Fact", "Citation Needed", "Cite needed", "Citationneeded",
                            "Needs citation", "Cite-needed", "Ref needed", "Source needed",
                            "Citeneeded", "Uncited", "Cb", "Citation needed lead"),
        "Clarify": ("Clarification needed", "Elucidate", "Explain", "Huh"),
        "Dubious": ("Disputed inline", "Dubious-inline", "Contradict-inline"),
        "When": (), "Who": (), "Which": ("Which?",), "Whom": (), "Where": (), "Why": (),
        "By whom": (), "According to whom": (), "Failed verification": (
            "Verification failed", "Not in citation given", "Citation not found"),
        "Verify source": ("Verify credibility",), "Better source needed": (
            "Better source", "Bsn", "Unreliable source?", "Unreliable source",
            "Self-published inline", "Primary source inline", "Third-party inline",
            "Medical citation needed", "Obsolete source", "Irrelevant citation",
            "Circular reference"),
        "Page needed": ("Pn", "Page number", "Year needed", "Full citation needed", "Fcn",
                        "Incomplete short citation"),
        "Dead link": ("Dl", "Deadlink", "Cbignore", "Webarchive", "Wayback"),
        "Update inline": ("Update after",), "Vague": ("Vague inline", "Specify", "Nonspecific",
                                                      "Quantify", "Examples", "Definition needed"),
        "Attribution needed": (), "Original research inline": ("Or-inline", "Speculation-inline"),
        "Weasel inline": ("Peacock inline", "POV statement", "Pov-inline", "Unbalanced opinion",
                          "Lopsided", "Globalize inline", "Cleanup inline", "Fix"),
        "Verify spelling": ("Sic?",), "Chinese-wikipedia-needed": (),
        # footnotes and their markers (the notes themselves are like <ref>)
        "Efn": ("Efn-ua", "Efn-lr", "Efn-la", "Efn-lg", "Efn-ur", "Efn-ll", "Efn-lsl", "Refn",
                "Ref label", "Note label", "NoteTag", "Notetag", "Cref", "Cref2"),
        "Sfn": ("Sfnp", "Sfnm", "Sfn whole"), "Sfnref": (), "Harvnb": ("Harv", "Harvp", "Harvtxt"),
        "R": ("Rp",), "Ref": ("Note",),
        "Ref-lang": ("Ref-ru", "Ref-en", "Ref-uk", "Ref-de", "Ref-fr", "Ref-pl", "Ref-it",
                     "Ref-es", "Lang-ref"),
        # hatnotes
        "Main": ("Main article", "Main list", "Cat main"), "See also": ("Seealso", "Also"),
        "Further": ("Further information", "Further2", "Further-text", "Broader", "See"),
        "About": ("About-distinguish", "For", "For multi"),
        "Other uses": ("Otheruses", "Other uses of", "Other people", "Other persons",
                       "Other places", "Other ships"),
        "Redirect": ("Redirect2", "Redirect-multi", "Redirect-distinguish", "Redirect6"),
        "Distinguish": (), "Hatnote": ("Self reference", "Selfref"), "Details": (),
        # lists of notes, layout, page-level switches, banners, sister links
        "Reflist": ("References", "Notelist", "Notes", "Reflist-talk", "Refs"),
        "Refbegin": ("Refstart", "Notes start"), "Refend": (),
        "Clear": ("Clr", "Clear left", "Clear right", "Clearleft", "Clearright", "-"),
        "Short description": (), "Italic title": ("Lowercase title",),
        "DISPLAYTITLE:": (), "DEFAULTSORT:": ("Defaultsort",),
        "Good article": ("Good topic",), "Featured article": ("Featured list", "Featured portal"),
        "Authority control": (), "Portal": ("Portal bar", "Portal-inline"),
        "Commons category": ("Commons", "Commonscat", "Commons cat", "Commons category-inline"),
        "Wiktionary": (), "Wikiquote": (), "Wikisource": (), "Wikibooks": (), "Wikinews": (),
        "Wikiversity": (), "Wikivoyage": (), "Sister project links": (),
        "Wikipedia books": (), "Spoken Wikipedia": (),
        "Toc": ("TOC right", "TOC left", "TOC limit", "Compact ToC"),
        "Anchor": ("Anchors",), "Multiple issues": (),
        "More citations needed": ("Refimprove", "Refimprove section",
                                  "More citations needed section", "Unreferenced",
                                  "Unreferenced section", "Primary sources"),
        "Expand section": ("Expand", "Empty section", "Sect-stub"),
        "Cleanup": ("Copyedit", "Update", "Too long", "Over-quotation", "POV", "Tone",
                    "Essay-like", "Advert", "Notability", "Original research", "Peacock",
                    "Weasel", "Globalize", "Confusing", "Technical", "Like resume",
                    "Autobiography", "Lead too short", "Lead too long", "Orphan", "Dead end"),
        "Stub": (), "Taxonbar": (), "Coord missing": (),
        "Use dmy dates": ("Use mdy dates", "Use ymd dates"), "Engvar": ("EngvarB",),
        "Pp": ("Pp-semi", "Pp-move", "Pp-protected"), "Inflation-fn": (),
        "Div col": ("Column-count",), "Div col end": (), "Col-begin": (), "Col-break": (),
        "Col-end": (), "Bots": ("Nobots",), "Noindex": (),
        "Multiple image": ("Double image", "Wide image", "Clade gallery", "Superimpose",
                           "Image label small", "Image label"),
        "Stack": ("Stack begin", "Stack end"), "Flagicon": ("Flag icon",), "Color box": (),
    }.items()),
)

# Template names by pattern (after normalisation): the canonical spec name they use.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"Lang-[a-zA-Z]{2,3}(?:-[a-zA-Z0-9]+)*\d?", "Lang-xx"),
    (r"IPA-[a-zA-Z]{2,3}(?:-[a-zA-Z0-9]+)*", "IPA-xx"),
    (r"IPAc-[a-zA-Z]{2,3}(?:-[a-zA-Z0-9]+)*", "IPAc-xx"),
    (r"Pp-[\w -]+", "Pp"),
    (r"Use [\w -]+ (?:English|spelling)", "Engvar"),
    (r"Use [\w -]+ dates", "Use dmy dates"),
    (r"[\w -]+-stub", "Stub"),
)

# Per-language names: local name -> a registered name (canonical or alias).
_LANGUAGE_ALIASES: dict[str, dict[str, str]] = {
    "uk": {
        "Основна стаття": "Main", "Див. також": "See also", "Докладніше": "Further",
        "Детальніше": "Further", "Значення": "About", "Інші значення": "Other uses",
        "Примітки": "Reflist", "Якір": "Anchor", "Вікіцитати1": "Wikiquote",
        "Портали": "Portal", "ВП-портали": "Portal", "Бібліоінформація": "Authority control",
        "Прапорець": "Flagicon", "Недоступне посилання": "Dead link",
        "Джерело?": "Citation needed", "Без джерел": "Unreferenced", "Цитата": "Quote",
        "Розширити розділ": "Expand section", "Comment": "Abbr", "Iw": "Не перекладено",
    },
    "ru": {
        "Основная статья": "Main", "См. также": "See also", "Примечания": "Reflist",
        "Нет АИ": "Citation needed", "Не переведено 5": "Не переведено",
        "Нп5": "Не переведено", "Нп3": "Не переведено", "Якорь": "Anchor", "Цитата": "Quote",
    },
    "fr": {
        "Référence nécessaire": "Citation needed", "Refnec": "Citation needed",
        "Article détaillé": "Main", "Voir aussi": "See also", "Références": "Reflist",
        "Langue": "Lang", "Citation": "Quote",
    },
    "de": {"Hauptartikel": "Main", "Siehe auch": "See also", "Belege fehlen": "More citations needed"},
}

# Templates only some wikis have, with their own argument conventions.
_LANGUAGE_SPECS: dict[str, tuple[TemplateSpec, ...]] = {
    "uk": (TemplateSpec("Не перекладено", _untranslated_link, ("Нп", "Не перекладена")),),
    "ru": (TemplateSpec("Не переведено", _untranslated_link, ("Нп",)),),
    "fr": (TemplateSpec("Unité", _join("\u00a0"), ("Nombre",)),),
}


# -- name normalisation and lookup ---------------------------------------------------------
_SPACES = re.compile(r"[\s_]+")
_PARSER_FUNCTIONS = frozenset((
    "formatnum", "lc", "uc", "lcfirst", "ucfirst", "displaytitle", "defaultsort",
    "defaultsortkey", "defaultcategorysort", "int", "ns", "nse", "urlencode", "anchorencode",
    "fullurl", "localurl", "canonicalurl", "filepath", "padleft", "padright", "plural",
    "grammar", "gender", "tag", "language", "pagesincategory", "numberofarticles", "msg",
    "raw", "subst", "safesubst", "msgnw", "bidi", "special", "speciale", "pagesize",
    "protectionlevel", "revisionid", "revisionuser", "rel2abs", "titleparts", "noexternallanglinks",
))
_DYNAMIC = re.compile(r"[<{}\[\]\n]")  # a name built by other markup, not a plain title
_NAME_PREFIXES = re.compile(r"^(?:safesubst|subst|msgnw|msg|raw)\s*:\s*", re.IGNORECASE)
MAX_NAME_CHARS = 80


@lru_cache(maxsize=None)
def _pattern_table() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern), name) for pattern, name in _PATTERNS)


class TemplateRegistry:
    """The registry as one wiki sees it: its language's names and namespace names.

    ``lookup(raw_name)`` -> ``(normalised name, spec or None)``; results are
    cached per raw name (bounded), as the same few hundred names repeat.
    """

    __slots__ = ("language", "_by_name", "_ns_keys", "_cache")
    MAX_CACHE = 50_000

    def __init__(self, language: str = "", template_namespace_names: Iterable[str] = ("Template",)):
        self.language = language
        by_name: dict[str, TemplateSpec] = {}
        for spec in (*_GLOBAL, *_LANGUAGE_SPECS.get(language, ())):
            for name in (spec.name, *spec.aliases):
                by_name[_fold(name)] = spec
        for local, target in _LANGUAGE_ALIASES.get(language, {}).items():
            spec = by_name.get(_fold(target))
            if spec is not None:
                by_name[_fold(local)] = spec
        self._by_name = by_name
        self._ns_keys = frozenset(prefix_key(name) for name in template_namespace_names if name)
        self._cache: dict[str, tuple[str, TemplateSpec | None]] = {}

    def lookup(self, raw_name: str) -> tuple[str, TemplateSpec | None]:
        hit = self._cache.get(raw_name)
        if hit is not None:
            return hit
        hit = self._resolve(raw_name)
        if len(self._cache) >= self.MAX_CACHE:
            self._cache.clear()
        self._cache[raw_name] = hit
        return hit

    def _resolve(self, raw_name: str) -> tuple[str, TemplateSpec | None]:
        name = _NAME_PREFIXES.sub("", raw_name.strip())
        colon = name.find(":")
        head = name[:colon].strip() if colon > 0 else ""
        if head and not _DYNAMIC.search(head):
            if head.startswith("#"):  # #if:, #tag:, #invoke:Module
                if head.lower() == "#invoke":
                    module = _SPACES.sub(" ", name[colon + 1:]).strip()
                    return f"#invoke:{module[:MAX_NAME_CHARS]}", None
                return f"{head.lower()}:", None
            if head.lower() in _PARSER_FUNCTIONS:
                key = f"{head.lower()}:"
                spec = self._by_name.get(_fold(key)) or self._by_name.get(_fold(head.upper() + ":"))
                return (spec.name if spec else key), spec
        if _DYNAMIC.search(name):
            return "(dynamic name)", None
        name = _SPACES.sub(" ", name).strip()
        if not name:
            return "(empty name)", None
        if head and prefix_key(head) in self._ns_keys:  # {{Template:Foo}}, {{Шаблон:Foo}}
            name = name[name.find(":") + 1:].strip()
        if len(name) > MAX_NAME_CHARS:
            return "(long name)", None
        display = name[:1].upper() + name[1:]
        spec = self._by_name.get(_fold(name))
        if spec is None:
            for pattern, canonical in _pattern_table():
                if pattern.fullmatch(display):
                    spec = self._by_name.get(_fold(canonical))
                    break
        return (spec.name if spec else display), spec


def _fold(name: str) -> str:
    """Key for name matching: first letter case-insensitive, spaces/underscores folded."""
    name = _SPACES.sub(" ", name).strip()
    return name[:1].upper() + name[1:]


@lru_cache(maxsize=64)
def registry_for(site: SiteInfo) -> TemplateRegistry:
    """The registry for a wiki: its language's templates, its Template namespace names."""
    table = namespace_table(site)
    names = [name for name, ns in table.by_name.items() if ns == NS_TEMPLATE]
    return TemplateRegistry(site.language, names)


def registered_names(language: str = "") -> list[str]:
    """Canonical names of the templates the registry renders or omits (for docs and tests)."""
    return sorted({spec.name for spec in (*_GLOBAL, *_LANGUAGE_SPECS.get(language, ()))})
