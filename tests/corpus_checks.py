"""Independent checks of a corpus folder's contract, shared by the end-to-end tests.

Nothing here calls the pipeline's own code except the schemas and the saved
tokenizer: the expected values come from the files themselves or from the
raw XML.
"""
from __future__ import annotations

import bz2
import json
import lzma
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from schemas import ALIAS_SCHEMA, ENTITY_VOCAB_SCHEMA, PASSAGE_SCHEMA, PASSAGE_SCHEMA_NO_TEXT
from schemas.corpus import MENTION_SOURCES


def read_table(paths):
    import pyarrow as pa

    tables = [pq.read_table(p) for p in paths]
    return pa.concat_tables(tables) if tables else None


def passages(out: Path, split: str) -> list[dict]:
    files = sorted((out / "passages").glob(f"{split}-*.parquet"))
    rows: list[dict] = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def vocab(out: Path) -> list[dict]:
    return pq.read_table(out / "entity_vocab" / "entity_vocab.parquet").to_pylist()


def alias_rows(out: Path) -> list[dict]:
    rows: list[dict] = []
    for f in sorted((out / "alias_table").glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def check_passage_contract(out: Path, *, window: int = 128, overlap: int = 10, text: bool = True) -> dict:
    """Assert the output contract of passages; return a few totals for further checks.

    ``text``: whether the passages carry their text (``--passage_text``, on by default).
    """
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    vocab_rows = vocab(out)
    id_to_entity = {r["entity_id"]: r["entity"] for r in vocab_rows}
    entity_to_id = {r["entity"]: r["entity_id"] for r in vocab_rows}
    pages_by_split: dict[str, set] = {}
    totals = defaultdict(int)
    for split in ("train", "validation"):
        rows = passages(out, split)
        for f in sorted((out / "passages").glob(f"{split}-*.parquet")):
            expected = PASSAGE_SCHEMA if text else PASSAGE_SCHEMA_NO_TEXT
            assert pq.read_schema(f).remove_metadata().equals(expected.remove_metadata()), f
        by_page: dict[int, list[dict]] = defaultdict(list)
        for r in rows:
            assert r["passage_id"] == f"{r['page_id']}:{r['window_index']}"
            assert 0 < len(r["token_ids"]) <= window, r["passage_id"]
            assert r["char_offset"] >= 0
            if text:  # the text is the tokens decoded, less a character the window's edge cuts
                decoded_window = tok.decode(r["token_ids"])
                assert decoded_window.replace("\ufffd", "") == r["text"] or (
                    "\ufffd" in decoded_window and r["text"] in decoded_window.strip("\ufffd")), r["passage_id"]
                for m in r["mentions"]:
                    assert r["text"][m["char_start"]:m["char_end"]] == m["surface"], (r["passage_id"], m)
                totals["text_chars"] += len(r["text"])
            by_page[r["page_id"]].append(r)
            for m in r["mentions"]:
                assert 0 <= m["token_start"] < m["token_end"] <= len(r["token_ids"]), (r["passage_id"], m)
                decoded = tok.decode(r["token_ids"][m["token_start"]:m["token_end"]])
                assert decoded.strip() == m["surface"].strip(), (r["passage_id"], decoded, m)
                if m["entity_id"] == 1:
                    assert m["entity"] not in entity_to_id, m
                else:
                    assert id_to_entity[m["entity_id"]] == m["entity"], m
                assert m["source"] in MENTION_SOURCES, m
                totals[f"mentions/{m['source']}"] += 1
        for page_id, windows in by_page.items():
            windows.sort(key=lambda r: r["window_index"])
            assert [w["window_index"] for w in windows] == list(range(len(windows))), page_id
            for a, b in zip(windows, windows[1:]):
                assert len(a["token_ids"]) == window, "only the last window may be shorter"
                assert a["token_ids"][-overlap:] == b["token_ids"][:overlap], (page_id, a["window_index"])
                assert a["char_offset"] < b["char_offset"], (page_id, a["window_index"])
                if text:  # overlapping windows: the next one starts inside this one's text, no gap
                    assert b["char_offset"] <= a["char_offset"] + len(a["text"]), (page_id, b["window_index"])
            assert windows[0]["char_offset"] == 0, page_id
        pages_by_split[split] = set(by_page)
        totals[f"passages/{split}"] = len(rows)
    assert not (pages_by_split["train"] & pages_by_split["validation"]), "a page in both splits"
    return dict(totals)


def check_vocab_contract(out: Path) -> list[dict]:
    rows = vocab(out)
    assert pq.read_schema(out / "entity_vocab" / "entity_vocab.parquet").remove_metadata().equals(
        ENTITY_VOCAB_SCHEMA.remove_metadata())
    assert [r["entity"] for r in rows[:3]] == ["[PAD]", "[UNK]", "[MASK]"]
    assert [r["entity_id"] for r in rows] == list(range(len(rows)))
    real = rows[3:]
    assert real == sorted(real, key=lambda r: (-r["count"], r["entity"])), "ids by count desc, then title"
    assert len({r["entity"] for r in real}) == len(real)
    return rows


def check_alias_contract(out: Path) -> list[dict]:
    rows = alias_rows(out)
    for f in sorted((out / "alias_table").glob("*.parquet")):
        assert pq.read_schema(f).remove_metadata().equals(ALIAS_SCHEMA.remove_metadata())
    by_alias: dict[str, float] = defaultdict(float)
    for r in rows:
        assert set(r["sources"]) <= {"anchor", "title", "redirect"} and r["sources"]
        assert ("anchor" in r["sources"]) == (r["count"] > 0), r
        by_alias[r["alias"]] += r["prior"]
    for alias, total in by_alias.items():
        assert total == 0.0 or abs(total - 1.0) < 1e-9, (alias, total)
    return rows


# ------------------------------------------------------------------ raw XML


@dataclass
class RawCounts:
    pages: int = 0
    main_namespace: int = 0
    redirects: int = 0
    disambiguation: int = 0
    titles: dict = field(default_factory=dict)  # ns0 title -> "redirect" | "article" | "disambiguation"
    redirect_to: dict = field(default_factory=dict)
    wikitext: dict = field(default_factory=dict)  # article title -> wikitext


def _open_text(path: str) -> str:
    if path.endswith(".bz2"):
        return bz2.open(path, "rt", encoding="utf-8").read()
    if path.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8").read()
    return Path(path).read_text(encoding="utf-8")


# The common English disambiguation templates, incl. the "<topic> disambiguation" family.
DISAMBIG = re.compile(r"\{\{\s*([\w ]+ )?(disambiguation|disambig|dab|hndis|geodis)\s*[|}]|__DISAMBIG__", re.I)


def raw_counts(path: str) -> RawCounts:
    """Counts straight from the XML with ElementTree (small files only)."""
    root = ET.fromstring(_open_text(path))
    counts = RawCounts()
    for page in root.iter():
        if not page.tag.endswith("}page") and page.tag != "page":
            continue
        get = lambda name: next((c for c in page if c.tag.split("}")[-1] == name), None)  # noqa: E731
        counts.pages += 1
        if get("ns").text != "0":
            continue
        counts.main_namespace += 1
        title = get("title").text
        redirect = get("redirect")
        revision = [c for c in page if c.tag.split("}")[-1] == "revision"][-1]
        text = next((c.text or "" for c in revision if c.tag.split("}")[-1] == "text"), "")
        if redirect is not None:
            counts.redirects += 1
            counts.titles[title] = "redirect"
            counts.redirect_to[title] = redirect.get("title")
        elif DISAMBIG.search(text):
            counts.disambiguation += 1
            counts.titles[title] = "disambiguation"
        else:
            counts.titles[title] = "article"
            counts.wikitext[title] = text
    return counts
