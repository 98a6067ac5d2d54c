"""Benchmark: our extract_article vs bare mwparserfromhell vs ``wikiextractor --links``.

Runs each contender N times (interleaved, so background load hits all alike)
on one dump and reports medians of articles/s and MB/s of article wikitext, per
core (everything single-process), and the ratio to each baseline.

* ``ours``: ``extract_article`` over every ns-0 non-redirect page (pages
  already in memory);
* ``ours_with_reading``: the same plus decompressing and parsing the XML,
  the work ``wikiextractor`` also does;
* ``mwparserfromhell``: ``mwparserfromhell.parse(text).strip_code()``;
* ``wikiextractor``: ``python -m wikiextractor.WikiExtractor --links
  --processes 1 -o TMP`` as a subprocess, wall time (and wall time minus its
  start-up, measured with ``--help``).

Usage: ``python benchmarks/bench_extract.py [--dump PATH] [--repeat 3] [--json OUT]``
"""
from __future__ import annotations

import argparse
import bz2
import json
import lzma
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

import mwparserfromhell

from pipelines.records import Namespace, SiteInfo
from pipelines.wikitext import ExtractionError, extract_article

DEFAULT_DUMP = (Path(__file__).resolve().parents[1] / ".." / "shared" / "wikidumps"
                / "enwiki-2016-206pages-articles1.xml.bz2").resolve()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def read_articles(path: Path) -> tuple[SiteInfo, list[tuple[str, str]]]:
    """(site, [(title, wikitext)]) of the ns-0 non-redirect pages; stops at a truncation."""
    opener = bz2.open if path.suffix == ".bz2" else lzma.open if path.suffix == ".xz" else open
    site = SiteInfo(from_dump=False)
    articles: list[tuple[str, str]] = []
    try:
        with opener(path, "rb") as handle:
            for _event, element in ET.iterparse(handle):
                tag = _local(element.tag)
                if tag == "siteinfo":
                    values = {_local(child.tag): child for child in element}
                    site = SiteInfo(
                        dbname=values["dbname"].text, case=values["case"].text,
                        namespaces=tuple(Namespace(int(ns.get("key")), ns.text or "",
                                                   ns.get("case", "first-letter"))
                                         for ns in values["namespaces"]))
                elif tag == "page":
                    fields = {_local(child.tag): child for child in element}
                    if fields["ns"].text == "0" and "redirect" not in fields:
                        text = next((node.text or "" for node in element.iter()
                                     if _local(node.tag) == "text"), "")
                        articles.append((fields["title"].text, text))
                    element.clear()
    except (ET.ParseError, EOFError, lzma.LZMAError):
        pass
    return site, articles


def _extract_all(site: SiteInfo, articles: list[tuple[str, str]]) -> None:
    for title, text in articles:
        try:
            extract_article(text, site, title=title)
        except ExtractionError:
            pass


def time_ours(site: SiteInfo, articles: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    _extract_all(site, articles)
    return time.perf_counter() - start


def time_ours_with_reading(path: Path) -> float:
    start = time.perf_counter()
    _extract_all(*read_articles(path))
    return time.perf_counter() - start


def time_mwparserfromhell(articles: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    for _title, text in articles:
        try:
            mwparserfromhell.parse(text).strip_code()
        except Exception:  # noqa: BLE001 - a baseline: its failures are not ours to handle
            pass
    return time.perf_counter() - start


def _wikiextractor_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "wikiextractor.WikiExtractor", *args]


def time_wikiextractor(path: Path) -> float:
    with tempfile.TemporaryDirectory() as out_dir:
        start = time.perf_counter()
        subprocess.run(_wikiextractor_command("--links", "--processes", "1", "-q",
                                              "-o", out_dir, str(path)),
                       check=True, capture_output=True, timeout=3600)
        return time.perf_counter() - start


def time_wikiextractor_startup() -> float:
    start = time.perf_counter()
    subprocess.run(_wikiextractor_command("--help"), check=True, capture_output=True, timeout=120)
    return time.perf_counter() - start


def wikiextractor_problem() -> str | None:
    """Why wikiextractor cannot run here, or None."""
    try:
        subprocess.run(_wikiextractor_command("--help"), check=True, capture_output=True,
                       timeout=120)
    except (subprocess.SubprocessError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, default=Path(os.environ.get("BENCH_DUMP", DEFAULT_DUMP)))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--skip-wikiextractor", action="store_true")
    args = parser.parse_args(argv)

    site, articles = read_articles(args.dump)
    if not articles:
        parser.error(f"no articles in {args.dump}")
    megabytes = sum(len(text.encode("utf-8")) for _title, text in articles) / 1e6
    contenders: dict[str, Callable[[], float]] = {
        "ours": lambda: time_ours(site, articles),
        "ours_with_reading": lambda: time_ours_with_reading(args.dump),
        "mwparserfromhell": lambda: time_mwparserfromhell(articles),
    }
    notes: dict[str, str] = {}
    problem = "skipped (--skip-wikiextractor)" if args.skip_wikiextractor else wikiextractor_problem()
    if problem is None:
        contenders["wikiextractor"] = lambda: time_wikiextractor(args.dump)
        contenders["wikiextractor_minus_startup"] = lambda: max(
            time_wikiextractor(args.dump) - time_wikiextractor_startup(), 1e-9)
    else:
        notes["wikiextractor"] = f"not run: {problem}"

    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, run in contenders.items():
            seconds[name].append(run())
    results = {}
    for name, samples in seconds.items():
        median = statistics.median(samples)
        results[name] = {"seconds_median": median, "seconds": samples,
                         "articles_per_s": len(articles) / median, "mb_per_s": megabytes / median}
    ratios = {f"ours/{name}": results["ours"]["articles_per_s"] / result["articles_per_s"]
              for name, result in results.items() if name != "ours"}
    if "wikiextractor" in results:
        ratios["ours_with_reading/wikiextractor"] = (
            results["ours_with_reading"]["articles_per_s"] / results["wikiextractor"]["articles_per_s"])

    print(f"dump: {args.dump}  articles: {len(articles)}  wikitext: {megabytes:.2f} MB  "
          f"repeats: {args.repeat} (medians, single process)")
    print(f"{'contender':<30}{'articles/s':>12}{'MB/s':>10}{'median s':>11}")
    for name, result in results.items():
        print(f"{name:<30}{result['articles_per_s']:>12.1f}{result['mb_per_s']:>10.2f}"
              f"{result['seconds_median']:>11.3f}")
    for name, ratio in ratios.items():
        print(f"ratio {name:<40}{ratio:>8.2f}x")
    for name, note in notes.items():
        print(f"{name}: {note}")
    if args.json:
        args.json.write_text(json.dumps({
            "dump": str(args.dump), "articles": len(articles), "megabytes": megabytes,
            "repeat": args.repeat, "results": results, "ratios": ratios, "notes": notes,
            "python": sys.version.split()[0], "mwparserfromhell": mwparserfromhell.__version__,
        }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
