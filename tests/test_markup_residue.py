"""No wikitext markup in the passages the corpus job writes, on every shared dump.

The job runs as a user runs it; its passages (token ids in Parquet, the ground
truth) are decoded with the tokenizer the job saved in OUT/tokenizer, and at
most 0.1% of them may contain "[[", "]]", "{{", "}}", "<ref", "{|" or "|}".
Every dump file in ../shared/wikidumps is checked, whatever is added there:
those the job already runs on in tests/test_pipeline_real_dumps.py are checked
there (``assert_no_markup``), the rest here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HAVE_WIKIDUMPS, WIKIDUMPS
from tests.corpus_checks import passages

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]

MARKUP = ("[[", "]]", "{{", "}}", "<ref", "{|", "|}")
MAX_SHARE = 0.001
DUMP_SUFFIXES = (".xml", ".xml.bz2", ".xml.xz", ".xml.gz", ".xml.zst")


# Checked by the end-to-end tests that already run the job on them.
CHECKED_IN_PIPELINE_TESTS = frozenset((
    "enwiki-2016-206pages-articles1-multistream.xml.bz2",
    "ukwiki-2023-first100k-lines-truncated.xml.xz",
    "enwiki-5pages-tables-no-siteinfo.xml.bz2",
    "enwiki-2019-11pages-partial.xml",
    "simplewiki-2019-7pages.xml.bz2",
    "enwiki-2019-196pages-namespaces.xml.bz2",
))


def shared_dumps() -> list[str]:
    if not HAVE_WIKIDUMPS:
        return []
    return sorted(path.name for path in WIKIDUMPS.iterdir() if path.name.endswith(DUMP_SUFFIXES))


def decoded_passages(out: Path) -> list[str]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    rows = passages(out, "train") + passages(out, "validation")
    return [tokenizer.decode(row["token_ids"]) for row in rows]


def assert_no_markup(out: Path, name: str) -> None:
    """At most MAX_SHARE of the passages in ``out`` hold wikitext markup."""
    texts = decoded_passages(out)
    assert texts, f"no passages from {name}"
    with_markup = [text for text in texts if any(markup in text for markup in MARKUP)]
    share = len(with_markup) / len(texts)
    examples = [text[max(min(text.find(m) for m in MARKUP if m in text) - 80, 0):][:200]
                for text in with_markup[:3]]
    assert share <= MAX_SHARE, (name, f"{len(with_markup)}/{len(texts)} passages", examples)


def test_every_shared_dump_is_checked():
    if not HAVE_WIKIDUMPS:
        pytest.skip(f"no real dump excerpts at {WIKIDUMPS}")
    assert CHECKED_IN_PIPELINE_TESTS <= set(shared_dumps())


@pytest.mark.parametrize("name", [name for name in shared_dumps()
                                  if name not in CHECKED_IN_PIPELINE_TESTS])
def test_passages_hold_no_markup(name: str, request):
    if name == "enwiki-2016-206pages-articles1.xml.bz2":  # reuse the session's run
        out = request.getfixturevalue("enwiki206_corpus")
    else:
        out = request.getfixturevalue("shared_dump_corpus")(name)  # the session's run, shared with the linker tests
    assert_no_markup(out, name)
