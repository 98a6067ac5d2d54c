"""Benchmark: ``extract_article`` replayed over the pages of dumps, two checkouts compared.

The corpus job's extraction cost per page, without the dump reading and Beam around
it: the pages are read once (by the job's reader) into a pickle, then each checkout
(``--old`` and ``--new``, each imported in its own process through ``PYTHONPATH``)
extracts every article of it ``--passes`` times after one warm-up pass (the
caches of link targets, entities and tags warm, as on a worker deep into a dump),
interleaved ``--repeat`` times; the report gives each side's median CPU seconds
per pass and their ratio. ``--check`` also asserts that both sides give the same
result (text, links, counts, template names, parser, or the same error) for every
page with text of every dump, in every namespace, and the same
``disambiguation.template_names``.

Run timed comparisons under ``flock /work/bench.lock`` (shared machine).

Usage::

    python benchmarks/bench_extract_replay.py --old /path/to/old --new . \\
        [--dump D ...] [--time-dump D] [--passes 3] [--repeat 5] [--check] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DUMPS = (REPO / ".." / "shared" / "wikidumps").resolve()
DEFAULT_TIME_DUMP = "enwiki-2016-206pages-articles1.xml.bz2"


def collect(dumps: list[Path], out: Path) -> None:
    """Pickle {dump name: (site, [(title, text, is_article)])}, read by the job's reader."""
    from pipelines.corpus.page_kinds import ARTICLE, classify_page
    from pipelines.dump import iter_pages
    from pipelines.dump.siteinfo import read_siteinfo
    from pipelines.records import RawPage
    from pipelines.wikitext.disambiguation import DisambiguationConfig

    result = {}
    for path in dumps:
        site = read_siteinfo(str(path))
        pages = []
        for page in iter_pages(str(path), 0, None):
            if not isinstance(page, RawPage) or not page.text:
                continue
            kind = classify_page(page, site, DisambiguationConfig(), 8_000_000)
            pages.append((kind.title or page.title, page.text, kind.kind == ARTICLE))
        result[path.name] = (site, pages)
    out.write_bytes(pickle.dumps(result))


def outputs(pages_file: Path, out: Path) -> None:
    """Pickle every page's extraction (or error) and template names, in this checkout."""
    from pipelines.wikitext import ExtractionError, extract_article
    from pipelines.wikitext.disambiguation import template_names

    result = {}
    for name, (site, pages) in pickle.loads(pages_file.read_bytes()).items():
        for index, (title, text, _is_article) in enumerate(pages):
            try:
                got = extract_article(text, site, title=title)
                value = (got.text, [tuple((link.start, link.end, link.surface, link.target))
                                    for link in got.links],
                         got.counts, got.template_names, got.parser)
            except ExtractionError as err:
                value = ("error", err.reason, str(err))
            result[name, index] = (value, template_names(text, site))
    out.write_bytes(pickle.dumps(result))


def timed(pages_file: Path, dump: str, passes: int) -> None:
    """Print CPU seconds of each pass of extract_article over the dump's articles."""
    from pipelines.wikitext import ExtractionError, extract_article

    site, pages = pickle.loads(pages_file.read_bytes())[dump]
    articles = [(title, text) for title, text, is_article in pages if is_article]

    def one_pass() -> float:
        start = time.process_time()
        for title, text in articles:
            try:
                extract_article(text, site, title=title)
            except ExtractionError:
                pass
        return time.process_time() - start

    one_pass()  # warm-up: caches, imports
    print(json.dumps({"articles": len(articles), "passes": [one_pass() for _ in range(passes)]}))


def _run(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, cwd=tree, check=True,
                          capture_output=True, text=True)
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=False)
    parser.add_argument("--new", type=Path, default=REPO)
    parser.add_argument("--dump", type=Path, action="append",
                        help="dumps to read (default: every dump in ../shared/wikidumps)")
    parser.add_argument("--time-dump", default=DEFAULT_TIME_DUMP)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--_mode", choices=("collect", "outputs", "timed"), help=argparse.SUPPRESS)
    parser.add_argument("--_pages", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--_out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._mode == "collect":
        collect(args.dump, args._out)
        return 0
    if args._mode == "outputs":
        outputs(args._pages, args._out)
        return 0
    if args._mode == "timed":
        timed(args._pages, args.time_dump, args.passes)
        return 0

    dumps = args.dump or sorted(path for path in DUMPS.iterdir()
                                if ".xml" in path.name and "index" not in path.name)
    with tempfile.TemporaryDirectory() as tmp:
        pages = Path(tmp) / "pages.pkl"
        _run(args.new, "--_mode", "collect", "--_out", str(pages),
             *(arg for path in dumps for arg in ("--dump", str(path))))
        report: dict = {"dumps": [path.name for path in dumps]}
        if args.check and args.old:
            for side in ("old", "new"):
                _run(getattr(args, side), "--_mode", "outputs", "--_pages", str(pages),
                     "--_out", str(Path(tmp) / f"{side}.pkl"))
            old = pickle.loads((Path(tmp) / "old.pkl").read_bytes())
            new = pickle.loads((Path(tmp) / "new.pkl").read_bytes())
            assert old.keys() == new.keys()
            differing = [key for key in old if old[key] != new[key]]
            report["checked_pages"] = len(old)
            report["differing_pages"] = [f"{name}#{index}" for name, index in differing]
            print(f"checked {len(old)} pages, {len(differing)} differ", file=sys.stderr)
        if args.repeat and args.time_dump in {path.name for path in dumps}:
            sides = {"new": args.new, **({"old": args.old} if args.old else {})}
            seconds: dict[str, list[float]] = {side: [] for side in sides}
            for _ in range(args.repeat):
                for side, tree in sides.items():
                    got = json.loads(_run(tree, "--_mode", "timed", "--_pages", str(pages),
                                          "--time-dump", args.time_dump,
                                          "--passes", str(args.passes)))
                    seconds[side].append(statistics.median(got["passes"]))
                    report["articles"] = got["articles"]
            report["time_dump"] = args.time_dump
            report["median_s_per_pass"] = {side: statistics.median(v) for side, v in seconds.items()}
            report["runs_s_per_pass"] = seconds
            if args.old:
                report["new_over_old"] = (report["median_s_per_pass"]["new"]
                                          / report["median_s_per_pass"]["old"])
        text = json.dumps(report, indent=1)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
    return 1 if report.get("differing_pages") else 0


if __name__ == "__main__":
    sys.exit(main())
