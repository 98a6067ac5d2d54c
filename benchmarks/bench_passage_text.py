"""What the passages' ``text`` column costs on disk, and one passage shown before and after.

    python benchmarks/bench_passage_text.py                       # both default dumps
    python benchmarks/bench_passage_text.py --dumps NAME ... --example 12:3

Runs the corpus job (DirectRunner, one shard per split) on each dump twice,
``--passage_text true`` and ``false``, and reports the passages' Parquet bytes
(zstd, as the job writes them) of both and their ratio. The job's files are
byte-identical from run to run, so one run of each is the measurement (the
wall time is not measured here: see bench_scale.py). ``--example`` prints a
passage of the first dump as schema version 1 held it (token ids, article
offsets) and as version 2 holds it (its text, mentions marked in it), in
Markdown, for the README.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WIKIDUMPS = (REPO / ".." / "shared" / "wikidumps").resolve()
DEFAULT_DUMPS = ("enwiki-2016-206pages-articles1.xml.bz2", "ukwiki-2023-first100k-lines-truncated.xml.xz")


def run_job(dump: Path, out: Path, passage_text: bool) -> dict:
    cmd = [sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", str(out),
           "--keep_red_links", "true", "--passage_text", str(passage_text).lower()]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True)
    return json.loads((out / "manifest.json").read_text())


def passage_bytes(manifest: dict) -> tuple[int, int]:
    files = [f for f in manifest["files"] if f["kind"] == "passages"]
    return sum(f["bytes"] for f in files), sum(f["rows"] for f in files)


def show_example(out: Path, passage_id: str) -> str:
    import pyarrow.parquet as pq

    row = next(r for f in sorted((out / "passages").glob("*.parquet"))
               for r in pq.read_table(f).to_pylist() if r["passage_id"] == passage_id)
    ids = row["token_ids"]
    before = [
        "Before (schema version 1): token ids only; the text needs the saved tokenizer, offsets index the article",
        "",
        "```",
        f"passage_id   {row['passage_id']}    title {row['title']!r}    window_index {row['window_index']}",
        f"token_ids    [{', '.join(map(str, ids[:12]))}, … ({len(ids)} ids)]",
        "mentions",
    ]
    for m in row["mentions"]:
        start = row["char_offset"] + m["char_start"]
        before.append(f"  tokens {m['token_start']:>3}-{m['token_end']:<3} article chars {start}-{start + len(m['surface'])}"
                      f"  {m['surface']!r} -> {m['entity']} ({m['source']})")
    before.append("```")
    text, marked, pos = row["text"], [], 0
    for m in row["mentions"]:
        marked += [text[pos:m["char_start"]], "[", text[m["char_start"]:m["char_end"]], "]"]
        pos = m["char_end"]
    marked.append(text[pos:])
    after = [
        "",
        "After (schema version 2): the same row, with `char_offset` and `text`; here each mention is shown"
        " `[bracketed]` in the text (`text[char_start:char_end]`)",
        "",
        "```",
        f"passage_id   {row['passage_id']}    char_offset {row['char_offset']}",
        "text         " + "".join(marked).replace("\n", "\\n"),
        "mentions",
    ]
    for m in row["mentions"]:
        after.append(f"  text[{m['char_start']}:{m['char_end']}] = {text[m['char_start']:m['char_end']]!r}"
                     f" -> {m['entity']} ({m['source']}, tokens {m['token_start']}-{m['token_end']})")
    after.append("```")
    return "\n".join(before + after)


def chunk_seconds(name: str, repeats: int) -> list[tuple[float, float, float]]:
    """Seconds over a dump's articles, per repeat: tokenise and cut windows without and with the
    token bounds (as before passage text, and as now), then the job's whole ChunkWindowsFn with
    --passage_text false and true. Interleaved in each repeat, so the machine's load hits all.
    """
    import time

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_extract import read_articles

    from pipelines.corpus.tokenizer import load_encoder, tokenize_with_mentions
    from pipelines.corpus.windows import cut_windows
    from pipelines.records import LabeledArticle, Mention
    from pipelines.transforms.passages import ChunkWindowsFn, PassageOptions
    from pipelines.wikitext import ExtractionError, extract_article

    site, pages = read_articles(WIKIDUMPS / name)
    articles = []
    for page_id, (title, wikitext) in enumerate(pages, start=1):
        try:
            ex = extract_article(wikitext, site, title=title)
        except ExtractionError:
            continue
        articles.append(LabeledArticle(page_id, title, ex.text, [
            Mention(l.start, l.end, l.surface, l.target, "hyperlink") for l in ex.links]))
    encoder = load_encoder()
    fns = {}
    for text in (False, True):
        fns[text] = ChunkWindowsFn(PassageOptions("gpt2-bpe", 128, 10, 0.0, "", passage_text=text))
        fns[text].setup()

    def plain(with_bounds):
        for a in articles:
            t = tokenize_with_mentions(a.text, a.mentions, encoder, with_bounds=with_bounds)
            cut_windows(t.token_ids, t.spans, window=128, overlap=10)

    def job_fn(text):
        for a in articles:
            for _ in fns[text].process(a, {}):
                pass

    out = []
    for _ in range(repeats):
        times = []
        for run in (lambda: plain(False), lambda: plain(True), lambda: job_fn(False), lambda: job_fn(True)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        out.append(tuple(times))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs="+", default=list(DEFAULT_DUMPS), help="file names in ../shared/wikidumps")
    parser.add_argument("--example", default="", help="a passage id of the first dump to print before/after")
    parser.add_argument("--cpu", type=int, default=0, metavar="REPEATS",
                        help="instead: CPU time of the token bounds and text, REPEATS interleaved runs, medians")
    args = parser.parse_args(argv)
    if args.cpu:
        import statistics

        print(f"{'dump':<48}{'no bounds s':>12}{'bounds s':>10}{'ratio':>7}{'fn, no text s':>15}{'fn, text s':>12}{'ratio':>7}")
        for name in args.dumps:
            runs = chunk_seconds(name, args.cpu)
            base, bounds, bare, full = (statistics.median(r[i] for r in runs) for i in range(4))
            print(f"{name:<48}{base:>12.3f}{bounds:>10.3f}{bounds / base:>7.2f}{bare:>15.3f}{full:>12.3f}{full / bare:>7.2f}")
        return 0
    print(f"{'dump':<48}{'passages':>10}{'bytes, text':>14}{'bytes, no text':>16}{'ratio':>8}{'text B/passage':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(args.dumps):
            sizes = {}
            for text in (True, False):
                out = Path(tmp) / f"{i}-{text}"
                sizes[text] = passage_bytes(run_job(WIKIDUMPS / name, out, text))
            (with_text, rows), (without, _) = sizes[True], sizes[False]
            print(f"{name:<48}{rows:>10,}{with_text:>14,}{without:>16,}{with_text / without:>8.2f}"
                  f"{(with_text - without) / max(1, rows):>16.0f}", flush=True)
            if i == 0 and args.example:
                example = show_example(Path(tmp) / "0-True", args.example)
        if args.example:
            print()
            print(example)
    return 0


if __name__ == "__main__":
    sys.exit(main())
