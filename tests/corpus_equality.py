"""Row-for-row comparison of two corpus outputs (the two-pass job's and the shuffle job's).

Shard file names and counts may differ between the jobs; rows are read from every file of an output,
sorted by their unique key, and compared. Counters are compared except those that describe how the work
was done, not what was made (listed and justified in ``COUNTERS_THAT_DIFFER``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

PASSAGE_COLUMNS = ("passage_id", "page_id", "title", "window_index", "char_offset", "text", "token_ids", "mentions")

# Counter name prefixes whose values differ by design, and why.
COUNTERS_THAT_DIFFER = {
    # Elements and bytes through each job's shuffles, and the largest join groups: the two-pass job has
    # neither the joins nor WriteShards of passages; it has pass 1's run files (volume/tables/*) and pass
    # 2's per-unit step instead.
    "volume/": "each job's own shuffles and steps",
    "largest_group/": "each job's own joins (the two-pass job has no JoinPageParts nor LabelCandidates join)",
    # The lookup store's size: the shuffle job has no store.
    "lookup/": "the two-pass job's lookup store",
}


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


def differences(old: Path, new: Path) -> dict[str, str]:
    """What differs between the outputs ``old`` and ``new`` ({} when nothing does): one line per output."""
    found = {}

    def compare(name, a, b):
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            detail = f"{len(a)} vs {len(b)} rows"
            if first < min(len(a), len(b)):
                detail += f"; first difference at {first}: {str(a[first])[:400]} != {str(b[first])[:400]}"
            found[name] = detail

    compare("passages", passages(old), passages(new))
    compare("alias_table", sorted(rows(old, "alias_table"), key=lambda r: (r["alias"], r["entity"])),
            sorted(rows(new, "alias_table"), key=lambda r: (r["alias"], r["entity"])))
    compare("entity_vocab", rows(old, "entity_vocab"), rows(new, "entity_vocab"))

    def descriptions(out):
        return sorted(({k: v for k, v in r.items() if k != "_file_prefix"} for r in rows(out, "entity_descriptions")),
                      key=lambda r: r["entity_id"])

    compare("entity_descriptions", descriptions(old), descriptions(new))
    compare("dead_letters", rows(old, "dead_letters"), rows(new, "dead_letters"))
    a, b = counters(old), counters(new)
    if a != b:
        keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        found["counters"] = ", ".join(f"{k}: {a.get(k)} vs {b.get(k)}" for k in keys[:40])
    return found
