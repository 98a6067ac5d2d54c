"""Scale benchmark: the corpus job on a real enwiki excerpt replicated x8 and x64, beside wikiextractor.

    python benchmarks/bench_scale.py --json benchmarks/results/scale.json --plot benchmarks/results/scale.png \\
        [--dump MULTISTREAM] [--sizes 8,64] [--repeat 3] [--repeat_large 1] \\
        [--job "new job=.:1,2"] [--job "old job=main:1" --max_size "old job=8"] [--no_wikiextractor]

Input: the 206-page enwiki excerpt (``../shared/wikidumps``) replicated with new page ids, titles and
anchor texts per copy (``synth_dump.replicate_multistream``), written as users get real dumps: a bz2
multistream file of 100 pages per stream with its ``-index.txt.bz2`` (x64: ~390 MB of XML). The copies
are written once into ``--cache`` (outside the repository) and reused. Every contender reads the same file:

* each ``--job NAME=CODE:WORKERS[:FLAGS]``: ``python -m pipelines.wiki_mentions`` (DirectRunner) from CODE,
  ``.`` for this checkout or a git ref (exported once into the cache with ``git archive``), with each
  worker count (``--direct_num_workers N``; N > 1 adds ``--direct_running_mode multi_processing``) and its
  own job FLAGS if any (``hyperlinks only=.:1:--labels.hyperlinks_only true``: the job with no labeller, the
  CPU floor of any labeller on the same tables);
* ``wikiextractor --links --processes 1`` (the baseline), in the same invocation, interleaved.

Measured for every run, over the whole process tree (the runner may start worker processes): peak RSS
(the sum over the tree's processes, sampled every 0.2 s), CPU seconds (user + system of every process of the tree: ``wait4``'s rusage of the
reaped ones, or the last sample of one that was not reaped), wall time, and the load average before and
after. The figures a user pays per unit of input come from differences between sizes, so start-up cancels:

* marginal RAM per byte of XML = (peak(x64) - peak(x8)) / (XML bytes(x64) - XML bytes(x8));
* marginal CPU per page, the job's over wikiextractor's (runs of the same invocations), from the medians
  per size and, robust to the machine's speed changing between rounds, per round (``..._same_round``: the
  job and wikiextractor run back to back in each round; at each size too, ``cpu_vs_wikiextractor_same_round``),
  over the rounds run at one speed (``..._steady_rounds``: a fixed pure-Python workload, timed right before and
  right after every run, ``speed_probe_s``, gives each run's speed; steady: within ``STEADY_SPREAD`` across the
  round's runs), and per round with each run's CPU divided by its speed (``..._speed_adjusted``);
* wall time with 2 workers / 1 worker at each size;
* elements and bytes crossing shuffles per page, from the job's ``volume/*`` counters in ``stats.json``.

Runs accumulate in ``--json`` (each invocation is a session; the summary is recomputed from all the runs in
the file), so the old job, wikiextractor and the new job can be measured at different times. A run whose
process tree passes ``--rss_limit_gb`` is killed and recorded as such (the machine is shared).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from synth_dump import multistream_index_path, replicate_multistream  # noqa: E402

DEFAULT_DUMP = (REPO / ".." / "shared" / "wikidumps" / "enwiki-2016-206pages-articles1-multistream.xml.bz2").resolve()
DEFAULT_CACHE = Path(os.environ.get("WIKIEDM_SCALE_CACHE", "/tmp/wikiedm-scale"))
WIKIEXTRACTOR = "wikiextractor"
# The job's flags in every run: as bench_pipeline.py runs it (red links kept, as wikiextractor keeps every link).
JOB_FLAGS = ["--keep_red_links", "true", "--progress_every_s", "600"]
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------ the input

def replicated_input(src: Path, copies: int, cache: Path) -> dict:
    """The x``copies`` multistream dump of ``src`` in ``cache`` (written the first time), and what it holds."""
    stem = src.name.split(".")[0].removesuffix("-multistream")
    dump = cache / f"{stem}-x{copies}-anchors-multistream.xml.bz2"
    meta = dump.with_name(dump.name + ".json")
    if not (dump.exists() and meta.exists() and Path(multistream_index_path(str(dump))).exists()):
        cache.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        counts = replicate_multistream(str(src), str(dump), copies, new_anchor_texts=True)
        print(f"  wrote {dump.name}: {counts} in {time.perf_counter() - started:.0f} s", flush=True)
        meta.write_text(json.dumps(counts))
    return {"path": str(dump), "index": multistream_index_path(str(dump)), **json.loads(meta.read_text())}


def code_checkout(ref: str, cache: Path) -> tuple[Path, str]:
    """(folder to run the job from, commit): ``.`` is this checkout; a git ref is exported once into the cache."""
    commit = subprocess.run(["git", "rev-parse", "HEAD" if ref == "." else ref], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.strip()
    if ref == ".":
        return REPO, commit
    folder = cache / f"code-{commit[:12]}"
    if not (folder / "pipelines").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder, commit


# ------------------------------------------------------------------------------------------ measuring

@dataclass
class _Proc:
    rss: int = 0
    anon: int = 0
    cpu: float = 0.0


def _session_members(sid: int) -> dict[int, _Proc]:
    """RSS, anonymous RSS and CPU seconds of every live process of session ``sid`` (the tree we started,
    including children reparented after their parent exited)."""
    found: dict[int, _Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # fields[3] is field 6 of stat: the session id
                continue
            with open(f"/proc/{entry}/statm") as fh:
                _size, resident, shared = (int(x) for x in fh.read().split()[:3])
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        found[int(entry)] = _Proc(resident * PAGE_SIZE, (resident - shared) * PAGE_SIZE, cpu)
    return found


def run_tree(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, interval_s: float = 0.2,
             rss_limit_bytes: int | None = None, log_path: Path | None = None,
             probe_every_s: float | None = None) -> dict:
    """Run ``cmd`` in a session of its own; measure its whole process tree (see the module's doc); with
    ``probe_every_s``, time the speed probe (one repeat) that often while it runs."""
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    load_before = os.getloadavg()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    peak_rss = peak_anon = largest_process = 0
    most_processes = 0
    last_cpu: dict[int, float] = {}
    killed = False
    status = rusage = None
    probes: list[float] = []
    next_probe = started + (probe_every_s or 0)
    while status is None:
        members = _session_members(proc.pid)
        peak_rss = max(peak_rss, sum(m.rss for m in members.values()))
        peak_anon = max(peak_anon, sum(m.anon for m in members.values()))
        largest_process = max([largest_process, *(m.rss for m in members.values())])
        most_processes = max(most_processes, len(members))
        for pid, m in members.items():
            last_cpu[pid] = m.cpu
        if rss_limit_bytes and peak_rss > rss_limit_bytes and not killed:
            os.killpg(proc.pid, signal.SIGKILL)  # the session we started, whole
            killed = True
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == 0:
            status = None
            if probe_every_s and time.perf_counter() >= next_probe:
                probes.append(speed_probe(repeat=1))
                next_probe = time.perf_counter() + probe_every_s
            time.sleep(interval_s)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Processes of the tree still alive after the root exited (none for a clean run): count their CPU
    # while they finish, for up to 10 s, then end them (they are ours).
    leftovers = _session_members(proc.pid)
    grace_until = time.perf_counter() + 10
    while leftovers and time.perf_counter() < grace_until:
        for pid, m in leftovers.items():
            last_cpu[pid] = m.cpu
        time.sleep(interval_s)
        leftovers = _session_members(proc.pid)
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if log_path:
        log.close()
    reaped_cpu = rusage.ru_utime + rusage.ru_stime  # the root and every descendant it (transitively) waited for
    sampled_cpu = sum(last_cpu.values())  # every process seen, to its last sample (misses the last interval)
    return {
        "rc": proc.returncode,
        "killed_at_rss_limit": killed,
        "wall_s": round(wall, 2),
        "cpu_s": round(max(reaped_cpu, sampled_cpu), 2),
        "cpu_s_reaped": round(reaped_cpu, 2),
        "cpu_s_sampled": round(sampled_cpu, 2),
        "peak_rss_mib": round(peak_rss / 2**20, 1),
        "peak_anon_rss_mib": round(peak_anon / 2**20, 1),
        # the largest single process, sampled (not ru_maxrss: Linux carries the forking parent's RSS into a child
        # at exec, so a bench started from a large process would report that process's size)
        "max_process_rss_mib": round(largest_process / 2**20, 1),
        "processes": most_processes,
        "leftover_processes": len(leftovers),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        **({"speed_probe_during_s": probes} if probe_every_s else {}),
    }


# ------------------------------------------------------------------------------------------ shuffle volume

def shuffle_volume(counters: dict) -> dict:
    """Elements and bytes crossing shuffles, from the job's ``volume/*`` counters.

    ``volume/<step>/requests`` and ``/table`` count the elements a key join shuffles,
    ``/request_bytes`` and ``/table_bytes`` their bytes as Beam's coder encodes them (requests from a
    1-in-16 sample); ``/records`` and ``/record_bytes`` (the lookup store's records) and ``/shuffled``
    and ``/shuffled_bytes`` count any other shuffle's elements and bytes. Alias rows cross the writers'
    shuffle once each, and so do passages in a job that does not write them where their unit is processed
    (one without ``volume/WritePassagesByRange/*``); the writers' bytes are not counted (the Parquet
    written is reported beside them).

    The two-pass job's pass 1 hands its records from step to step in sorted run files
    (``volume/tables/<run set>/records`` and ``/bytes``: under ``"run_files"``); only the run paths cross
    Beam's shuffles (``/runs`` and ``/run_path_bytes``: the step ``BuildTables``).
    """
    elements: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    run_files = {"records": {}, "bytes": {}}
    for key, value in counters.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[:2] == ["volume", "tables"]:
            if parts[3] == "runs":
                elements["BuildTables"] = elements.get("BuildTables", 0) + value
            elif parts[3] == "run_path_bytes":
                nbytes["BuildTables"] = nbytes.get("BuildTables", 0) + value
            elif parts[3] in ("records", "bytes"):
                run_files[parts[3]][parts[2]] = run_files[parts[3]].get(parts[2], 0) + value
            continue
        if len(parts) != 3 or parts[0] != "volume":
            continue
        if parts[2] in ("requests", "table", "shuffled", "records"):
            elements[parts[1]] = elements.get(parts[1], 0) + value
        elif parts[2] in ("request_bytes", "table_bytes", "shuffled_bytes", "record_bytes"):
            nbytes[parts[1]] = nbytes.get(parts[1], 0) + value
    written = counters.get("volume/BuildAliasTable/out", 0)
    if not any(k.startswith("volume/WritePassagesByRange/") for k in counters):  # passages shuffled to writers
        written += sum(v for k, v in counters.items() if k.startswith("passages/") and k.count("/") == 1)
    if elements and "BuildTables" not in elements:
        elements["WriteShards"] = written
    out = {"elements": elements, "bytes": nbytes}
    if run_files["records"]:
        out["run_files"] = run_files
    return out


def output_bytes(out: Path) -> int:
    """Parquet bytes written: what the shard writers' shuffle carries, compressed."""
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(f.get("bytes", 0) for f in manifest["files"])


# ------------------------------------------------------------------------------------------ the contenders

@dataclass
class Contender:
    label: str  # "new job, 2 workers", "wikiextractor"
    code: Path | None  # None: wikiextractor
    commit: str | None
    workers: int
    max_size: int | None = None
    flags: tuple[str, ...] = ()  # this contender's own job flags, after the session's (e.g. a config to compare)

    def command(self, dump: dict, out: Path, extra: list[str]) -> list[str]:
        if self.code is None:
            return [sys.executable, "-m", "wikiextractor.WikiExtractor", "--links", "--processes", "1", "-q",
                    "-o", str(out), dump["path"]]
        workers = ["--direct_num_workers", str(self.workers)]
        if self.workers > 1:
            workers += ["--direct_running_mode", "multi_processing"]
        return [sys.executable, "-m", "pipelines.wiki_mentions", "--input", dump["path"], "--output", str(out),
                *JOB_FLAGS, *workers, *extra, *self.flags]


def parse_jobs(specs: list[str], max_sizes: list[str], cache: Path) -> list[Contender]:
    limits = dict(s.rsplit("=", 1) for s in max_sizes)
    out = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        ref, _, rest = rest.partition(":")
        workers, _, flags = rest.partition(":")
        code, commit = code_checkout(ref or ".", cache)
        for n in (int(w) for w in (workers or "1").split(",")):
            out.append(Contender(f"{name}, {n} worker{'s' if n > 1 else ''}", code, commit, n,
                                 int(limits[name]) if name in limits else None, tuple(shlex.split(flags))))
    return out


# A shared machine's speed changes, for seconds to minutes at a time (the same run of the job has taken x3 the CPU
# seconds at the same load). A fixed pure-Python workload (strings, a dict, a sort: the job's kind of work), timed
# right before and right after every run, gives each run's speed: the rounds run at one speed are told from the
# others, and a run's CPU can be put at one speed. Probes timed while a run runs (--probe_during_s) are kept for
# reading but not used: they share the cores and caches with the run, so they measure the run too (during
# wikiextractor's 4 processes the probe takes ~2x as long as during the job's one).
STEADY_SPREAD = 1.2  # a round is steady when its runs' speeds are within this factor of each other


def speed_probe(repeat: int = 5) -> float:
    """CPU seconds of a fixed workload in this process (median of ``repeat``; ~0.08 s each on a quiet machine)."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        words = [f"w{i % 997}x{i}" for i in range(200_000)]
        counts: dict[str, int] = {}
        for word in words:
            counts[word[:4]] = counts.get(word[:4], 0) + 1
        words.sort(key=len)
        "".join(words).split("x")
        times.append(time.process_time() - started)
    return round(statistics.median(times), 4)


def run_one(c: Contender, size: int, dump: dict, work: Path, extra: list[str], rss_limit: int | None,
            probe_during_s: float | None = None) -> dict:
    out = work / f"out-{c.label.replace(' ', '_').replace(',', '')}-x{size}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = dict(os.environ)
    if c.code is not None:
        env["PYTHONPATH"] = str(c.code)  # the job's code, also in the runner's worker processes
    probe_before = speed_probe()
    row = {"contender": c.label, "size": size, "commit": c.commit, "contender_flags": list(c.flags),
           **run_tree(c.command(dump, out, extra), cwd=c.code or REPO, env=env, rss_limit_bytes=rss_limit,
                      log_path=work / f"{out.name}.log", probe_every_s=probe_during_s)}
    row["speed_probe_s"] = [probe_before, speed_probe()]
    if c.code is not None and row["rc"] == 0:
        stats = json.loads((out / "stats.json").read_text())
        counters = stats["counters"]
        row["pages_read"] = counters.get("pages_read")
        row["shuffle"] = shuffle_volume(counters)
        row["output_bytes"] = output_bytes(out)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    print(f"  {c.label:<22} x{size:<4} rc {row['rc']}  cpu {row['cpu_s']:8.1f} s  wall {row['wall_s']:7.1f} s  "
          f"peak {row['peak_rss_mib']:8.0f} MiB  ({row['processes']} proc)  load {row['load_before'][0]}  "
          f"probe {row['speed_probe_s'][0]:.3f}/{row['speed_probe_s'][1]:.3f} s",
          flush=True)
    return row


# ------------------------------------------------------------------------------------------ the summary

def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _by_round(rows: list[dict], size: int) -> dict[tuple, dict]:
    """The runs at ``size``, by (session, round); runs recorded before rounds were: none."""
    return {(r["session"], r["round"]): r for r in rows if r["size"] == size and r.get("round") is not None}


def run_speed(run: dict) -> float | None:
    """The machine's speed around a run: the mean of the probes' seconds right before and right after it
    (larger is slower), or None for a run recorded before probes were."""
    probes = run.get("speed_probe_s") or ()
    return statistics.fmean(probes) if probes and min(probes) > 0 else None


def _spread(runs: list[dict]) -> float | None:
    """How far the machine's speed moved across these runs: the slowest run's speed over the fastest's (None:
    a run recorded before probes were)."""
    speeds = [run_speed(r) for r in runs]
    if not speeds or None in speeds:
        return None
    return max(speeds) / min(speeds)


def _same_round_ratios(job: list[dict], baseline: list[dict], size: int) -> list[tuple]:
    """The job's CPU over wikiextractor's at one size, per round that ran both (back to back, so a change of
    the machine's speed between rounds, which a shared machine has, cancels): (ratio, the round's speed
    spread, the ratio with each run's CPU at one speed)."""
    mine, theirs = _by_round(job, size), _by_round(baseline, size)
    out = []
    for k in sorted(mine.keys() & theirs.keys()):
        if theirs[k]["cpu_s"] <= 0:
            continue
        two = [mine[k], theirs[k]]
        speeds = [run_speed(r) for r in two]
        adjusted = None if None in speeds else (two[0]["cpu_s"] / speeds[0]) / (two[1]["cpu_s"] / speeds[1])
        out.append((two[0]["cpu_s"] / two[1]["cpu_s"], _spread(two), adjusted))
    return out


def _marginal_ratio(ja: float, jb: float, wa: float, wb: float) -> float | None:
    return (jb - ja) / (wb - wa) if wb > wa else None


def _same_round_marginal_ratios(job: list[dict], baseline: list[dict], a: int,
                                b: int) -> list[tuple[float, float | None, float | None]]:
    """The marginal CPU per page between sizes a and b, the job's over wikiextractor's, per round that ran all
    four: (ratio, the round's speed spread over the four runs, the ratio with each run's CPU at one speed)."""
    ja, jb, wa, wb = _by_round(job, a), _by_round(job, b), _by_round(baseline, a), _by_round(baseline, b)
    ratios = []
    for k in sorted(ja.keys() & jb.keys() & wa.keys() & wb.keys()):
        four = [ja[k], jb[k], wa[k], wb[k]]
        ratio = _marginal_ratio(*(r["cpu_s"] for r in four))
        if ratio is None:
            continue
        speeds = [run_speed(r) for r in four]
        adjusted = None if None in speeds else _marginal_ratio(*(r["cpu_s"] / v for r, v in zip(four, speeds)))
        ratios.append((ratio, _spread(four), adjusted))
    return ratios


def _round_figures(ratios: list[tuple]) -> dict[str, dict]:
    """Per-round (ratio, speed spread[, ratio at one speed]) -> the median over every round, over the steady
    rounds (speed spread within STEADY_SPREAD), and of the ratios at one speed, where the rounds were probed."""
    out = {"same_round": {"median": round(statistics.median(r[0] for r in ratios), 3), "rounds": len(ratios)}}
    adjusted = [r[2] for r in ratios if len(r) > 2 and r[2] is not None]
    if adjusted:
        out["speed_adjusted"] = {"median": round(statistics.median(adjusted), 3), "rounds": len(adjusted),
                                 "ratios": [round(r, 3) for r in adjusted]}
    probed = [(r[0], r[1]) for r in ratios if r[1] is not None]
    if probed:
        steady = [r for r, spread in probed if spread <= STEADY_SPREAD]
        out["steady_rounds"] = {"median": round(statistics.median(steady), 3) if steady else None,
                                "rounds": len(steady), "unsteady_rounds": len(probed) - len(steady),
                                "ratios": [round(r, 3) for r, _ in probed],
                                "probe_spreads": [round(spread, 3) for _, spread in probed]}
    return out


def summarise(runs: list[dict], inputs: dict[str, dict]) -> dict:
    """Medians per (contender, size), marginal figures between sizes, and the ratios the issue asks for."""
    ok = [r for r in runs if r["rc"] == 0]
    out: dict[str, dict] = {}
    for label in sorted({r["contender"] for r in ok}):
        mine = [r for r in ok if r["contender"] == label]
        sessions = {r["session"] for r in mine}
        by_size: dict[str, dict] = {}
        for size in sorted({r["size"] for r in mine}):
            rows = [r for r in mine if r["size"] == size]
            inp = inputs[str(size)]
            cell = {"runs": len(rows), "pages": inp["pages"], "xml_bytes": inp["xml_bytes"]}
            for key in ("cpu_s", "wall_s", "peak_rss_mib", "peak_anon_rss_mib", "max_process_rss_mib"):
                cell[key] = round(_median(rows, key), 2)
            cell["cpu_ms_per_page"] = round(1000 * cell["cpu_s"] / inp["pages"], 2)
            cell["load_1min"] = [r["load_before"][0] for r in rows]
            shuffles = [r["shuffle"] for r in rows if r.get("shuffle")]
            if shuffles:
                s = shuffles[0]  # the counters are deterministic: any run's
                cell["shuffled_elements_per_page"] = round(sum(s["elements"].values()) / inp["pages"], 2)
                cell["shuffled_kib_per_page"] = round(sum(s["bytes"].values()) / 1024 / inp["pages"], 2)
                cell["shuffled_kib_per_page_by_step"] = {
                    k: round(v / 1024 / inp["pages"], 2) for k, v in sorted(s["bytes"].items())}
                cell["shuffled_elements_per_page_by_step"] = {
                    k: round(v / inp["pages"], 2) for k, v in sorted(s["elements"].items())}
                cell["output_kib_per_page"] = round(_median(rows, "output_bytes") / 1024 / inp["pages"], 2)
                if s.get("run_files"):  # pass 1's records handed between steps in files (local disk, or GCS)
                    files = s["run_files"]
                    cell["run_file_records_per_page"] = round(sum(files["records"].values()) / inp["pages"], 2)
                    cell["run_file_kib_per_page"] = round(sum(files["bytes"].values()) / 1024 / inp["pages"], 2)
                    cell["run_file_kib_per_page_by_set"] = {
                        k: round(v / 1024 / inp["pages"], 2) for k, v in sorted(files["bytes"].items())}
            by_size[str(size)] = cell
        if label != WIKIEXTRACTOR:
            base = [r for r in ok if r["contender"] == WIKIEXTRACTOR and r["session"] in sessions]
            for size, cell in by_size.items():
                same = _same_round_ratios(mine, base, int(size))
                if same:
                    for kind, figures in _round_figures(same).items():
                        cell[f"cpu_vs_wikiextractor_{kind}"] = figures
        entry: dict = {"sizes": by_size, "sessions": sorted(sessions)}
        flags = sorted({tuple(r.get("contender_flags") or ()) for r in mine})
        if flags != [()]:
            entry["contender_flags"] = [" ".join(f) for f in flags]
        sizes = sorted(int(s) for s in by_size)
        if len(sizes) > 1:
            entry["marginal"] = {}
            for a, b in zip(sizes, sizes[1:]):
                ca, cb = by_size[str(a)], by_size[str(b)]
                ia, ib = inputs[str(a)], inputs[str(b)]
                m = {"ram_bytes_per_xml_byte": round(
                        (cb["peak_rss_mib"] - ca["peak_rss_mib"]) * 2**20 / (ib["xml_bytes"] - ia["xml_bytes"]), 3),
                     # without the pages mapped from files (the libraries, the lookup store's SQLite pages):
                     # memory the process itself allocated
                     "anon_ram_bytes_per_xml_byte": round(
                        (cb["peak_anon_rss_mib"] - ca["peak_anon_rss_mib"]) * 2**20 / (ib["xml_bytes"] - ia["xml_bytes"]),
                        3),
                     "cpu_ms_per_page": round(1000 * (cb["cpu_s"] - ca["cpu_s"]) / (ib["pages"] - ia["pages"]), 3)}
                if label != WIKIEXTRACTOR:
                    base = [r for r in ok if r["contender"] == WIKIEXTRACTOR and r["session"] in sessions]
                    wa = _median([r for r in base if r["size"] == a], "cpu_s")
                    wb = _median([r for r in base if r["size"] == b], "cpu_s")
                    if wa is not None and wb is not None:
                        wx = 1000 * (wb - wa) / (ib["pages"] - ia["pages"])
                        m["wikiextractor_cpu_ms_per_page"] = round(wx, 3)
                        m["cpu_per_page_vs_wikiextractor"] = (round(m["cpu_ms_per_page"] / wx, 3) if wx > 0 else None)  # None: too small to measure
                    same = _same_round_marginal_ratios(mine, base, a, b)
                    if same:
                        for kind, figures in _round_figures(same).items():
                            m[f"cpu_per_page_vs_wikiextractor_{kind}"] = figures
                entry["marginal"][f"x{a}->x{b}"] = m
        out[label] = entry
    # wall time with more workers / 1 worker, per job and size
    speedups: dict[str, dict] = {}
    for label, entry in out.items():
        name, _, workers = label.rpartition(", ")
        if not name or workers == "1 worker" or f"{name}, 1 worker" not in out:
            continue
        one = out[f"{name}, 1 worker"]["sizes"]
        speedups[label] = {f"x{s}": round(cell["wall_s"] / one[s]["wall_s"], 3)
                           for s, cell in entry["sizes"].items() if s in one}
    unfinished = []
    for r in runs:
        if r["rc"] == 0:
            continue
        row = {k: r.get(k) for k in ("contender", "size", "session", "rc", "killed_at_rss_limit", "wall_s", "cpu_s",
                                     "peak_rss_mib", "note")}
        # The memory it reached bounds the marginal RAM from below, against the largest size it finished.
        done = sorted((int(s) for s in out.get(r["contender"], {}).get("sizes", {}) if int(s) < r["size"])
                      if r["contender"] != WIKIEXTRACTOR else ())
        if done:
            small = out[r["contender"]]["sizes"][str(done[-1])]
            extra_xml = inputs[str(r["size"])]["xml_bytes"] - inputs[str(done[-1])]["xml_bytes"]
            row["ram_bytes_per_xml_byte_at_least"] = {
                f"x{done[-1]}->x{r['size']}": round((r["peak_rss_mib"] - small["peak_rss_mib"]) * 2**20 / extra_xml, 3)}
        unfinished.append(row)
    return {"contenders": out, "wall_vs_1_worker": speedups, "unfinished": unfinished, "steady_spread": STEADY_SPREAD}


# ------------------------------------------------------------------------------------------ the plot

def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    keys = ("peak_rss_mib", "cpu_s", "wall_s")
    colours = {}
    for label, entry in result["summary"]["contenders"].items():
        sizes = sorted(entry["sizes"].values(), key=lambda c: c["xml_bytes"])
        xml = [c["xml_bytes"] / 1e6 for c in sizes]
        for ax, key in zip(axes, keys):
            line, = ax.plot(xml, [c[key] / (1024 if key == "peak_rss_mib" else 1) for c in sizes], "o-", label=label)
            colours[label] = line.get_color()
    inputs = result["inputs"]
    for u in result["summary"].get("unfinished", []):  # where a run stood when it stopped: a lower bound
        if u["contender"] in colours and u["contender"] != WIKIEXTRACTOR:
            xml = inputs[str(u["size"])]["xml_bytes"] / 1e6
            for ax, key in zip(axes, keys):
                ax.plot([xml], [u[key] / (1024 if key == "peak_rss_mib" else 1)], "^", mfc="none",
                        color=colours[u["contender"]], markersize=9,
                        label=f"{u['contender']} x{u['size']}: stopped, not finished" if key == keys[0] else None)
    for label, rec in result.get("recorded_elsewhere", {}).items():
        for size, cell in rec.items():
            xml = inputs[size]["xml_bytes"] / 1e6 if size in inputs else cell["xml_mb"]
            axes[0].plot([xml], [cell["peak_rss_mib"] / 1024], "x", color=colours.get(label, "red"), markersize=10,
                         label=f"{label} x{size}: did not finish (a record, not run here)")
    for ax, title in zip(axes, ("peak RSS of the process tree (GiB)", "CPU seconds (whole tree)", "wall seconds")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("MB of XML in the dump")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("enwiki 206-page excerpt replicated with new anchor texts: corpus job vs wikiextractor", fontsize=10)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------ main

# What the issue recorded for the job as it was before the two-pass rewrite at x64; never re-run here
# (it took 21 of the machine's 24 GB): shown beside the measurements, labelled as a record.
ISSUE_RECORD = {
    "old job, 1 worker": {
        "64": {"peak_rss_mib": 21 * 1024, "xml_mb": 390.0, "finished": False, "cpu_s": None,
               "source": "recorded when the job as it was before the two-pass design was first run at x64: it "
                         "reached 21 GB of the machine's 24 GB and had not finished after 25 min; not re-run by this "
                         "script (it would take the shared machine down)"},
    },
}


def machine() -> dict:
    memory = round(os.sysconf("SC_PHYS_PAGES") * PAGE_SIZE / 2**30)
    return {"cpus": os.cpu_count(), "memory_gib": memory, "python": sys.version.split()[0],
            "platform": f"{os.uname().machine} Linux machine, {memory} GiB RAM, shared with other work (CPU-time "
                        "ratios are the robust figures; the load average is recorded with every run)"}


def split_job_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the script's own arguments, the job's flags: those after ``--``)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def main(argv: list[str] | None = None) -> int:
    argv, extra = split_job_flags(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP, help="the dump to replicate")
    parser.add_argument("--sizes", default="8,64", help="copies of --dump, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender at sizes <= --repeat_until")
    parser.add_argument("--repeat_until", type=int, default=8)
    parser.add_argument("--repeat_large", type=int, default=1, help="runs per contender at larger sizes")
    parser.add_argument("--job", action="append", default=[],
                        help="NAME=CODE:WORKERS[:FLAGS], e.g. 'new job=.:1,2', 'old job=main:1' or 'hyperlinks only=.:1:"
                             "--labels.hyperlinks_only true' (CODE: '.' or a git ref; FLAGS: this job's own flags)")
    parser.add_argument("--max_size", action="append", default=[],
                        help="NAME=N: never run job NAME above xN (e.g. 'old job=8')")
    parser.add_argument("--no_wikiextractor", action="store_true")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="replicated dumps, exported checkouts and outputs (outside the repository)")
    parser.add_argument("--rss_limit_gb", type=float, default=12.0,
                        help="kill a run whose process tree passes this much RSS (recorded as killed)")
    parser.add_argument("--exact_bytes", action="store_true",
                        help="encode every join request to count shuffled bytes (WIKIEDM_JOIN_BYTES_SAMPLE=1), not a "
                             "1-in-16 sample: exact bytes on a small dump, at some CPU (do not time such runs); "
                             "for a CODE whose job has key joins (the old job): the job as it is now has none")
    parser.add_argument("--probe_during_s", type=float, default=0.0,
                        help="also time the speed probe this often while a run runs (0: never); kept in the results "
                             "for reading, not used in the figures (such a probe shares the machine with the run)")
    parser.add_argument("--json", type=Path, help="results file: runs are added to the ones already in it")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",")]
    if args.exact_bytes:
        os.environ["WIKIEDM_JOIN_BYTES_SAMPLE"] = "1"  # the jobs inherit it
    contenders = parse_jobs(args.job, args.max_size, args.cache)
    if not args.no_wikiextractor:  # right after the first job (its 1-worker run): the two a round compares
        contenders.insert(1, Contender(WIKIEXTRACTOR, None, None, 1))
    if not contenders:
        parser.error("nothing to run: give --job or leave wikiextractor on")
    previous = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    runs: list[dict] = previous.get("runs", [])
    session = max((r["session"] for r in runs), default=0) + 1
    inputs = {str(s): replicated_input(args.dump, s, args.cache) for s in sizes}
    work = Path(tempfile.mkdtemp(prefix="runs-", dir=args.cache))
    rss_limit = int(args.rss_limit_gb * 2**30)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"session {session}: {[c.label for c in contenders]} on sizes {sizes}; logs in {work}", flush=True)
    rounds = max(args.repeat, args.repeat_large)
    for i in range(rounds):
        for size in sizes:
            if i >= (args.repeat if size <= args.repeat_until else args.repeat_large):
                continue
            for c in contenders:
                if c.max_size is not None and size > c.max_size:
                    continue
                row = run_one(c, size, inputs[str(size)], work, extra, rss_limit, args.probe_during_s or None)
                runs.append({"session": session, "round": i, "started": started, "job_flags": extra,
                             "exact_bytes": args.exact_bytes, **row})
                if args.json:  # after every run: a long session interrupted keeps what it measured
                    write_results(args.json, previous, runs, inputs, args.dump)
    result = write_results(args.json, previous, runs, inputs, args.dump) if args.json else {
        "summary": summarise(runs, inputs), "inputs": inputs, "recorded_elsewhere": ISSUE_RECORD}
    print(json.dumps(result["summary"]["wall_vs_1_worker"]))
    for label, entry in result["summary"]["contenders"].items():
        print(label, json.dumps(entry.get("marginal", {})))
    if args.plot:
        plot(result, args.plot)
    return 0 if all(r["rc"] == 0 for r in runs if r["session"] == session) else 1


# The assumptions of the estimates (``estimates``): each one is stated here and shown beside them.
ASSUMED = {
    "enwiki_xml_gb": 95.0,  # pages-articles-multistream, ~23M pages, ~22 GB bz2 (Wikimedia's published sizes)
    "dataflow_cpu_factor": 2.0,  # Dataflow vCPU-s per DirectRunner CPU-s here (serialisation, shuffle I/O, tails)
    "usd_per_vcpu_hour": 0.071,  # n2-standard-4 on Dataflow batch, us-central1: $0.284/h for 4 vCPU, 16 GB, 50 GB disk
    "usd_per_shuffle_gb": 0.011,  # Dataflow Shuffle, batch
    "dataflow_vcpus": 128,  # 32 n2-standard-4 workers
    "dataflow_utilisation": 0.7,
    "dataflow_startup_and_tail_h": 0.25,
    "workstation_xml_gb": 15.0,  # a mid-sized wiki (e.g. dewiki, frwiki: 15-25 GB of XML)
    "workstation_cores": 16,
    "workstation_ram_gb": 64,
    "workstation_parallel_efficiency": 0.7,  # of 16 worker processes on 16 cores
}


def estimates(summary: dict, inputs: dict) -> dict:
    """What the measured per-page rates imply for full English Wikipedia on Dataflow and for a 15 GB-XML wiki
    on a 16-core, 64 GB workstation: estimates, from the marginal figures between the two largest sizes
    each job ran at and the assumptions in ``ASSUMED``."""
    out: dict[str, dict] = {}
    contenders = summary["contenders"]
    for label, entry in contenders.items():
        name, _, workers = label.rpartition(", ")
        if workers != "1 worker" or not entry.get("marginal") or entry.get("contender_flags"):
            continue  # a contender with its own flags is a comparison (the job without its labeller), not a user's run
        sizes = sorted(entry["sizes"], key=int)
        a, b = sizes[-2], sizes[-1]
        m = entry["marginal"][f"x{a}->x{b}"]
        xml_per_page = (inputs[b]["xml_bytes"] - inputs[a]["xml_bytes"]) / (inputs[b]["pages"] - inputs[a]["pages"])
        cpu_s_per_xml_mb = m["cpu_ms_per_page"] / 1000 / (xml_per_page / 1e6)
        big = entry["sizes"][b]
        shuffled_per_xml_byte = big.get("shuffled_kib_per_page", 0) * 1024 / xml_per_page
        run_files_per_xml_byte = big.get("run_file_kib_per_page", 0) * 1024 / xml_per_page
        est = {"from": f"{label}, x{a} -> x{b}", "xml_bytes_per_page": round(xml_per_page),
               "run_file_bytes_per_xml_byte": round(run_files_per_xml_byte, 3),
               "cpu_s_per_xml_mb": round(cpu_s_per_xml_mb, 3),
               "ram_bytes_per_xml_byte": m["ram_bytes_per_xml_byte"],
               "shuffled_bytes_per_xml_byte": round(shuffled_per_xml_byte, 3)}
        xml_mb = ASSUMED["enwiki_xml_gb"] * 1000
        cpu_h = xml_mb * cpu_s_per_xml_mb / 3600
        vcpu_h = cpu_h * ASSUMED["dataflow_cpu_factor"]
        shuffle_gb = shuffled_per_xml_byte * ASSUMED["enwiki_xml_gb"]
        compute_usd = vcpu_h * ASSUMED["usd_per_vcpu_hour"]
        shuffle_usd = shuffle_gb * ASSUMED["usd_per_shuffle_gb"]
        est["enwiki_dataflow"] = {
            "cpu_hours_here": round(cpu_h, 1), "vcpu_hours": round(vcpu_h, 1), "shuffle_gb": round(shuffle_gb),
            # written once and read once through the output bucket (GCS), not through Dataflow Shuffle
            "run_files_gb": round(run_files_per_xml_byte * ASSUMED["enwiki_xml_gb"]),
            "compute_usd": round(compute_usd, 1), "shuffle_usd": round(shuffle_usd, 1),
            "total_usd": round(compute_usd + shuffle_usd, 1),
            "wall_hours": round(vcpu_h / (ASSUMED["dataflow_vcpus"] * ASSUMED["dataflow_utilisation"])
                                + ASSUMED["dataflow_startup_and_tail_h"], 1)}
        ws_xml_mb = ASSUMED["workstation_xml_gb"] * 1000
        ws_cpu_h = ws_xml_mb * cpu_s_per_xml_mb / 3600
        workstation = {"cpu_hours": round(ws_cpu_h, 1), "wall_hours_1_worker": round(ws_cpu_h, 1),
                       "wall_hours": round(ws_cpu_h / (ASSUMED["workstation_cores"]
                                                       * ASSUMED["workstation_parallel_efficiency"]), 1)}
        one = big["peak_rss_mib"] * 2**20
        ram_1 = one + m["ram_bytes_per_xml_byte"] * (ws_xml_mb * 1e6 - inputs[b]["xml_bytes"])
        workstation["ram_gb_1_worker"] = round(ram_1 / 1e9, 1)
        workstation["fits_in_ram_1_worker"] = workstation["ram_gb_1_worker"] <= ASSUMED["workstation_ram_gb"]
        if m["ram_bytes_per_xml_byte"] > 0:  # the largest dump whose run fits in the workstation's RAM, 1 worker
            workstation["largest_xml_gb_1_worker"] = round(
                ((ASSUMED["workstation_ram_gb"] * 1e9 - one) / m["ram_bytes_per_xml_byte"] + inputs[b]["xml_bytes"])
                / 1e9, 1)
        for u in summary.get("unfinished", []):  # a larger run that did not finish bounds the marginal from below
            for step, bound in (u.get("ram_bytes_per_xml_byte_at_least") or {}).items():
                if u["contender"] == label:
                    workstation["ram_gb_1_worker_at_least"] = round(
                        (u["peak_rss_mib"] * 2**20 + bound * (ws_xml_mb * 1e6 - inputs[str(u["size"])]["xml_bytes"]))
                        / 1e9, 1)
                    workstation["ram_bound_from"] = f"{label}, {step} (did not finish)"
        two = contenders.get(f"{name}, 2 workers", {}).get("sizes", {}).get(b)
        if two:
            per_worker = two["peak_rss_mib"] * 2**20 - one
            workstation["ram_bytes_per_extra_worker"] = round(per_worker)
            workstation["ram_gb"] = round((ram_1 + (ASSUMED["workstation_cores"] - 1) * per_worker) / 1e9, 1)
            workstation["fits_in_ram"] = workstation["ram_gb"] <= ASSUMED["workstation_ram_gb"]
        est["workstation"] = workstation
        out[name] = est
    return {"assumed": ASSUMED, "by_job": out}


def write_results(path: Path, previous: dict, runs: list[dict], inputs: dict, dump: Path) -> dict:
    all_inputs = {**previous.get("inputs", {}), **{k: {kk: vv for kk, vv in v.items() if kk not in ("path", "index")}
                                                   for k, v in inputs.items()}}
    result = {
        "what": "the corpus job and wikiextractor --links --processes 1 on the 206-page enwiki excerpt replicated "
                "with new page ids, titles and anchor texts per copy, as a bz2 multistream dump with its index; "
                "peak RSS and CPU of the whole process tree",
        "dump": dump.name,
        "machine": machine(),
        "inputs": all_inputs,
        "summary": summarise(runs, all_inputs),
        "recorded_elsewhere": ISSUE_RECORD,
        "estimates": None,
        "runs": runs,
    }
    result["estimates"] = estimates(result["summary"], all_inputs)
    if path:
        path.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(main())
