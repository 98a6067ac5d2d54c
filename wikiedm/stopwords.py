"""Stopword lists: aliases that are stopwords are never used as labels.

A stopword alias ("The", "He", "It", "May") is a real anchor text somewhere in
Wikipedia, but matching it in free text labels function words. Built-in
lists cover the most frequent function words of a few languages; more can be
added with a file. A *spec* string selects lists, so it works as one CLI flag:

- ``"en"`` or ``"en,de"``: built-in lists by language code;
- a path (local or ``gs://``) to a UTF-8 file, one word per line, ``#`` comments;
- ``""`` or ``"none"``: no stopwords.

Matching is case-insensitive (``str.casefold``), so "The" and "THE" are
caught by "the".
"""
from __future__ import annotations

import functools

_BUILTIN: dict[str, str] = {
    "en": """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me more
most my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves one two three four five six seven eight nine ten first
second third new old many much may might must shall yes
""",
    "de": """
aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes auch
auf aus bei bin bis bist da damit dann das dass dein deine dem den der des dessen dich die dies diese
diesem diesen dieser dieses dir doch dort du durch ein eine einem einen einer eines er es etwas euer
für gegen hat hatte hier hin hinter ich ihm ihn ihnen ihr ihre im in indem ins ist jede jedem jeden
jeder jedes jene jetzt kann kein keine man manche mein meine mit muss nach nicht nichts noch nun nur
ob oder ohne sehr sein seine sich sie sind so solche soll sondern über um und uns unser unter vom von
vor war waren was weil welche wenn wer werden wie wieder wir wird wo zu zum zur zwischen
""",
    "fr": """
à au aux avec ce ces cet cette dans de des du elle elles en est et eux il ils je la le les leur
leurs lui ma mais me même mes moi mon ne nos notre nous on ou où par pas pour qu que qui sa se ses
son sont sur ta te tes toi ton tu un une vos votre vous était été être avoir ont sans sous entre
aussi plus comme tout tous toute toutes
""",
    "es": """
a al algo como con de del desde donde el ella ellas ellos en entre era es esa ese eso esta este esto
estos fue ha hay la las le les lo los mas más me mi muy no nos o para pero por que qué se sin sobre
su sus también te tu un una uno unos y ya yo
""",
    "it": """
a al alla alle agli ai anche che chi ci come con da dal dalla dei del della delle di e è ed gli ha
i il in io la le lei lo loro lui ma mi ne nei nel nella non o per più se si sono su sua sue suo suoi
tra tu un una uno
""",
    "pt": """
a ao aos as até com como da das de do dos e é ela ele eles em entre era essa esse esta este eu foi
já la mais mas me muito na nas não no nos o os ou para pela pelo por que se sem ser seu sua são
também te um uma
""",
    "nl": """
aan al als bij dan dat de der deze die dit door een en er had heeft het hij hoe ik in is je kan maar
met na naar niet nog of om onder ook op over te tot uit van voor was wat we wel werd wie wij zal ze
zich zij zijn zo
""",
    "ru": """
а без более бы был была были было в вам вас весь во вот все всего всех вы где да для до его ее её
если есть еще ещё же за и из или им их к как когда кто ли меня мне мы на над не него нее неё нет ни
них но о об он она они оно от по под при с со так также то того тоже только том ты у уже что эта
эти это этот я
""",
    "uk": """
а але без би був була були було в вам вас весь від він вона вони воно все всі де для до є же за з
зі і із й їх коли крім лише мене мені ми на над не неї ні них о об однак по під при про та так також
те тим то тобто тут у уже хто це цей ці цього чи що щоб я як які
""",
    "pl": """
a aby ale bez był była było być co czy dla do gdy go i ich im jak jako jej jest jego już ku lub ma
mi na nad nie niż o od oraz po pod przez przy się są ta tak także te tego ten to tu tylko w we z za
ze że
""",
    "sv": """
att av de den det där efter eller en ett för från har hon i inte jag kan med men mot när och om på
sig som så till under upp ut var vid än är över
""",
}

LANGUAGES: tuple[str, ...] = tuple(sorted(_BUILTIN))


def builtin_stopwords(language: str) -> frozenset[str]:
    """The built-in list of ``language`` (empty when there is none), casefolded."""
    return frozenset(w.casefold() for w in _BUILTIN.get(language.lower(), "").split())


def parse_stopword_lines(lines: str) -> frozenset[str]:
    """Words of a stopword file: one per line, blank lines and ``#`` comments ignored."""
    words = (line.split("#", 1)[0].strip() for line in lines.splitlines())
    return frozenset(w.casefold() for w in words if w)


@functools.lru_cache(maxsize=32)
def resolve_stopwords(spec: str) -> frozenset[str]:
    """Resolve a spec (``"en,de"``, a file path, ``"none"``) into one casefolded set."""
    words: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part or part.lower() == "none":
            continue
        if part.lower() in _BUILTIN:
            words |= builtin_stopwords(part)
        elif "/" in part or "." in part:
            words |= parse_stopword_lines(_read_text(part))
        else:
            raise ValueError(
                f"unknown stopword list {part!r}: use a language code in {', '.join(LANGUAGES)}, "
                "a path to a file with one word per line, or 'none'"
            )
    return frozenset(words)


def stopword_spec_for_language(language: str) -> str:
    """A spec for a wiki's language: English plus the language's list when built in.

    English is always included because English names and function words
    ("The", "And") appear in titles and text of every Wikipedia.
    """
    lang = language.lower().split("-", 1)[0]
    return "en" if lang in ("", "en") or lang not in _BUILTIN else f"en,{lang}"


def _read_text(path: str) -> str:
    if "://" not in path:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    from wikiedm import storage  # gs://, s3://...

    return storage.read_bytes(path).decode("utf-8")
