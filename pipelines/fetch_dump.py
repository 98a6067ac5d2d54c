"""Download a Wikipedia dump, its multistream index and dumpstatus.json, and verify their checksums.

    wikiedm fetch --wiki enwiki --date 20240601 --output gs://bucket/dumps/enwiki/20240601 \
        [--mirror https://dumps.wikimedia.org]
    python -m pipelines.fetch_dump ...   (the same command line)

A Wikimedia mirror lays out one run of a wiki as ``{mirror}/{wiki}/{date}/``:
``dumpstatus.json`` there lists every job of the run with its status and its
files, each with ``size``, ``md5`` and ``sha1`` (``{wiki}-{date}-sha1sums.txt``
and ``-md5sums.txt`` hold the same sums as ``HASH  NAME`` lines). This module
fetches ``dumpstatus.json`` first, refuses a run whose multistream job is not
``done``, then streams the multistream dump and its index to ``dest`` (any
Beam filesystem: a local folder, ``gs://``, ``s3://``), hashing while it
writes. A file is written under a temporary name and renamed into place only
after its size, sha1 and md5 match, so a final name always holds a verified
file; a file already at ``dest`` that verifies is not downloaded again (a
re-run is cheap). ``dumpstatus.json`` is written last, as the record of what
was checked.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import sys
import time
import urllib.error
import urllib.request
import uuid

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.config import DEFAULT_MIRROR  # noqa: F401 - re-exported
from wikiedm import storage
from wikiedm.config import ConfigError, command_error

log = logging.getLogger("fetch_dump")

DUMPSTATUS = "dumpstatus.json"
CHUNK = 8 << 20
USER_AGENT = "wikiedm-fetch-dump/0.1 (Wikipedia corpus builder; python-urllib)"  # Wikimedia asks for a descriptive agent
_WIKI = re.compile(r"^[a-z][a-z0-9_]*$")
_DATE = re.compile(r"^\d{8}$")


class FetchError(Exception):
    """The dump could not be fetched (not published, not finished, network); the message says which."""


class ChecksumMismatchError(FetchError):
    """A downloaded file's size, sha1 or md5 differs from what the mirror publishes."""


@dataclasses.dataclass(frozen=True)
class PublishedFile:
    """One file of a dump run, as dumpstatus.json (or a *sums.txt file) describes it."""

    name: str
    size: int | None
    sha1: str | None
    md5: str | None
    job: str
    status: str


@dataclasses.dataclass
class FetchResult:
    dump: str  # path of the verified dump under dest
    index: str  # path of its verified multistream index
    dumpstatus: str  # path of the dumpstatus.json that was checked against
    files: list[dict]  # name, bytes, sha1, md5, downloaded (False: an already verified copy was kept)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def dump_file_names(wiki: str, date: str) -> dict[str, str]:
    """The names Wikimedia gives the single-file multistream dump of pages-articles and its index."""
    return {
        "dump": f"{wiki}-{date}-pages-articles-multistream.xml.bz2",
        "index": f"{wiki}-{date}-pages-articles-multistream-index.txt.bz2",
    }


def run_url(mirror: str, wiki: str, date: str, name: str = "") -> str:
    """``{mirror}/{wiki}/{date}/{name}``: the layout of dumps.wikimedia.org and its mirrors."""
    return "/".join(part.strip("/") for part in (mirror.rstrip("/"), wiki, date, name) if part)


def check_run(wiki: str, date: str) -> None:
    if not _WIKI.match(wiki):
        raise ValueError(f"not a wiki database name: {wiki!r} (e.g. enwiki, dewiki, simplewiki)")
    if not _DATE.match(date):
        raise ValueError(f"not a dump date: {date!r} (YYYYMMDD, e.g. 20240601)")


def published_files(status: dict) -> dict[str, PublishedFile]:
    """Every file of every job in a parsed dumpstatus.json, by name.

    The layout (version 0.8): ``{"jobs": {JOB: {"status": "done", "updated": ...,
    "files": {NAME: {"size": N, "url": "/wiki/date/NAME", "md5": ..., "sha1": ...}}}}, "version": ...}``.
    On large wikis the single multistream file sits in ``articlesmultistreamdumprecombine``
    (``articlesmultistreamdump`` holds the parts); small wikis have it in ``articlesmultistreamdump``.
    """
    jobs = status.get("jobs")
    if not isinstance(jobs, dict):
        raise FetchError(f"{DUMPSTATUS} has no 'jobs' mapping (not a Wikimedia dump status file?)")
    files: dict[str, PublishedFile] = {}
    for job_name, job in sorted(jobs.items()):
        for name, meta in sorted((job.get("files") or {}).items()):
            files[name] = PublishedFile(
                name=name,
                size=meta.get("size"),
                sha1=(meta.get("sha1") or None),
                md5=(meta.get("md5") or None),
                job=job_name,
                status=str(job.get("status", "")),
            )
    return files


def parse_checksum_list(text: str) -> dict[str, str]:
    """``{wiki}-{date}-sha1sums.txt`` / ``-md5sums.txt`` (``HASH  NAME`` per line) -> {NAME: HASH}."""
    sums = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and re.fullmatch(r"[0-9a-f]{32}|[0-9a-f]{40}", parts[0]):
            sums[parts[1].lstrip("*")] = parts[0]
    return sums


def _open_url(url: str, timeout: float):
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - http(s)/file mirrors by design


def _get_bytes(url: str, timeout: float, retries: int) -> bytes:
    def attempt() -> bytes:
        with _open_url(url, timeout) as response:
            return response.read()

    return _with_retries(url, attempt, retries)


def _with_retries(url: str, attempt, retries: int):
    """Retry transient network errors with backoff; a 404 is final (the run or file is not published)."""
    for n in range(retries + 1):
        try:
            return attempt()
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404, 410):
                raise FetchError(f"{url}: HTTP {exc.code} (not published on this mirror?)") from None
            problem: Exception = exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, ChecksumMismatchError) as exc:
            problem = exc
        if n == retries:
            if isinstance(problem, FetchError):
                raise problem
            raise FetchError(f"{url}: {problem} (after {retries + 1} attempts)") from None
        wait = min(60.0, 2.0 ** n)
        log.warning("%s: %s; retrying in %.0fs (%d/%d)", url, problem, wait, n + 1, retries)
        time.sleep(wait)
    raise AssertionError("unreachable")


def _digests_of(path: str) -> tuple[int, str, str]:
    sha1, md5, size = hashlib.sha1(), hashlib.md5(), 0  # noqa: S324 - the checksums Wikimedia publishes
    # UNCOMPRESSED: Beam would otherwise decompress a .bz2 name on the fly, and the sums are of the raw bytes
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        while block := fh.read(CHUNK):
            sha1.update(block)
            md5.update(block)
            size += len(block)
    return size, sha1.hexdigest(), md5.hexdigest()


def _mismatch(expected: PublishedFile, size: int, sha1: str, md5: str) -> str | None:
    if expected.size is not None and size != expected.size:
        return f"{size} bytes, the mirror says {expected.size}"
    if expected.sha1 and sha1 != expected.sha1:
        return f"sha1 {sha1} != published {expected.sha1}"
    if expected.md5 and md5 != expected.md5:
        return f"md5 {md5} != published {expected.md5}"
    return None


def download_verified(url: str, target: str, expected: PublishedFile, *, timeout: float = 60.0,
                      retries: int = 3, progress_every_s: float = 30.0) -> dict:
    """Stream ``url`` to ``target`` (any Beam filesystem) and verify it against ``expected``.

    Returns {name, bytes, sha1, md5, downloaded}. Raises ChecksumMismatchError when the file
    still differs after the retries; nothing is then left under ``target``.
    """
    if not (expected.sha1 or expected.md5):
        raise FetchError(f"{expected.name}: the mirror publishes no checksum for it; refusing an unverified file")
    if storage.exists(target):
        size, sha1, md5 = _digests_of(target)
        if _mismatch(expected, size, sha1, md5) is None:
            log.info("%s: already there and verified (%d bytes)", target, size)
            return {"name": expected.name, "bytes": size, "sha1": sha1, "md5": md5, "downloaded": False}
        log.warning("%s: present but does not verify; downloading it again", target)

    def attempt() -> dict:
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:12]}"
        sha1, md5, size = hashlib.sha1(), hashlib.md5(), 0  # noqa: S324
        started = last = time.monotonic()
        try:
            with _open_url(url, timeout) as response, FileSystems.create(
                    tmp, compression_type=CompressionTypes.UNCOMPRESSED) as out:
                while block := response.read(CHUNK):
                    out.write(block)
                    sha1.update(block)
                    md5.update(block)
                    size += len(block)
                    now = time.monotonic()
                    if now - last >= progress_every_s:
                        last = now
                        total = f"/{expected.size:,}" if expected.size else ""
                        log.info("%s: %s%s bytes, %.1f MB/s", expected.name, f"{size:,}", total,
                                 size / (now - started) / 1e6)
            problem = _mismatch(expected, size, sha1.hexdigest(), md5.hexdigest())
            if problem:
                raise ChecksumMismatchError(f"{url}: {problem}")
            if storage.exists(target):
                FileSystems.delete([target])
            FileSystems.rename([tmp], [target])
        except BaseException:
            if storage.exists(tmp):
                FileSystems.delete([tmp])
            raise
        log.info("%s: %d bytes, sha1 and md5 verified", target, size)
        return {"name": expected.name, "bytes": size, "sha1": sha1.hexdigest(), "md5": md5.hexdigest(),
                "downloaded": True}

    return _with_retries(url, attempt, retries)


def fetch_dump(wiki: str, date: str, dest: str, *, mirror: str = DEFAULT_MIRROR, timeout: float = 60.0,
               retries: int = 3) -> FetchResult:
    """Fetch and verify the multistream dump of ``wiki`` at ``date`` and its index into ``dest``."""
    check_run(wiki, date)
    status_bytes = _get_bytes(run_url(mirror, wiki, date, DUMPSTATUS), timeout, retries)
    try:
        status = json.loads(status_bytes)
    except ValueError as exc:
        raise FetchError(f"{run_url(mirror, wiki, date, DUMPSTATUS)}: not JSON ({exc})") from None
    published = published_files(status)
    names = dump_file_names(wiki, date)
    wanted = []
    for role in ("dump", "index"):
        name = names[role]
        entry = published.get(name)
        if entry is None:
            raise FetchError(f"{wiki} {date}: {DUMPSTATUS} lists no {name} (jobs: {', '.join(sorted(status['jobs']))})")
        if entry.status != "done":
            raise FetchError(f"{wiki} {date}: job {entry.job} is {entry.status!r}, not 'done'; "
                             f"{name} is not finished yet")
        wanted.append(entry)
    if any(not (e.sha1 or e.md5) for e in wanted):  # older runs: the sums live in the *sums.txt files only
        wanted = _with_sums_files(wanted, mirror, wiki, date, timeout, retries)
    records = [download_verified(run_url(mirror, wiki, date, e.name), storage.join(dest, e.name), e,
                                 timeout=timeout, retries=retries) for e in wanted]
    status_path = storage.join(dest, DUMPSTATUS)
    storage.write_bytes_atomic(status_path, status_bytes)
    return FetchResult(dump=storage.join(dest, names["dump"]), index=storage.join(dest, names["index"]),
                       dumpstatus=status_path, files=records)


def _with_sums_files(wanted: list[PublishedFile], mirror: str, wiki: str, date: str, timeout: float,
                     retries: int) -> list[PublishedFile]:
    sums = {}
    for kind in ("sha1", "md5"):
        url = run_url(mirror, wiki, date, f"{wiki}-{date}-{kind}sums.txt")
        try:
            sums[kind] = parse_checksum_list(_get_bytes(url, timeout, retries).decode("utf-8", "replace"))
        except FetchError as exc:
            log.warning("%s", exc)
            sums[kind] = {}
    return [dataclasses.replace(e, sha1=e.sha1 or sums["sha1"].get(e.name), md5=e.md5 or sums["md5"].get(e.name))
            for e in wanted]


def main(argv: list[str] | None = None) -> int:
    from pipelines.config import fetch_parser

    try:
        args, _, _ = fetch_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm fetch", str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = fetch_dump(args.wiki, args.date, args.output, mirror=args.mirror, timeout=args.timeout,
                            retries=args.retries)
    except ChecksumMismatchError as exc:
        print(f"wikiedm fetch: checksum mismatch: {exc}", file=sys.stderr)
        return 1
    except (FetchError, ValueError, OSError) as exc:
        return command_error("wikiedm fetch", str(exc))
    print(json.dumps(result.to_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
