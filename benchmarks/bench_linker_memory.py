"""A linking worker's memory: the whole alias table and catalogue as Python objects (before) vs the
prepared, memory-mapped alias candidate index and KB (now), at several alias-table sizes.

    python benchmarks/bench_linker_memory.py                       # 250k and 2M alias rows, 3 repeats
    python benchmarks/bench_linker_memory.py --rows 250000,1000000,4000000 --json benchmarks/results/linker_memory.json

Synthetic corpus tables shaped like Wikipedia's (a Zipf distribution of aliases per entity: hubs
with thousands of anchor texts, most entities with a few; one description per entity) are written
as Parquet. Each measurement runs in a fresh process and reports the growth of its resident memory
(VmRSS, after the imports) once its tables are ready and 20,000 surface forms were looked up, split
into private memory (RssAnon: the worker's own) and mapped file pages (RssFile: the page cache,
shared by every process on the machine and dropped under memory pressure):

* ``worker_before``: what every worker did before (``read_alias_index`` + ``read_catalogue``);
* ``launcher_build``: building the candidate index and the KB once (peak RSS, VmHWM), on the launcher;
* ``worker_now``: a worker opening them (``MappedAliasIndex`` + ``open_kb``), as AddBlinkLabels does.

``found``: looked-up surfaces with candidates (drawn in proportion to their link counts, as mentions
in text are); for the build, the share of hyperlinks the index keeps with its top-64 aliases per
entity (hub entities lose their rarest anchor texts).

The ratio between the largest and the smallest size shows which one grows with the alias table.
Medians of ``--repeats`` runs; the machine is shared, so memory (not time) is the measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LOOKUPS = 20_000


def make_corpus(folder: Path, rows: int, seed: int = 0) -> dict:
    """alias_table/ and entity_vocab/ and entity_descriptions/ with ``rows`` (alias, entity) rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from schemas import ALIAS_SCHEMA, ENTITY_DESCRIPTION_SCHEMA, ENTITY_VOCAB_SCHEMA

    rng = np.random.default_rng(seed)
    per_entity = np.minimum(rng.zipf(2.2, size=rows), 5000)  # aliases per entity: ~4 on average (enwiki: ~3), hubs thousands
    entities = int(np.searchsorted(np.cumsum(per_entity), rows)) + 1
    owner = np.repeat(np.arange(entities), per_entity[:entities])[:rows]
    rng.shuffle(owner)
    alias_ids = rng.integers(0, rows, size=rows)  # some aliases are shared (ambiguous)
    titles = [f"Entity {i}" for i in range(entities)]
    alias = pa.array([f"alias {a} w{a % 97}" for a in alias_ids.tolist()])
    sources = pa.array([["anchor"]] * rows, type=pa.list_(pa.string()))
    counts = np.minimum(rng.zipf(2.0, size=rows), 100_000)  # most anchors are used once, a few very often
    table = pa.table({"alias": alias, "entity": pa.array([titles[o] for o in owner.tolist()]),
                      "count": pa.array(counts), "prior": pa.array(np.zeros(rows)),
                      "sources": sources}, schema=ALIAS_SCHEMA)
    for name in ("alias_table", "entity_vocab", "entity_descriptions"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "alias_table" / "part-0.parquet")
    ids = np.arange(3, entities + 3, dtype=np.int32)
    vocab = pa.table({"entity_id": ids, "entity": titles, "count": pa.array(np.ones(entities, dtype=np.int64))},
                     schema=ENTITY_VOCAB_SCHEMA)
    pq.write_table(vocab, folder / "entity_vocab" / "part-0.parquet")
    words = np.array(["river", "town", "guild", "north", "valley", "founded", "the", "of", "in", "is"])
    desc = [" ".join(words[rng.integers(0, len(words), 40)]) for _ in range(entities)]
    pq.write_table(pa.table({"entity_id": ids, "entity": titles, "description": desc}, schema=ENTITY_DESCRIPTION_SCHEMA),
                   folder / "entity_descriptions" / "part-0.parquet")
    (folder / "manifest.json").write_text(json.dumps({"rows": rows}))
    # the surface forms a worker looks up: drawn like mentions in text, in proportion to their link counts
    picks = rng.choice(rows, size=LOOKUPS, p=counts / counts.sum())
    (folder / "lookups.json").write_text(json.dumps(alias.take(pa.array(picks)).to_pylist()))
    return {"alias_rows": rows, "entities": entities}


CHILD = r"""
import json, os, random, sys, time
sys.path.insert(0, {repo!r})
import numpy as np, pyarrow, pyarrow.parquet
from linker.catalogue import alias_key, read_alias_index, read_catalogue
from linker.alias_index import AliasIndexSettings, MappedAliasIndex, build_alias_index
from linker.kb import build_corpus_kb, open_kb

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
mode, corpus, folder = sys.argv[1:4]
base, base_anon, base_file = status("VmRSS"), status("RssAnon"), status("RssFile")
started = time.perf_counter()
surfaces = json.load(open(corpus + "/lookups.json"))
if mode == "worker_before":
    catalogue = read_catalogue(corpus)
    aliases = read_alias_index(corpus, catalogue.id_of_title())
    found = sum(bool(aliases.lookup(s)) for s in surfaces)
elif mode == "launcher_build":
    report = build_alias_index(corpus, folder + "/aliases", AliasIndexSettings(top_k=64))
    build_corpus_kb(corpus, folder + "/kb", "fp")
    found = report["hyperlinks_covered"]
else:
    aliases = MappedAliasIndex(folder + "/aliases")
    kb = open_kb(folder + "/kb")
    found = 0
    for s in surfaces:
        cands = aliases.lookup(s)
        found += bool(cands)
        for c in cands[:3]:
            kb.title(kb.row_of_entity_id(c.entity_id)); kb.text(kb.row_of_entity_id(c.entity_id))
seconds = time.perf_counter() - started
print(json.dumps({{"rss_growth_mb": status("VmRSS") - base, "peak_growth_mb": status("VmHWM") - base,
                  "anon_growth_mb": status("RssAnon") - base_anon, "file_backed_growth_mb": status("RssFile") - base_file,
                  "seconds": seconds, "found": found}}))
"""


def measure(mode: str, corpus: Path, folder: Path, rows: int) -> dict:
    code = CHILD.format(repo=str(REPO), lookups=LOOKUPS)
    proc = subprocess.run([sys.executable, "-c", code, mode, str(corpus), str(folder), str(rows)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="250000,2000000", help="alias-table sizes (rows), comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default="", help="write the results to this file")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",")]
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "load_average_at_start": os.getloadavg()[0]},
               "lookups_per_run": LOOKUPS, "repeats": args.repeats, "sizes": []}
    with tempfile.TemporaryDirectory(prefix="bench_linker_memory-") as tmp:
        for rows in sizes:
            corpus, folder = Path(tmp) / f"corpus-{rows}", Path(tmp) / f"prepared-{rows}"
            row = make_corpus(corpus, rows)
            runs = {mode: [] for mode in ("worker_before", "launcher_build", "worker_now")}
            for _ in range(args.repeats):
                for mode in runs:  # side by side in each repeat
                    runs[mode].append(measure(mode, corpus, folder, rows))
            for mode, values in runs.items():
                row[mode] = {key: statistics.median(v[key] for v in values)
                             for key in ("rss_growth_mb", "peak_growth_mb", "anon_growth_mb", "file_backed_growth_mb",
                                         "seconds")}
                row[mode]["found"] = values[0]["found"]
            row["hyperlinks_covered_by_top_64"] = row["launcher_build"]["found"]
            results["sizes"].append(row)
            print(json.dumps(row), file=sys.stderr)
    small, large = results["sizes"][0], results["sizes"][-1]
    results["growth_largest_vs_smallest"] = {
        "alias_rows": large["alias_rows"] / small["alias_rows"],
        **{f"{mode}_{key}": large[mode][key] / max(small[mode][key], 1e-3)
           for mode in ("worker_before", "worker_now") for key in ("rss_growth_mb", "anon_growth_mb")},
    }
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
