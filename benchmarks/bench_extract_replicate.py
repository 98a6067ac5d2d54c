"""Replicate a dump N times with new page ids and titles (for marginal-cost benchmarks).

Copy 0 is the dump as it is; copy k (k >= 1) repeats every ``<page>`` with
``<title>`` suffixed " (copy k)" and ``<id>`` (the page id, the first ``<id>``
of the page) shifted by ``k * stride``. Fixed start-up costs are the same at
every size, so (cost(x8) - cost(x2)) / (pages(x8) - pages(x2)) is the
marginal cost per page. The result is bz2-compressed (as dumps are shipped)
and cached by source path, size, modification time and N.

Usage: ``python benchmarks/bench_extract_replicate.py SRC N [--out PATH]``
"""
from __future__ import annotations

import argparse
import bz2
import hashlib
import lzma
import os
import re
import tempfile
from pathlib import Path

_PAGE = re.compile(r"<page>.*?</page>\s*", re.DOTALL)
_TITLE = re.compile(r"<title>(.*?)</title>", re.DOTALL)
_ID = re.compile(r"<id>(\d+)</id>")


def _read_text(path: Path) -> str:
    opener = bz2.open if path.suffix == ".bz2" else lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as handle:
        return handle.read().decode("utf-8")


def replicate_text(xml: str, copies: int) -> tuple[str, int]:
    """(the replicated XML, pages in it). Pages are whole ``<page>`` elements."""
    pages = list(_PAGE.finditer(xml))
    if not pages:
        raise ValueError("no <page> elements")
    head, tail = xml[:pages[0].start()], xml[pages[-1].end():]
    if "</mediawiki>" not in tail:  # a dump cut short: close it so every reader gets all copies
        tail += "</mediawiki>\n"
    bodies = [match.group() for match in pages]
    max_id = max(int(_ID.search(body).group(1)) for body in bodies if _ID.search(body))
    stride = 10 ** (len(str(max_id)) + 1)
    out = [head, *bodies]
    for copy in range(1, copies):
        for body in bodies:
            body = _TITLE.sub(lambda m: f"<title>{m.group(1)} (copy {copy})</title>", body, count=1)
            body = _ID.sub(lambda m: f"<id>{int(m.group(1)) + copy * stride}</id>", body, count=1)
            out.append(body)
    out.append(tail)
    return "".join(out), len(bodies) * copies


def replicated_dump(src: Path, copies: int, cache_dir: Path | None = None) -> tuple[Path, int]:
    """Path of ``src`` replicated ``copies`` times (bz2, cached) and its page count."""
    stat = src.stat()
    key = hashlib.sha256(f"{src.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{copies}".encode()).hexdigest()[:16]
    cache_dir = cache_dir or Path(os.environ.get("WIKIEDM_BENCH_CACHE", Path(tempfile.gettempdir()) / "wikiedm-bench"))
    cache_dir.mkdir(parents=True, exist_ok=True)
    stem = src.name.split(".xml")[0]
    path = cache_dir / f"{stem}-x{copies}-{key}.xml.bz2"
    count_file = path.with_suffix(".pages")
    if not path.exists() or not count_file.exists():
        xml, pages = replicate_text(_read_text(src), copies)
        partial = path.with_suffix(".partial")
        with bz2.open(partial, "wb") as handle:
            handle.write(xml.encode("utf-8"))
        partial.replace(path)
        count_file.write_text(str(pages))
    return path, int(count_file.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("copies", type=int)
    parser.add_argument("--out", type=Path, help="cache folder (default: $TMPDIR/wikiedm-bench)")
    args = parser.parse_args(argv)
    path, pages = replicated_dump(args.src, args.copies, args.out)
    print(f"{path}\t{pages} pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
