"""Row-for-row comparison of corpus outputs, and their digests (the committed oracle).

Shard file names and counts may differ between runs with other settings (run buffers, shard counts); rows
are read from every file of an output and put in a canonical order. Counters are compared except those that
describe how the work was done, not what was made (listed and justified in ``COUNTERS_THAT_DIFFER``).

``digests(out)`` is what tests/golden/corpus_rows.json holds per shared dump (made by
tests/golden/make_corpus_rows.py): per output, its row count and the sha256 of its rows in canonical order
(passages also per page, to name the pages that differ), and the counters.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

PASSAGE_COLUMNS = ("passage_id", "page_id", "title", "window_index", "char_offset", "text", "token_ids", "mentions")

# Counter name prefixes whose values describe how the work was done, not what was made.
COUNTERS_THAT_DIFFER = {
    # Elements and bytes through each step (pass 1's run files: volume/tables/*), and the largest groups:
    # they depend on the build of the job and on its buffers and shard counts.
    "volume/": "the job's own shuffles and steps",
    "largest_group/": "the job's own groups",
    # The lookup store's size: it depends on --lookup_shards.
    "lookup/": "the lookup store's layout",
}

OUTPUTS = ("passages", "alias_table", "entity_vocab", "entity_descriptions", "dead_letters")


def rows(out: Path, folder: str, columns=None) -> list[dict]:
    found = []
    for path in sorted((out / folder).glob("*.parquet")):
        table = pq.read_table(path, columns=list(columns) if columns else None)
        prefix = path.name.split("-", 1)[0]
        for row in table.to_pylist():
            row["_file_prefix"] = prefix  # passages: the split
            found.append(row)
    return found


def passages(out: Path) -> list[dict]:
    present = pq.read_schema(next((out / "passages").glob("*.parquet"))).names
    return sorted(rows(out, "passages", [c for c in PASSAGE_COLUMNS if c in present]),
                  key=lambda r: (r["page_id"], r["window_index"]))


def counters(out: Path) -> dict:
    doc = json.loads((out / "stats.json").read_text())
    return {k: v for k, v in doc["counters"].items() if not k.startswith(tuple(COUNTERS_THAT_DIFFER))}


def canonical(row: dict) -> str:
    """One row as text that is the same for equal rows (keys sorted; bytes as hex)."""
    return json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=lambda v: v.hex() if isinstance(v, bytes) else repr(v))


def outputs(out: Path) -> dict[str, list[dict]]:
    """Each output's rows in canonical order (passages with their split as ``_file_prefix``)."""
    def without_prefix(found):
        return [{k: v for k, v in r.items() if k != "_file_prefix"} for r in found]

    def dead_letter(row):  # the dump's file name, not where the dumps are (WIKIDUMPS_DIR)
        return {**row, "source": row["source"] and row["source"].replace("\\", "/").rsplit("/", 1)[-1]}

    return {
        "passages": passages(out),
        "alias_table": sorted(without_prefix(rows(out, "alias_table")), key=lambda r: (r["alias"], r["entity"], canonical(r))),
        "entity_vocab": without_prefix(rows(out, "entity_vocab")),  # in id order, as written
        "entity_descriptions": sorted(without_prefix(rows(out, "entity_descriptions")), key=lambda r: r["entity_id"]),
        "dead_letters": sorted(map(dead_letter, without_prefix(rows(out, "dead_letters"))), key=canonical),
    }


def _sha256(lines) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def digests(out: Path) -> dict:
    """Per output, its row count and sha256; per page, a short digest of its passages; the counters."""
    found = {}
    for name, output_rows in outputs(out).items():
        found[name] = {"rows": len(output_rows), "sha256": _sha256(canonical(r) for r in output_rows)}
    by_page: dict[int, list[str]] = {}
    for row in passages(out):
        by_page.setdefault(row["page_id"], []).append(canonical(row))
    found["passages"]["by_page"] = {str(page): _sha256(lines)[:16] for page, lines in sorted(by_page.items())}
    found["counters"] = dict(sorted(counters(out).items()))
    return found


def digest_differences(expected: dict, out: Path) -> dict[str, str]:
    """What differs between the digests ``expected`` and the output ``out`` ({} when nothing does)."""
    actual = digests(out)
    found = {}
    for name in OUTPUTS:
        want, got = expected[name], actual[name]
        if (want["rows"], want["sha256"]) == (got["rows"], got["sha256"]):
            continue
        detail = f"{want['rows']} rows expected, {got['rows']} made"
        if name == "passages":
            pages = sorted(set(want["by_page"]) | set(got["by_page"]), key=int)
            differ = [p for p in pages if want["by_page"].get(p) != got["by_page"].get(p)]
            detail += f"; pages that differ: {', '.join(differ[:20])}"
            if differ:
                first = [r for r in passages(out) if str(r["page_id"]) == differ[0]]
                detail += f"; page {differ[0]} now: {canonical(first[0])[:600] if first else '(no passages)'}"
        found[name] = detail
    want, got = expected["counters"], actual["counters"]
    if want != got:
        keys = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        found["counters"] = ", ".join(f"{k}: {want.get(k)} expected, {got.get(k)} made" for k in keys[:40])
    return found


def differences(old: Path, new: Path) -> dict[str, str]:
    """What differs between the outputs ``old`` and ``new`` ({} when nothing does): one line per output."""
    found = {}
    a_outputs, b_outputs = outputs(old), outputs(new)
    for name in OUTPUTS:
        a, b = a_outputs[name], b_outputs[name]
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            detail = f"{len(a)} vs {len(b)} rows"
            if first < min(len(a), len(b)):
                detail += f"; first difference at {first}: {str(a[first])[:400]} != {str(b[first])[:400]}"
            found[name] = detail
    a, b = counters(old), counters(new)
    if a != b:
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        found["counters"] = ", ".join(f"{k}: {a.get(k)} vs {b.get(k)}" for k in keys[:40])
    return found
