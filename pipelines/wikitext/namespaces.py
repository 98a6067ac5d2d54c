"""Namespace names, interwiki and interlanguage prefixes known to every wiki.

A dump's ``<siteinfo>`` lists only the wiki's *local* namespace names. MediaWiki
also accepts the canonical English names (``[[Image:x]]`` and ``[[File:x]]`` are
files on every wiki), a few built-in aliases, and per-language aliases
(``Bild``, ``Изображение``). Links whose prefix is a language code are
interlanguage links; prefixes from the Wikimedia interwiki map go to sister
projects. This module holds those tables and builds, once per ``SiteInfo``,
the lookup used by :mod:`pipelines.wikitext.titles`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from pipelines.records import Namespace, SiteInfo

FIRST_LETTER = "first-letter"
CASE_SENSITIVE = "case-sensitive"

NS_MEDIA = -2
NS_SPECIAL = -1
NS_MAIN = 0
NS_FILE = 6
NS_TEMPLATE = 10
NS_CATEGORY = 14

# MediaWiki's canonical English names, valid on every wiki whatever its language.
CANONICAL_NAMESPACES: Mapping[int, str] = MappingProxyType({
    -2: "Media", -1: "Special", 0: "",
    1: "Talk", 2: "User", 3: "User talk", 4: "Project", 5: "Project talk",
    6: "File", 7: "File talk", 8: "MediaWiki", 9: "MediaWiki talk",
    10: "Template", 11: "Template talk", 12: "Help", 13: "Help talk",
    14: "Category", 15: "Category talk",
    # Extension namespaces present on (nearly) all Wikipedias.
    100: "Portal", 101: "Portal talk", 108: "Book", 109: "Book talk",
    118: "Draft", 119: "Draft talk", 446: "Education Program", 447: "Education Program talk",
    710: "TimedText", 711: "TimedText talk", 828: "Module", 829: "Module talk",
    2300: "Gadget", 2301: "Gadget talk", 2302: "Gadget definition", 2303: "Gadget definition talk",
    2600: "Topic",
})

# Aliases MediaWiki core (and Wikimedia's config) resolves on every Wikipedia.
GLOBAL_ALIASES: Mapping[str, int] = MappingProxyType({
    "Image": 6, "Image talk": 7, "Wikipedia": 4, "Wikipedia talk": 5,
    "WP": 4, "WT": 5, "Project": 4, "Project talk": 5,
})

# Well-known localised names of a few big Wikipedias, used when the dump's
# <siteinfo> is missing or lists only the current name (old names stay valid).
LOCALISED_ALIASES: Mapping[str, Mapping[str, int]] = MappingProxyType({
    "de": {"Medium": -2, "Spezial": -1, "Diskussion": 1, "Benutzer": 2, "Benutzerin": 2,
           "Datei": 6, "Bild": 6, "Vorlage": 10, "Hilfe": 12, "Kategorie": 14, "Portal": 100},
    "fr": {"Média": -2, "Spécial": -1, "Discussion": 1, "Utilisateur": 2, "Utilisatrice": 2,
           "Fichier": 6, "Modèle": 10, "Aide": 12, "Catégorie": 14, "Portail": 100, "Projet": 102},
    "es": {"Medio": -2, "Especial": -1, "Discusión": 1, "Usuario": 2, "Usuaria": 2,
           "Archivo": 6, "Imagen": 6, "Plantilla": 10, "Ayuda": 12, "Categoría": 14, "Anexo": 104},
    "it": {"Speciale": -1, "Discussione": 1, "Utente": 2, "Immagine": 6, "Aiuto": 12,
           "Categoria": 14, "Portale": 100, "Progetto": 102},
    "pt": {"Especial": -1, "Discussão": 1, "Usuário": 2, "Utilizador": 2, "Ficheiro": 6,
           "Arquivo": 6, "Imagem": 6, "Predefinição": 10, "Ajuda": 12, "Categoria": 14, "Portal": 100},
    "nl": {"Speciaal": -1, "Overleg": 1, "Gebruiker": 2, "Bestand": 6, "Afbeelding": 6,
           "Sjabloon": 10, "Categorie": 14, "Portaal": 100},
    "pl": {"Specjalna": -1, "Dyskusja": 1, "Wikipedysta": 2, "Wikipedystka": 2, "Plik": 6,
           "Grafika": 6, "Szablon": 10, "Pomoc": 12, "Kategoria": 14, "Portal": 100},
    "sv": {"Special": -1, "Diskussion": 1, "Användare": 2, "Fil": 6, "Bild": 6, "Mall": 10,
           "Hjälp": 12, "Kategori": 14, "Portal": 100},
    "uk": {"Медіа": -2, "Спеціальна": -1, "Обговорення": 1, "Користувач": 2, "Користувачка": 2,
           "Вікіпедія": 4, "ВП": 4, "Файл": 6, "Зображення": 6, "Шаблон": 10, "Довідка": 12,
           "Категорія": 14, "Портал": 100, "Модуль": 828},
    "ru": {"Медиа": -2, "Служебная": -1, "Обсуждение": 1, "Участник": 2, "Участница": 2,
           "Википедия": 4, "ВП": 4, "Файл": 6, "Изображение": 6, "Шаблон": 10, "Справка": 12,
           "Категория": 14, "Портал": 100, "Модуль": 828},
    "ja": {"特別": -1, "ノート": 1, "利用者": 2, "ファイル": 6, "画像": 6, "ヘルプ": 12,
           "カテゴリ": 14, "Category": 14, "ポータル": 100},
    "zh": {"特殊": -1, "讨论": 1, "討論": 1, "用户": 2, "用戶": 2, "文件": 6, "檔案": 6,
           "档案": 6, "图像": 6, "圖像": 6, "模板": 10, "帮助": 12, "幫助": 12, "分类": 14,
           "分類": 14, "主题": 100, "主題": 100},
})

# Language codes of the Wikipedias (and the legacy/alias codes the interwiki
# map still resolves). A link prefixed with one of these is interlanguage.
WIKIPEDIA_LANGUAGE_CODES: frozenset[str] = frozenset("""
aa ab ace ady af ak als alt am ami an ang ann anp ar arc ary arz as ast atj av avk awa ay az azb
ba ban bar bat-smg bbc bcl bdr be be-tarask be-x-old bew bg bh bi bjn blk bm bn bo bpy br bs btm bug bxr
ca cbk-zam cdo ce ceb ch cho chr chy ckb co cr crh cs csb cu cv cy
da dag de dga din diq dsb dtp dty dv dz ee el eml en eo es et eu ext
fa fat ff fi fiu-vro fj fo fon fr frp frr fur fy ga gag gan gcr gd gl glk gn gom gor got gpe gsw gu guc gur guw gv
ha hak haw he hi hif ho hr hsb ht hu hy hyw hz ia iba id ie ig igl ii ik ilo inh io is it iu
ja jam jbo jv ka kaa kab kbd kbp kcg kg kge ki kj kk kl km kn knc ko koi kr krc ks ksh ku kus kv kw ky
la lad lb lbe lez lfn lg li lij lld lmo ln lo lrc lt ltg lv lzh
mad mai map-bms mdf mg mh mhr mi min mk ml mn mni mnw mo mos mr mrj ms mt mus mwl my myv mzn
na nah nan nap nb nds nds-nl ne new ng nia nl nn no nov nqo nr nrm nso nup nv ny
oc olo om or os pa pag pam pap pcd pcm pdc pfl pi pih pl pms pnb pnt ps pt pwn qu
rm rmy rn ro roa-rup roa-tara rsk ru rue rup rw sa sah sat sc scn sco sd se sg sgs sh shi shn si simple
sk skr sl sm smn sn so sq sr srn ss st stq su sv sw szl szy
ta tay tcy tdd te tet tg th ti tig tk tl tly tn to tok tpi tr trv ts tt tum tw ty tyv
udm ug uk ur uz ve vec vep vi vls vo vro wa war wo wuu xal xh xmf yi yo yue za zea zgh zh
zh-classical zh-min-nan zh-yue zu
""".split())

# Prefixes of the Wikimedia interwiki map that lead to sister projects and
# other sites (not languages). Lower-case, spaces as in titles.
INTERWIKI_PREFIXES: frozenset[str] = frozenset("""
w wikipedia wikt wiktionary commons c s wikisource q wikiquote b wikibooks n wikinews
v wikiversity voy wikivoyage species wikispecies meta m metawikimedia metawikipedia mw mediawikiwiki
d wikidata foundation wmf wikimedia wikimediafoundation phab phabricator doi outreach incubator
wikitech wikitech-l mediazilla bugzilla gerrit rev diff oldid toollabs toolforge tools testwiki
translatewiki betawikiversity wikiapiary strategy usability quality otrs ticket mail mailarchive
irc ircrc arxiv rfc pmid hdl oclc worldcat iarchive google googlegroups gutenberg wikia fandom
wikihow wikitravel memoryalpha uncyclopedia sourceforge scholar dictionary urbandict imdbname
imdbtitle imdbcompany imdbcharacter osmwiki openstreetmap wmar wmau wmbe wmca wmch wmde wmfr wmit
wmpl wmru wmse wmuk wmua labsconsole wmfblog spcom nost wiktionary-l wikispecies-l wikinvest
""".split())


@dataclass(frozen=True, slots=True)
class NamespaceTable:
    """Everything needed to split a title into prefix and page name for one wiki."""

    by_name: Mapping[str, int]  # case-folded name or alias -> namespace id
    local_names: Mapping[int, str]  # namespace id -> the wiki's display name
    case_of: Mapping[int, str]  # namespace id -> "first-letter" / "case-sensitive"
    default_case: str
    language: str  # the wiki's own language code ("" when unknown)

    def case_for(self, ns: int) -> str:
        return self.case_of.get(ns, self.default_case)

    def display_name(self, ns: int) -> str:
        return self.local_names.get(ns) or CANONICAL_NAMESPACES.get(ns, str(ns))


def prefix_key(name: str) -> str:
    """Lookup key of a namespace or interwiki prefix: case-insensitive, ``_`` == space."""
    return " ".join(name.replace("_", " ").split()).casefold()


@lru_cache(maxsize=128)
def namespace_table(site: SiteInfo) -> NamespaceTable:
    """Build (and cache) the prefix lookup of ``site``; later sources override earlier ones."""
    by_name: dict[str, int] = {}
    for ns_id, name in CANONICAL_NAMESPACES.items():
        if name:
            by_name[prefix_key(name)] = ns_id
    for alias, ns_id in GLOBAL_ALIASES.items():
        by_name[prefix_key(alias)] = ns_id
    for alias, ns_id in LOCALISED_ALIASES.get(site.language, {}).items():
        by_name[prefix_key(alias)] = ns_id
    local_names: dict[int, str] = {}
    case_of: dict[int, str] = {}
    for ns in site.namespaces:
        _add_site_namespace(ns, by_name, local_names, case_of)
    return NamespaceTable(
        by_name=MappingProxyType(by_name),
        local_names=MappingProxyType(local_names),
        case_of=MappingProxyType(case_of),
        default_case=site.case or FIRST_LETTER,
        language=site.language,
    )


def _add_site_namespace(ns: Namespace, by_name: dict[str, int],
                        local_names: dict[int, str], case_of: dict[int, str]) -> None:
    if ns.name:
        by_name[prefix_key(ns.name)] = ns.id
        local_names[ns.id] = ns.name
    for alias in ns.aliases:
        if alias:
            by_name[prefix_key(alias)] = ns.id
    if ns.case:
        case_of[ns.id] = ns.case
