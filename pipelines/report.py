"""Label-coverage report of a finished corpus run, as a picture.

    wikiedm report --corpus OUT [--output OUT/label_coverage.png]
    python -m pipelines.report ...      (the same command line)

Three panels: mentions by source (hyperlinks vs the two heuristic labels),
the share of passage tokens covered by mentions, per source, and the links
that were dropped, by reason. Reads only stats.json, manifest.json and the
passage shards (streamed by row group).
"""
from __future__ import annotations

import json
import sys
from collections import Counter

import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from schemas.corpus import MENTION_SOURCES
from wikiedm import storage
from wikiedm.config import ConfigError, command_error

SOURCES = MENTION_SOURCES


def coverage(output: str) -> dict:
    """Tokens, and tokens inside mentions per source, over all passage shards."""
    manifest = json.loads(storage.read_bytes(storage.join(output, storage.MANIFEST)))
    tokens = 0
    covered: Counter = Counter()
    per_passage: Counter = Counter()  # mentions per passage -> passages
    for entry in manifest["files"]:
        if entry["kind"] != "passages":
            continue
        with FileSystems.open(storage.join(output, entry["path"])) as fh:
            parquet = pq.ParquetFile(fh)
            for batch in parquet.iter_batches(columns=["token_ids", "mentions"]):
                for ids, mentions in zip(batch.column("token_ids").to_pylist(), batch.column("mentions").to_pylist()):
                    tokens += len(ids)
                    per_passage[min(len(mentions), 30)] += 1
                    for m in mentions:
                        covered[m["source"]] += m["token_end"] - m["token_start"]
    return {"tokens": tokens, "covered": dict(covered), "mentions_per_passage": dict(sorted(per_passage.items()))}


def plot(output: str, png: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counters = json.loads(storage.read_bytes(storage.join(output, storage.STATS_FILE)))["counters"]
    cov = coverage(output)
    sources = [s for s in SOURCES if counters.get(f"mentions/{s}")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    values = [counters[f"mentions/{s}"] for s in sources]
    ax.bar(sources, values, color=["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"][: len(sources)])
    ax.set_title("Mentions by source (articles)")
    for i, v in enumerate(values):
        ax.annotate(f"{v:,}", (i, v), ha="center", va="bottom", fontsize=8)
    hyper = counters.get("mentions/hyperlink", 0)
    if hyper:
        ax.set_xlabel(f"all / hyperlinks = x{sum(values) / hyper:.2f}  (EDMem, full enwiki: x1.88)")
    ax = axes[1]
    shares = [100.0 * cov["covered"].get(s, 0) / max(cov["tokens"], 1) for s in sources]
    ax.bar(sources, shares, color="#7f7f7f")
    ax.set_ylabel("% of passage tokens inside mentions")
    ax.set_title(f"Token coverage ({cov['tokens']:,} tokens)")
    ax = axes[2]
    dropped = sorted(((k.split("/", 1)[1], v) for k, v in counters.items() if k.startswith("links_dropped/")),
                     key=lambda kv: -kv[1])[:12]
    if dropped:
        ax.barh([k for k, _ in dropped][::-1], [v for _, v in dropped][::-1], color="#d62728")
        if dropped[0][1] > 50 * max(dropped[-1][1], 1):
            ax.set_xscale("log")
    ax.set_title(f"Links dropped by reason (kept: {counters.get('links/kept', 0):,})")
    fig.tight_layout()
    with FileSystems.create(png) as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import report_parser

    try:
        args, _, _ = report_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm report", str(exc))
    png = args.output or storage.join(args.corpus, "label_coverage.png")
    print(plot(args.corpus, png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
