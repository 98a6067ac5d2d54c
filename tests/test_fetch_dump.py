"""pipelines.fetch_dump against a real HTTP server on 127.0.0.1 serving a Wikimedia mirror layout
({mirror}/{wiki}/{date}/dumpstatus.json, the multistream dump, its index, *sums.txt)."""
from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from pipelines.fetch_dump import (
    ChecksumMismatchError,
    FetchError,
    dump_file_names,
    fetch_dump,
    main,
    parse_checksum_list,
)
from tests.conftest import HAVE_WIKIDUMPS, dump

WIKI, DATE = "enwiki", "20160501"
NAMES = dump_file_names(WIKI, DATE)


class Mirror:
    """A directory served over HTTP on 127.0.0.1; records every GET path."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):  # noqa: N802
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def gets(self, name: str) -> int:
        return sum(1 for p in self.requests if p.endswith("/" + name))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _sums(data: bytes) -> dict:
    return {"size": len(data), "md5": hashlib.md5(data).hexdigest(), "sha1": hashlib.sha1(data).hexdigest()}


def _dump_bytes() -> tuple[bytes, bytes]:
    """A real multistream dump and index when ../shared is there, else stand-in bytes (fetching never parses)."""
    if HAVE_WIKIDUMPS:
        return (Path(dump("enwiki-2016-206pages-articles1-multistream.xml.bz2")).read_bytes(),
                Path(dump("enwiki-2016-206pages-articles1-multistream-index.txt.bz2")).read_bytes())
    return b"BZh9" + bytes(range(256)) * 400, b"BZh9index" * 100


def write_run(root: Path, *, big_wiki: bool = False, status: str = "done", checksums_in_status: bool = True,
              served_dump: bytes | None = None) -> dict:
    """Write {root}/{wiki}/{date}/ as Wikimedia publishes it; return the published sums by file name."""
    data, index = _dump_bytes()
    run = root / WIKI / DATE
    run.mkdir(parents=True)
    (run / NAMES["dump"]).write_bytes(data if served_dump is None else served_dump)
    (run / NAMES["index"]).write_bytes(index)
    published = {NAMES["dump"]: _sums(data), NAMES["index"]: _sums(index)}
    files = {}
    for name, sums in published.items():
        entry = {"size": sums["size"], "url": f"/{WIKI}/{DATE}/{name}"}
        if checksums_in_status:
            entry.update(md5=sums["md5"], sha1=sums["sha1"])
        files[name] = entry
    jobs = {
        "articlesdump": {"status": "done", "updated": "2016-05-03 10:11:12", "files": {
            f"{WIKI}-{DATE}-pages-articles.xml.bz2": {"size": 10, "url": "/x", "md5": "0" * 32, "sha1": "0" * 40}}},
        "sitestatstable": {"status": "done", "updated": "2016-05-01 01:02:03", "files": {}},
    }
    if big_wiki:  # enwiki: the parts in articlesmultistreamdump, the single file in ...recombine
        jobs["articlesmultistreamdump"] = {"status": "done", "updated": "2016-05-04 00:00:00", "files": {
            f"{WIKI}-{DATE}-pages-articles-multistream1.xml-p1p41242.bz2": {"size": 5, "url": "/p", "md5": "1" * 32, "sha1": "1" * 40}}}
        jobs["articlesmultistreamdumprecombine"] = {"status": status, "updated": "2016-05-05 00:00:00", "files": files}
    else:
        jobs["articlesmultistreamdump"] = {"status": status, "updated": "2016-05-04 00:00:00", "files": files}
    (run / "dumpstatus.json").write_text(json.dumps({"jobs": jobs, "version": "0.8"}))
    (run / f"{WIKI}-{DATE}-sha1sums.txt").write_text("".join(f"{s['sha1']}  {n}\n" for n, s in published.items()))
    (run / f"{WIKI}-{DATE}-md5sums.txt").write_text("".join(f"{s['md5']}  {n}\n" for n, s in published.items()))
    return published


@pytest.fixture
def mirror(tmp_path):
    m = Mirror(tmp_path / "mirror")
    (tmp_path / "mirror").mkdir()
    yield m
    m.close()


@pytest.mark.parametrize("big_wiki", [False, True], ids=["small-wiki-layout", "enwiki-recombine-layout"])
def test_fetch_verifies_and_a_rerun_downloads_nothing(mirror, tmp_path, big_wiki):
    published = write_run(mirror.root, big_wiki=big_wiki)
    dest = tmp_path / "dest"
    result = fetch_dump(WIKI, DATE, str(dest), mirror=mirror.url, retries=0)
    for name, sums in published.items():
        got = (dest / name).read_bytes()
        assert hashlib.sha1(got).hexdigest() == sums["sha1"] and len(got) == sums["size"]
    assert result.dump == str(dest / NAMES["dump"]) and result.index == str(dest / NAMES["index"])
    assert json.loads(Path(result.dumpstatus).read_text())["version"] == "0.8"
    assert [f["downloaded"] for f in result.files] == [True, True]
    assert sorted(p.name for p in dest.iterdir()) == sorted([*published, "dumpstatus.json"])  # no temp files

    again = fetch_dump(WIKI, DATE, str(dest), mirror=mirror.url, retries=0)
    assert [f["downloaded"] for f in again.files] == [False, False]
    assert mirror.gets(NAMES["dump"]) == 1  # the verified copy was kept, not fetched again


def test_corrupt_download_is_retried_then_rejected_and_leaves_nothing(mirror, tmp_path):
    data, _ = _dump_bytes()
    corrupt = bytearray(data)
    corrupt[len(corrupt) // 2] ^= 0xFF
    write_run(mirror.root, served_dump=bytes(corrupt))
    dest = tmp_path / "dest"
    with pytest.raises(ChecksumMismatchError, match="sha1"):
        fetch_dump(WIKI, DATE, str(dest), mirror=mirror.url, retries=1)
    assert mirror.gets(NAMES["dump"]) == 2  # first try + one retry
    assert not dest.exists() or list(dest.iterdir()) == []


def test_a_damaged_file_already_at_dest_is_downloaded_again(mirror, tmp_path):
    published = write_run(mirror.root)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / NAMES["dump"]).write_bytes(b"half a download")
    result = fetch_dump(WIKI, DATE, str(dest), mirror=mirror.url, retries=0)
    assert result.files[0]["downloaded"] is True
    assert hashlib.md5((dest / NAMES["dump"]).read_bytes()).hexdigest() == published[NAMES["dump"]]["md5"]


def test_unfinished_run_is_refused_before_any_download(mirror, tmp_path):
    write_run(mirror.root, big_wiki=True, status="in-progress")
    with pytest.raises(FetchError, match="articlesmultistreamdumprecombine is 'in-progress'"):
        fetch_dump(WIKI, DATE, str(tmp_path / "dest"), mirror=mirror.url, retries=0)
    assert mirror.gets(NAMES["dump"]) == 0


def test_unpublished_date_is_a_clear_404(mirror, tmp_path):
    write_run(mirror.root)
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_dump(WIKI, "20991231", str(tmp_path / "dest"), mirror=mirror.url, retries=2)
    assert len(mirror.requests) == 1  # a 404 is final, not retried


def test_sums_files_are_used_when_dumpstatus_has_no_checksums(mirror, tmp_path):
    published = write_run(mirror.root, checksums_in_status=False)
    result = fetch_dump(WIKI, DATE, str(tmp_path / "dest"), mirror=mirror.url, retries=0)
    assert {f["name"]: f["sha1"] for f in result.files} == {n: s["sha1"] for n, s in published.items()}
    assert mirror.gets(f"{WIKI}-{DATE}-sha1sums.txt") == 1


def test_no_checksum_anywhere_is_refused(mirror, tmp_path):
    write_run(mirror.root, checksums_in_status=False)
    for kind in ("sha1", "md5"):
        (mirror.root / WIKI / DATE / f"{WIKI}-{DATE}-{kind}sums.txt").unlink()
    with pytest.raises(FetchError, match="no checksum"):
        fetch_dump(WIKI, DATE, str(tmp_path / "dest"), mirror=mirror.url, retries=0)
    assert mirror.gets(NAMES["dump"]) == 0


def test_parse_checksum_list_reads_wikimedia_lines():
    text = f"{'a' * 40}  enwiki-20160501-pages-articles.xml.bz2\n{'b' * 40} *other.bz2\nnot a line\n"
    assert parse_checksum_list(text) == {"enwiki-20160501-pages-articles.xml.bz2": "a" * 40, "other.bz2": "b" * 40}


def test_cli_exit_codes(mirror, tmp_path, capsys):
    write_run(mirror.root)
    dest = tmp_path / "dest"
    assert main(["--wiki", WIKI, "--date", DATE, "--output", str(dest), "--mirror", mirror.url, "--retries", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["dump"].endswith(NAMES["dump"])
    assert main(["--wiki", WIKI, "--date", "2016-05-01", "--dest", str(dest), "--mirror", mirror.url]) == 2
    assert "YYYYMMDD" in capsys.readouterr().err
