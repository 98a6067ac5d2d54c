"""Benchmark: the extraction stage vs ``wikiextractor --links``, marginal CPU per page.

What a user pays per page on a big dump, start-up costs cancelled: the dump
(default: the shared 206-page enwiki excerpt) is replicated x2 and x8 with new
page ids and titles (``bench_extract_replicate.py``), each contender runs on
both in its own process, and

    marginal CPU per page = (CPU(x8) - CPU(x2)) / (pages(x8) - pages(x2)),

CPU being user + system seconds of the process (so a contender using more
cores is not flattered). Contenders, interleaved ``--repeat`` times (medians):

* ``extraction``: read the dump with the job's reader (bz2, page splitting,
  XML) and ``extract_article`` every ns-0 non-redirect page, as
  ``time_ours_with_reading`` does (also used by ``bench_pipeline.py``);
* ``wikiextractor``: ``python -m wikiextractor.WikiExtractor --links
  --processes 1`` (it reads, cleans and writes every article).

Then an in-process breakdown of the extraction on the x1 dump: reading,
pre-pass (templates, refs, tables), parse + render + tidy.

Usage: ``python benchmarks/bench_extract.py [--dump PATH] [--repeat 3] [--json OUT]``
"""
from __future__ import annotations

import argparse
import bz2
import json
import lzma
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import mwparserfromhell  # noqa: E402
from bench_extract_replicate import replicated_dump  # noqa: E402

from pipelines.records import Namespace, SiteInfo  # noqa: E402
from pipelines.wikitext import ExtractionError, extract_article, prepass  # noqa: E402

DEFAULT_DUMP = (REPO / ".." / "shared" / "wikidumps" / "enwiki-2016-206pages-articles1.xml.bz2").resolve()


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


def iter_articles_as_the_job_reads(path: Path):
    """(site, iterator of (title, wikitext)) of the ns-0 non-redirect pages, read by the
    job's own dump reader (``pipelines.dump``), as the extraction stage of the job sees them."""
    from pipelines.dump import iter_pages
    from pipelines.dump.siteinfo import read_siteinfo
    from pipelines.records import RawPage
    from pipelines.wikitext import redirect_target

    site = read_siteinfo(str(path))

    def pages():
        for page in iter_pages(str(path), 0, None):
            if isinstance(page, RawPage) and page.ns == 0 and page.redirect is None \
                    and page.text and redirect_target(page.text, site) is None:
                yield page.title, page.text
    return site, pages()


def time_ours_with_reading(path: Path) -> float:
    """Wall seconds to read ``path`` with the job's reader and extract every article."""
    start = time.perf_counter()
    site, pages = iter_articles_as_the_job_reads(path)
    for title, text in pages:
        try:
            extract_article(text, site, title=title)
        except ExtractionError:
            pass
    return time.perf_counter() - start


def _wikiextractor_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "wikiextractor.WikiExtractor", *args]


def wikiextractor_problem() -> str | None:
    """Why wikiextractor cannot run here, or None."""
    try:
        subprocess.run(_wikiextractor_command("--help"), check=True, capture_output=True,
                       timeout=120)
    except (subprocess.SubprocessError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def cpu_seconds(cmd: list[str]) -> float:
    """User + system CPU seconds of running ``cmd`` (and its children) to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def extraction_command(path: Path) -> list[str]:
    code = (f"import sys, pathlib; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import bench_extract; "
            f"bench_extract.time_ours_with_reading(pathlib.Path({str(path)!r}))")
    return [sys.executable, "-c", code]


def wikiextractor_command(path: Path, out_dir: str) -> list[str]:
    return _wikiextractor_command("--links", "--processes", "1", "-q", "-o", out_dir, str(path))


def stage_breakdown(path: Path) -> dict[str, float]:
    """CPU seconds of each extraction stage, in this process, on ``path``."""
    from pipelines.wikitext.templates import registry_for

    start = time.process_time()
    site, pages = iter_articles_as_the_job_reads(path)
    articles = list(pages)
    read = time.process_time() - start
    registry = registry_for(site)
    start = time.process_time()
    for title, text in articles:
        try:
            prepass(text, registry=registry, title=title)
        except ExtractionError:
            pass
    prepass_s = time.process_time() - start
    start = time.process_time()
    _extract_all(site, articles)
    extract_s = time.process_time() - start
    fast = sum(1 for title, text in articles if _parser_of(text, site, title) == "fast")
    return {"read_dump": read, "prepass": prepass_s, "render_tidy": max(extract_s - prepass_s, 0.0),
            "extract_total": extract_s, "articles": len(articles), "fast_path_articles": fast}


def _parser_of(text: str, site: SiteInfo, title: str) -> str:
    try:
        return extract_article(text, site, title=title).parser
    except ExtractionError:
        return "error"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, default=Path(os.environ.get("BENCH_DUMP", DEFAULT_DUMP)))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="2,8", help="two replication factors, small,large")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--skip-wikiextractor", action="store_true")
    args = parser.parse_args(argv)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]}
    small, large = (int(x) for x in args.sizes.split(","))

    dumps = {n: replicated_dump(args.dump, n) for n in (small, large)}
    contenders = {"extraction": lambda path: cpu_seconds(extraction_command(path))}
    notes: dict[str, str] = {}
    problem = "skipped (--skip-wikiextractor)" if args.skip_wikiextractor else wikiextractor_problem()
    if problem is None:
        def run_wikiextractor(path: Path) -> float:
            with tempfile.TemporaryDirectory() as out_dir:
                return cpu_seconds(wikiextractor_command(path, out_dir))
        contenders["wikiextractor"] = run_wikiextractor
    else:
        notes["wikiextractor"] = f"not run: {problem}"

    cpu: dict[tuple[str, int], list[float]] = {(name, n): [] for name in contenders for n in dumps}
    for round_index in range(args.repeat):
        for n, (path, _pages) in dumps.items():
            for name, run in contenders.items():
                cpu[(name, n)].append(run(path))
        print(f"round {round_index + 1}/{args.repeat} done", file=sys.stderr, flush=True)
    pages = {n: count for n, (_path, count) in dumps.items()}
    results: dict[str, dict] = {}
    for name in contenders:
        medians = {n: statistics.median(cpu[(name, n)]) for n in dumps}
        marginal = (medians[large] - medians[small]) / (pages[large] - pages[small])
        results[name] = {
            "cpu_s": {f"x{n}": cpu[(name, n)] for n in dumps},
            "cpu_s_median": {f"x{n}": medians[n] for n in dumps},
            "marginal_cpu_ms_per_page": 1000 * marginal,
            "fixed_cpu_s": medians[small] - marginal * pages[small],
        }
    ratios = {}
    if "wikiextractor" in results:
        ratios["extraction_cpu_per_page_vs_wikiextractor"] = (
            results["extraction"]["marginal_cpu_ms_per_page"] / results["wikiextractor"]["marginal_cpu_ms_per_page"])
    breakdown = stage_breakdown(args.dump)

    print(f"dump: {args.dump.name} replicated x{small} ({pages[small]} pages) and x{large} "
          f"({pages[large]} pages); medians of {args.repeat}")
    print(f"{'contender':<16}{'cpu x' + str(small):>10}{'cpu x' + str(large):>10}{'ms/page':>10}{'fixed s':>9}")
    for name, result in results.items():
        med = result["cpu_s_median"]
        print(f"{name:<16}{med[f'x{small}']:>10.2f}{med[f'x{large}']:>10.2f}"
              f"{result['marginal_cpu_ms_per_page']:>10.2f}{result['fixed_cpu_s']:>9.2f}")
    for name, ratio in ratios.items():
        print(f"ratio {name:<44} x{ratio:.2f}")
    print("extraction stages on x1 (CPU s, one process): " +
          ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in breakdown.items()))
    for name, note in notes.items():
        print(f"{name}: {note}")
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine, "dump": str(args.dump), "sizes": [small, large], "pages": {f"x{n}": c for n, c in pages.items()},
            "repeat": args.repeat, "results": results, "ratios": ratios, "stages_x1_cpu_s": breakdown,
            "notes": notes, "python": sys.version.split()[0], "mwparserfromhell": mwparserfromhell.__version__,
        }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
