"""Redirect pages: ``#REDIRECT [[Target#Section]]`` -> ``"Target"``.

MediaWiki recognises the redirect magic word only at the very start of the
page (leading whitespace allowed), case-insensitively, in English and in the
wiki's language, optionally followed by ``:``. We accept the localised words of
all languages in :data:`REDIRECT_MAGIC_WORDS` on every wiki: a non-redirect
article cannot start with ``#<word> [[``, so this costs nothing and covers
dumps whose dbname is unknown.
"""
from __future__ import annotations

import re

from pipelines.records import SiteInfo
from pipelines.wikitext.namespaces import NS_MAIN, namespace_table
from pipelines.wikitext.titles import ARTICLE, NAMESPACE, parse_link_target_with

REDIRECT_MAGIC_WORDS: dict[str, tuple[str, ...]] = {
    "en": ("REDIRECT",),
    "de": ("WEITERLEITUNG",),
    "fr": ("REDIRECTION",),
    "es": ("REDIRECCIÓN", "REDIRECCION"),
    "it": ("RINVIA", "RINVIO", "RIMANDO"),
    "nl": ("DOORVERWIJZING",),
    "pl": ("PRZEKIERUJ", "TAM"),
    "pt": ("REDIRECIONAMENTO", "REDIRECIONA"),
    "sv": ("OMDIRIGERING",),
    "no": ("OMDIRIGERING",),
    "da": ("OMDIRIGERING",),
    "fi": ("OHJAUS", "UUDELLEENOHJAUS"),
    "cs": ("PŘESMĚRUJ",),
    "hu": ("ÁTIRÁNYÍTÁS",),
    "tr": ("YÖNLENDİRME", "YÖNLENDİR", "YÖNLENDIRME"),
    "uk": ("ПЕРЕНАПРАВЛЕННЯ", "ПЕРЕНАПР"),
    "ru": ("ПЕРЕНАПРАВЛЕНИЕ", "ПЕРЕНАПР"),
    "be": ("ПЕРАНАКІРАВАННЕ",),
    "bg": ("ПРЕНАСОЧВАНЕ", "ВИЖ"),
    "sr": ("ПРЕУСМЕРИ", "PREUSMERI"),
    "ja": ("転送", "リダイレクト"),
    "zh": ("重定向",),
    "ko": ("넘겨주기",),
    "ar": ("تحويل",),
    "fa": ("تغییرمسیر", "تغییر_مسیر"),
    "he": ("הפניה",),
    "id": ("ALIH",),
    "vi": ("ĐỔI",),
    "ca": ("REDIRECCIÓ",),
}

_ALL_WORDS = sorted({word for words in REDIRECT_MAGIC_WORDS.values() for word in words},
                    key=len, reverse=True)
_REDIRECT = re.compile(
    r"\A[\s\ufeff]*#(?:" + "|".join(map(re.escape, _ALL_WORDS)) + r")[\s:]*\[\[([^\[\]|\n]*)",
    re.IGNORECASE,
)


def redirect_target(wikitext: str, site: SiteInfo) -> str | None:
    """Normalised target title of a redirect page (fragment dropped), else None.

    Returns ``None`` for non-redirects and for redirects whose target is not a
    local page (interwiki, invalid, section-only). A redirect to another
    namespace returns its full title (``"Wikipedia:Foo"``).
    """
    match = _REDIRECT.match(wikitext)
    if match is None:
        return None
    target = parse_link_target_with(match.group(1), namespace_table(site))
    if target.kind == ARTICLE or (target.kind == NAMESPACE and target.ns == NS_MAIN):
        return target.title
    if target.kind == NAMESPACE:
        return target.full_title
    return None
