"""Write docs/benchmarks.md from benchmarks/results/*.json: every measured figure of the manual has one source.

    python benchmarks/make_docs.py                 # (re)write docs/benchmarks.md
    python benchmarks/make_docs.py --check         # exit 1 if docs/benchmarks.md differs from the results files

One renderer per results file, chosen by the file's stem (``@renders("pipeline")``); a file no renderer
claims gets the generic one, which lists its top-level scalar figures, so a new results file shows up
without editing this script and a dedicated renderer can be added later. The page opens with the suite's
table (benchmarks/suite.py): which script writes which file, and which of them `make bench` runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
OUTPUT = REPO / "docs" / "benchmarks.md"


def _load_suite():
    """benchmarks/suite.py, also when this file is loaded by path (tests) rather than run as a script."""
    spec = importlib.util.spec_from_file_location("benchmark_suite", Path(__file__).resolve().parent / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


suite = _load_suite()

# Where a file does not record its machine: every such file here was written on the project's development
# machine (the files that do record it say the same).
DEFAULT_MACHINE = "2-core x86-64 CPU development machine shared with other work (not recorded in the file)"


@dataclass
class Section:
    title: str
    script: str
    machine: str
    input: str
    body: str  # Markdown: a table and a few notes


Renderer = Callable[[str, dict], Section]  # (file stem, the file's JSON)
RENDERERS: dict[str, Renderer] = {}  # sections follow benchmarks/suite.py's order, then other stems alphabetically


def renders(*stems: str) -> Callable[[Renderer], Renderer]:
    def register(fn: Renderer) -> Renderer:
        for stem in stems:
            RENDERERS[stem] = fn
        return fn
    return register


# ---------------------------------------------------------------------------------------------- formatting

def num(x: Any, digits: int = 1) -> str:
    """A figure as shown: thousands separators, ``digits`` decimals (none for integers)."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def ratio(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"×{x:.{digits}f}"


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def dump_name(path: str) -> str:
    return Path(str(path)).name


_COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def plain(text: str) -> str:
    """A recorded note as the manual may show it: no commit hashes, no paths of the machine it ran on."""
    # asides naming the code's version or the team's own work go, with every commit hash
    text = re.sub(r"\b[0-9a-f]{7,40}\b(\s*\([^()]*\))?", "", text)
    text = _COMMIT.sub("", re.sub(r"\s*\([^()]*(\b[0-9a-f]{7,40}\b|helper)[^()]*\)", "", text))
    text = re.sub(r",?\s*under /[^\s;,]+", "", text)
    text = re.sub(r"^\s*(\w+):\s*[,;]?\s*", r"\1: ", text)
    return re.sub(r"\s{2,}", " ", text).strip(" ;,")


def machine_of(data: dict) -> str:
    for key in ("machine", "machine_load", "device"):
        value = data.get(key)
        if isinstance(value, str):
            return plain(value)
        if isinstance(value, dict):
            cpus = value.get("cpus")
            load = value.get("load_average_at_start") or (value.get("load_avg_at_start") or [None])[0]
            text = f"{cpus}-CPU {value.get('platform', 'machine')}" if cpus else str(value.get("platform", ""))
            return text + (f", load average {load:.1f} at start" if load is not None else "")
    return DEFAULT_MACHINE


# ----------------------------------------------------------------------------------------- the renderers

@renders("pipeline")
def render_pipeline(stem: str, data: dict) -> Section:
    res, rat = data["results"], data["ratios"]
    rows = [[name, num(res[key]["marginal_cpu_ms_per_page"]),
             num(res[key]["peak_rss_mib_x2"], 0), num(res[key]["peak_rss_mib_x8"], 0)]
            for name, key in (("whole corpus job", "job"), ("its extraction stage alone", "extraction"),
                              ("wikiextractor --links --processes 1", "wikiextractor"))]
    body = table(["", "marginal CPU ms per page", "peak RSS ×2 (MiB)", "peak RSS ×8 (MiB)"], rows)
    body += (f"\n\nWhole job / wikiextractor: **{ratio(rat['job_cpu_per_page_vs_wikiextractor'])}** CPU per page; "
             f"extraction alone / wikiextractor: **{ratio(rat['extraction_cpu_per_page_vs_wikiextractor'])}**. "
             "The job also resolves links, labels, tokenises and writes Parquet; wikiextractor only extracts.")
    shares = data.get("stage_breakdown", {}).get("shares", {})
    if shares:
        body += (f"\n\nWhere the job's CPU goes (cProfile of the ×8 run, "
                 f"{num(data['stage_breakdown'].get('profiled_seconds'))} s):\n\n")
        body += table(["stage", "share"], [[name, f"{100 * share:.0f}%"]
                                            for name, share in sorted(shares.items(), key=lambda kv: -kv[1])])
    sizes = " and ".join(f"×{s}" for s in data["sizes"])
    return Section("Corpus job vs wikiextractor: CPU per page", "benchmarks/bench_pipeline.py", machine_of(data),
                   f"{dump_name(data['dump'])} replicated {sizes} with new titles (marginal CPU per page "
                   f"between the sizes, so start-up cancels); DirectRunner, 1 worker; medians of "
                   f"{data['repeat']} runs", body)


@renders("extract")
def render_extract(stem: str, data: dict) -> Section:
    """Where the extraction's CPU goes. Its cost per page beside wikiextractor is pipeline.json's (the same
    timers, run beside the whole job): one source for that figure."""
    st = data["stages_x1_cpu_s"]
    total = st["read_dump"] + st["extract_total"]
    rows = [[label, num(st[key], 2), f"{100 * st[key] / total:.0f}%"]
            for label, key in (("read the dump (bz2, page splitting, XML)", "read_dump"),
                               ("pre-pass (templates, references, tables)", "prepass"),
                               ("parse, render and tidy", "render_tidy"))]
    body = table(["stage", "CPU s", "share"], rows)
    body += (f"\n\n{st['fast_path_articles']} of {st['articles']} articles rendered whole by the fast path "
             "([extraction.md](extraction.md#the-fast-path)). The extraction's CPU per page beside wikiextractor's: "
             "[pipeline.json](#corpus-job-vs-wikiextractor-cpu-per-page-pipelinejson).")
    return Section("Wikitext extraction: where its CPU goes", "benchmarks/bench_extract.py", machine_of(data),
                   f"{dump_name(data['dump'])} itself ({st['articles']} articles), in one process; Python "
                   f"{data.get('python', '?')}, mwparserfromhell {data.get('mwparserfromhell', '?')}", body)


@renders("labels")
def render_labels(stem: str, data: dict) -> Section:
    run = data
    rows = []
    for dump, d in run["dumps"].items():
        rows.append([dump_name(dump), num(d["hidden"]), num(d["recoverable"]),
                     num(d["recovered_of_hidden"], 3), num(d["recovered_of_recoverable"], 3),
                     num(d["precision"], 3)])
    t = run["totals"]
    rows.append(["**all**", num(t["hidden"]), num(t["recoverable"]), f"**{num(t['recovered_of_hidden'], 3)}**",
                 num(t["recovered_of_recoverable"], 3), f"**{num(t['precision'], 3)}**"])
    body = table(["dump", "hidden links", "recoverable", "found, of hidden", "found, of recoverable",
                  "precision"], rows)
    body += ("\n\nThe bench hides repeated links in a copy of each dump, runs the job, and scores the labels "
             "at the hidden spans. \"Recoverable\": the hidden surface is exactly an alias the job can know "
             "from the rest of the dump. The labeller's variant rules (case, plural, possessive) are on.")
    return Section("Missing-mention labels: links hidden from real dumps", "benchmarks/bench_labels.py",
                   machine_of(data), f"the {len(run['dumps'])} shared dump excerpts (`../shared/wikidumps`); one "
                   "run (label quality, not timing)", body)


@renders("parallel")
def render_parallel(stem: str, data: dict) -> Section:
    res = data["results"]
    rows = [[key.replace("_", " "), num(r["wall_s"]), num(r["cpu_s"]), num(r["peak_rss_mib"], 0)]
            for key, r in res.items()]
    body = table(["DirectRunner", "wall s", "CPU s", "peak RSS (MiB)"], rows)
    body += (f"\n\nWall time, 2 workers / 1: {ratio(data['speedup_wall_2_vs_1'])} (start-up dominates a file "
             f"this small); outputs identical: {num(data['outputs_identical'])}.")
    return Section("DirectRunner: 2 worker processes vs 1", "benchmarks/bench_parallel.py", machine_of(data),
                   f"{dump_name(data['dump'])} ({data['pages']} pages, read in {data['read_ranges']} byte "
                   f"ranges); medians of {data['repeat']}", body)


@renders("graph_build")
def render_graph_build(stem: str, data: dict) -> Section:
    rows = []
    for stage, label in (("graph", "building and translating the graph"), ("job", "a whole job after imports")):
        s = data["stages"][stage]
        rows.append([label, num(s["cpu_s_median"]["before"], 2), num(s["cpu_s_median"]["after"], 2),
                     ratio(s["ratio_after_before"])])
    body = table(["CPU s", "Beam's own DoFn-spec lookups", "memoised (pipelines/launch.py)", "ratio"], rows)
    body += f"\n\nOutputs identical: {num(data['same_outputs'])} ({data['files_compared']} files compared)."
    return Section("The corpus job's fixed cost", "benchmarks/bench_graph_build.py", machine_of(data),
                   f"{dump_name(data['dump'])}; both variants alternating in one process, medians of "
                   f"{data['repeat']}; Beam {data.get('beam', '?')}", body)


@renders("linker_quality")
def render_linker_quality(stem: str, data: dict) -> Section:
    rows = [[dump_name(d["dump"]), num(d["mentions"]), num(d["linker_acc@1"], 3), num(d["alias_prior_acc@1"], 3),
             num(d.get("linker_cross_fitted_acc@1"), 3), num(d["biencoder_acc@1"], 3)] for d in data["dumps"]]
    body = table(["dump", "validation mentions", "linker", "alias prior", "linker, 2-fold cross-fitted",
                  "bi-encoder alone"], rows)
    body += (f"\n\nLinker ≥ alias prior on all {len(data['dumps'])} dumps: "
             f"{num(data['linker_never_below_prior'])}. The bi-encoder is tiny and trained {data['steps']} steps "
             "on the corpus's own hyperlinks; the linker combines it with the alias prior (docs/linker.md).")
    return Section("Linking accuracy@1 on every shared dump", "benchmarks/bench_linker_quality.py",
                   machine_of(data), f"the validation hyperlinks of each shared dump's corpus (at most "
                   f"{data['limit']:,} mentions)", body)


@renders("linker")
def render_linker(stem: str, data: dict) -> Section:
    rows = [[d["model"], num(d["mentions_per_s/biencoder"]), num(d["mentions_per_s/biencoder+crossencoder_top10"], 2),
             num(d["entities_encoded_per_s"])] for d in data["linking"]]
    body = table(["bi-encoder", "mentions/s, bi-encoder", "mentions/s, + cross-encoder top 10",
                  "entities encoded/s"], rows)
    s = data["search"]
    body += (f"\n\nSearch over {num(s['entities'])} entities × {s['dim']}: exact {num(s['exact_queries_per_s'], 0)} "
             f"queries/s, HNSW {num(s['hnsw_queries_per_s'], 0)} queries/s "
             f"({ratio(s['hnsw_queries_per_s'] / s['exact_queries_per_s'], 1)}), top-1 agreement "
             f"{num(s['top1_agreement'], 3)}.")
    threads = data["machine"].get("torch_threads")
    return Section("Linker throughput", "benchmarks/bench_linker.py", machine_of(data),
                   f"the sample corpus's entities and mentions; {threads} torch thread", body)


@renders("linker_memory")
def render_linker_memory(stem: str, data: dict) -> Section:
    rows = [[num(s["alias_rows"]), num(s["entities"]), num(s["worker_now"]["anon_growth_mb"]),
             num(s["worker_now"]["file_backed_growth_mb"], 0), num(s["launcher_build"]["anon_growth_mb"], 0),
             f"{100 * s['hyperlinks_covered_by_top_64']:.0f}%"] for s in data["sizes"]]
    body = table(["alias rows", "entities", "worker private MB", "worker mapped MB (page cache, shared)",
                  "launcher build private MB", "hyperlinks covered by top-64 aliases"], rows)
    return Section("Linking worker memory vs alias-table size", "benchmarks/bench_linker_memory.py",
                   machine_of(data), f"synthetic enwiki-shaped alias tables; {num(data['lookups_per_run'])} "
                   f"lookups per run, {data['repeats']} repeats", body)


def trainer_input(data: dict) -> str:
    m = data["model"]
    return (f"`{data['preset']}` preset (d {m['d_model']}, {m['lower_layers']} + {m['upper_layers']} layers "
            f"per stack), {num(m['entities'])} × {m['entity_dim']} table, {m['batch']} × {m['seq_len']} "
            f"tokens, {m['mentions']} mentions per sequence, {data['dtype']}, {m['threads']} thread; "
            f"models stepped in turn, medians of {m['rounds']} rounds")


@renders("trainer")
def render_trainer(stem: str, data: dict) -> Section:
    m = data["model"]
    rows = []
    for key, label in (("edmem_rows", "EDMem, table split by rows (1 rank)"),
                       ("edmem", "EDMem, replicated table (as under ZeRO)"),
                       ("edmem_dense_lm", "EDMem, replicated table, LM loss over the whole logit matrix")):
        v = m.get(key)
        if not isinstance(v, dict) or "cpu_time_ratio" not in v:
            continue
        cpu = ratio(v["cpu_time_ratio"])
        rows.append([label, f"**{cpu}**" if key == "edmem_rows" else cpu, ratio(v["step_time_ratio"]),
                     ratio(v.get("peak_memory_ratio"))])
    body = table(["variant / the same BART without memory", "CPU time", "wall time", "peak memory"], rows)
    geo = m["flops"]
    body += ("\n\nWhat the matrix products alone predict (exact softmax over the whole table), were the memory's "
             "products and BART's to run at the same FLOP/s:\n\n")
    body += table(["geometry", "BART GFLOP", "memory GFLOP", "EDMem / BART predicted"],
                  [[name, num(g["bart"] / 1e9, 0), num(g["memory"] / 1e9, 1), ratio(g["ratio_bound"])]
                   for name, g in (("this benchmark", geo["this_geometry"]),
                                   ("the paper (BART-large, 1M × 256)", geo["paper_geometry"]))])
    body += ("\n\nThe prediction is not a floor: BART's step also spends time outside matrix products (softmax, "
             "normalisation, the optimizer) that the memory adds little to, so a measured ratio a little under "
             "it means the memory costs what its products cost and nothing more.")
    el = data.get("el_loss")
    if el:
        body += (f"\n\nEntity-linking loss over {num(el['entities'])} × {el['entity_dim']} entities, "
                 f"{el['mentions']} mentions: blocked softmax {ratio(1 / el['peak_memory_ratio_dense_over_blocked'])} "
                 f"the dense peak memory, {ratio(el['time_ratio_blocked_over_dense'])} its time.")
    lm = data.get("lm_loss")
    if lm:
        body += (f"\n\nLM loss over {num(lm['tokens'])} tokens, vocabulary {num(lm['vocab'])}, d {lm['d_model']}: "
                 f"chunked {ratio(1 / lm['peak_memory_ratio_dense_over_chunked'])} the dense peak memory, "
                 f"{ratio(lm['time_ratio_chunked_over_dense'])} its time.")
    return Section("EDMem step vs the same BART", "benchmarks/bench_trainer.py", machine_of(data),
                   trainer_input(data), body)


@renders("trainer_lm_loss_cpu")
def render_trainer_lm_loss(stem: str, data: dict) -> Section:
    """An A/B of two EDMem variants: only their ratio to each other is read from this file."""
    m = data["model"]
    chunked, dense, bart = m["edmem"], m["edmem_dense_lm"], m["bart"]
    body = table(["EDMem step, chunked / dense LM loss", "CPU time", "wall time", "peak memory"],
                 [["replicated table", ratio(chunked["cpu_s"] / dense["cpu_s"]),
                   ratio(chunked["step_s"] / dense["step_s"]), ratio(chunked["peak_bytes"] / dense["peak_bytes"])]])
    body += (f"\n\nPeak memory {num(chunked['peak_bytes'] / 2**30, 2)} vs {num(dense['peak_bytes'] / 2**30, 2)} GiB. "
             "The run stepped BART beside the two variants, but its EDMem / BART ratios are not the step's cost: "
             f"under that load a BART step took {num(bart['step_s'])} s of wall time and {num(bart['cpu_s'])} CPU-s, "
             "several times a quiet run's, and contention does not slow both models alike. The step's cost is "
             "[trainer.json's](#edmem-step-vs-the-same-bart-trainerjson), measured on the quiet machine.")
    return Section("EDMem step: chunked vs dense LM loss", "benchmarks/bench_trainer.py", machine_of(data),
                   trainer_input(data), body)


@renders("memory")
def render_memory(stem: str, data: dict) -> Section:
    rows = []
    for stage in ("zero2", "zero3"):
        s = data["summary"][stage]
        rows.append([stage.replace("zero", "ZeRO-"), ratio(s["step_time_ratio_rows_over_replicated"]),
                     f"{ratio(s['bytes_ratio_rows_over_replicated'], 4)} ({num(s['rows_bytes_per_step'] / 2**20)}"
                     f" vs {num(s['replicated_bytes_per_step'] / 2**20, 0)} MiB)",
                     ratio(s["table_peak_ratio_rows_over_replicated"])])
    body = table(["rows / replicated", "step time", "bytes moved per rank per step", "table's peak memory per rank"],
                 rows)
    k = data["summary"]["table_peak_per_rank_k_over_1"]
    body += (f"\n\nTable memory per rank, {data['ranks']} ranks / 1: rows {ratio(k['rows'])} "
             f"(ideal {ratio(k['ideal_rows'])}), replicated {ratio(k['replicated'])}.")
    return Section("Entity table split by rows vs replicated", "benchmarks/bench_memory.py",
                   data.get("device", DEFAULT_MACHINE),
                   f"{num(data['entities'])} × {data['entity_dim']} table, {data['ranks']} CPU ranks (gloo), tiny "
                   f"transformer, {data['mentions']} mentions per rank per step, medians of {data['steps']} steps",
                   body)


@renders("ablation", "ablation_small-long")
def render_ablation(stem: str, data: dict) -> Section:
    def cell(metric: dict, digits: int = 3) -> str:
        return "–" if metric.get("mean") is None else f"{metric['mean']:.{digits}f} ± {metric['ci']:.{digits}f}"

    rows = [[v["dump"], v["corpus"], v["model"], len(v["seeds"]), cell(v["mention_lm_loss"]),
             cell(v["other_lm_loss"]), cell(v["el_acc"])] for v in data["summary"]["variants"]]
    body = table(["dump", "corpus", "model", "seeds", "mention-token LM loss", "other-token LM loss", "EL acc@1"], rows)
    baselines = [f"{dump}: {c['el_majority_baseline']['el_acc']:.3f} ({c['el_majority_baseline']['targets']} targets)"
                 for dump, c in data["corpora"].items() if c.get("el_majority_baseline")]
    if baselines:
        body += "\n\nEL acc@1 of always answering the entity most linked in training: " + "; ".join(baselines) + "."
    body += ("\n\nMean ± half-width of the 95% Student t interval over seeds. Setup, paired effects and what the "
             "figures support: [ablation.md](ablation.md).")
    cfg = data["config"]
    return Section(f"Ablation, config `{cfg['name']}`: entity memory and missing-mention labels",
                   "benchmarks/bench_ablation.py", machine_of(data),
                   f"{', '.join(cfg['dumps'])}; {cfg['steps']} steps of {cfg['overrides'][1]} passages per run, "
                   f"seeds {', '.join(map(str, cfg['seeds']))}; {len(data['runs'])} of {data['grid_points_planned']} "
                   f"grid points", body)


def render_generic(stem: str, data: Any) -> Section:
    """Any results file: its top-level scalar figures (numbers, strings, booleans)."""
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, (dict, list)) and v is not None] \
        if isinstance(data, dict) else []
    shown = [(k, v) for k, v in scalars if k not in ("what", "machine", "device", "input", "dump")]
    body = table(["figure", "value"], [[f"`{k}`", plain(v) if isinstance(v, str) else num(v, 3)]
                                       for k, v in shown]) if shown else \
        "(no top-level scalar figures: a dedicated renderer in benchmarks/make_docs.py would show this file)"
    what = data.get("what") if isinstance(data, dict) else None
    if isinstance(what, str):
        body = plain(what) + "\n\n" + body
    source = (data.get("input") or data.get("dump") or "not recorded in the file") if isinstance(data, dict) else ""
    return Section("", "", machine_of(data) if isinstance(data, dict) else DEFAULT_MACHINE, dump_name(source)
                   if isinstance(source, str) and "/" in source else str(source), body)


# ---------------------------------------------------------------------------------------------- the page

HEADER = """\
# Benchmarks

<!-- Generated by benchmarks/make_docs.py from benchmarks/results/*.json: edit those, not this file. -->

Every measured figure of this manual, one section per results file. `make bench` re-runs the benchmarks the
table below marks (`python benchmarks/suite.py NAME ...` runs some of them) and rewrites this page; `make docs`
rewrites it from the files as they are. Each section names the script that wrote the file, the machine and the
input. Timings from a 2-core machine shared with other work are noisy: the ratios, measured side by side in one
run, are the stable part. Earlier runs are in the files' git history, the changes they measured in
[CHANGELOG.md](../CHANGELOG.md).
"""


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def script_for(stem: str) -> str:
    bench = suite.by_name().get(stem)
    return bench.script if bench else "not recorded"


def suite_index(headings: dict[str, str]) -> str:
    """The suite as a table: what measures what, the file it writes (linked to its section), make bench or not."""
    rows = []
    for bench in suite.SUITE:
        heading = headings.get(bench.name)
        results = f"[`{bench.name}.json`](#{slug(heading)})" if heading else f"`{bench.name}.json` (not measured yet)"
        script = f"`{bench.script}`" + (" (with " + ", ".join(f"`{h}`" for h in bench.helpers) + ")"
                                        if bench.helpers else "")
        rows.append([bench.group, bench.measures, script, results, f"no: {bench.skip}" if bench.skip else "yes"])
    tools = "\n".join(f"- `benchmarks/{name}`: {what}" for name, what in suite.TOOLS.items())
    return ("## What measures what\n\n"
            + table(["part", "measures", "script", "results", "`make bench`"], rows)
            + "\n\nThe exact command of each: `python benchmarks/suite.py --list`. The other scripts of "
            f"`benchmarks/`:\n\n{tools}\n")


def render_all(results_dir: Path = RESULTS) -> str:
    files = {p.stem: p for p in sorted(results_dir.glob("*.json"))}
    order = [b.name for b in suite.SUITE]
    stems = sorted(files, key=lambda s: (order.index(s) if s in order else len(order), s))
    headings, sections = {}, []
    for stem in stems:
        data = json.loads(files[stem].read_text())
        section = RENDERERS.get(stem, render_generic)(stem, data)
        title = section.title or stem.replace("_", " ").capitalize()
        headings[stem] = f"{title} (`{stem}.json`)"
        sections += [f"## {headings[stem]}\n",
                     f"Script: `{section.script or script_for(stem)}`. Machine: {section.machine}. "
                     f"Input: {section.input}.\n",
                     section.body.rstrip() + "\n"]
    return "\n".join([HEADER, suite_index(headings), *sections])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of results files")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the page to write")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    text = render_all(args.results)
    if args.check:
        if not args.output.exists() or args.output.read_text() != text:
            print(f"{args.output} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


@renders("pass2_source")
def render_pass2_source(stem: str, data: dict) -> Section:
    ms = data["cpu_ms_per_article"]
    rows = [["extract again (read, decompress, classify, extract)", num(ms["re_extract"], 2)],
            ["cache: write in pass 1 (pickle, zstd)", num(ms["cache_write"], 2)],
            ["cache: read in pass 2 (zstd, unpickle)", num(ms["cache_read"], 2)]]
    body = table(["where pass 2 gets its articles", "CPU ms per article"], rows)
    body += (f"\n\nCache write + read / extracting again: {ratio(data['cache_write_plus_read_over_re_extract'], 3)}; "
             f"the cache takes {num(data['cache_bytes_per_dump_byte'], 2)} bytes per compressed dump byte. The "
             f"corpus job's default (`--article_cache true`) is the cheaper: {data['cheaper'].replace('_', ' ')}.")
    return Section("Pass 2's articles: extract again or read pass 1's cache", "benchmarks/bench_pass2_source.py",
                   machine_of(data), f"{dump_name(data['dump'])} ({data['articles']} articles); CPU seconds, "
                   f"medians of {data['repeat']} interleaved rounds", body)


@renders("versions")
def render_versions(stem: str, data: dict) -> Section:
    """bench_versions.py: two versions of the job at once, one per core; new / base per pair."""
    rows = []
    for size, s in data["summary"].items():
        pairs = ", ".join(ratio(r, 3) for r in s["ratios"])
        rows.append([f"×{size}", s["pairs"], num(s["cpu_s_median"]["base"]), num(s["cpu_s_median"]["new"]),
                     f"**{ratio(s['ratio_median'], 3)}** ({pairs})", num(s["peak_rss_mib_median"]["base"], 0),
                     num(s["peak_rss_mib_median"]["new"], 0),
                     " / ".join(num(s.get("run_file_kib_per_page", {}).get(v)) for v in ("base", "new")),
                     "yes" if s["parquet_identical_in_every_pair"] else "**no**"])
    body = table(["size", "pairs", "CPU s, base (median)", "CPU s, new (median)", "new / base (median; per pair)",
                  "peak RSS base (MiB)", "peak RSS new (MiB)", "run files KiB per page, base / new",
                  "Parquet byte-identical in every pair"], rows)
    versions = data["versions"]
    body += (f"\n\nBase: {versions['base']['commit'][:12]} (`{versions['base']['ref']}`); new: "
             f"{versions['new']['commit'][:12]} (`{versions['new']['ref']}`). The two run at the same time, each pinned "
             "to a core of its own, cores swapped from one pair to the next, so that both see the same phase of the "
             "shared machine (a before/after timing minutes apart can move by ×1.5 with no change of code).")
    return Section("Versions: the corpus job of two commits, run side by side", "benchmarks/bench_versions.py",
                   machine_of(data), f"{dump_name(data['dump'])} replicated ({', '.join(f'×{s}' for s in data['summary'])}); "
                   f"DirectRunner, 1 worker; flags {' '.join(data['job_flags'])}", body)


@renders("tokenizer")
def render_tokenizer(stem: str, data: dict) -> Section:
    """bench_tokenizer.py: an own-language tokenizer vs GPT-2's (tokens per character, a tiny-config step)."""
    per_char, corpus, step = data["tokens_per_character_held_out"], data["corpus"], data["tiny_step"]
    vocab = data["model_vocab_size"]
    rows = [[f"{label} ({num(vocab[key])} tokens)", num(per_char[key], 3), num(corpus[key]["passages"]),
             num(corpus[key]["characters_per_passage"], 0), num(step["median_step_s"][key], 3),
             num(step["characters_per_s"][key], 0)]
            for label, key in (("GPT-2 byte-level BPE (default)", "gpt2"), ("own byte-level BPE", "own"))]
    body = table(["tokenizer", "tokens per character (held out)", "passages", "characters per passage",
                  "tiny step (s, median)", "characters of text per s"], rows)
    body += (f"\n\nGPT-2 needs {ratio(data['gpt2_tokens_over_own'])} the tokens; a step with GPT-2's vocabulary takes "
             f"{ratio(step['gpt2_step_over_own_median_of_rounds'])} the time (median of {step['rounds']} back-to-back "
             f"pairs); the own tokenizer trains on {ratio(step['own_characters_per_s_over_gpt2'])} the text per second. "
             f"Step: {plain(step['config'])}.")
    return Section("A tokenizer of the corpus's own language vs GPT-2's", "benchmarks/bench_tokenizer.py",
                   machine_of(data), f"{data['dump']}; own vocabulary learnt by `wikiedm train-tokenizer` from its "
                   "train passages, tokens per character on its validation passages", body)


@renders("scale")
def render_scale_job(stem: str, data: dict) -> Section:
    """benchmarks/bench_scale.py: the job and wikiextractor at two sizes, whole process trees."""
    contenders = data["summary"]["contenders"]
    inputs = data["inputs"]
    rows = []
    for label, entry in contenders.items():
        for size, c in sorted(entry["sizes"].items(), key=lambda kv: int(kv[0])):
            loads = c.get("load_1min", [])
            rows.append([label, f"×{size}", num(c["pages"]), num(c["xml_bytes"] / 1e6, 0), c["runs"],
                         num(c["peak_rss_mib"], 0), num(c["cpu_s"]), num(c["cpu_ms_per_page"]), num(c["wall_s"], 0),
                         f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–"])
    for label, rec in data.get("recorded_elsewhere", {}).items():
        for size, c in rec.items():
            pages = inputs.get(size, {}).get("pages")
            xml_mb = inputs[size]["xml_bytes"] / 1e6 if size in inputs else c["xml_mb"]
            rows.append([f"{label} (not run here)", f"×{size}", num(pages), num(xml_mb, 0), "–",
                         f"≥ {num(c['peak_rss_mib'], 0)}", "did not finish", "–", "> 1,500", "–"])
    body = table(["", "size", "pages", "MB of XML", "runs", "peak RSS, process tree (MiB)", "CPU s", "CPU ms per page",
                  "wall s", "load (1 min)"], rows)
    flags: dict[str, set] = {}
    for run in data.get("runs", []):
        run_flags = [*(run.get("job_flags") or ()), *(run.get("contender_flags") or ())]
        if run_flags and run["contender"] != "wikiextractor":
            flags.setdefault(run["contender"], set()).add(f"×{run['size']}: `{' '.join(run_flags)}`")
    if flags:
        body += "\n\nFlags beyond `--keep_red_links true`: " + "; ".join(
            f"{label} {', '.join(sorted(f))}" for label, f in sorted(flags.items())) + "."
    unfinished = data["summary"].get("unfinished", [])
    if unfinished:
        body += ("\n\nRuns that did not finish (not in the medians; their figures are up to the moment they "
                 "stopped):\n\n")
        body += table(["", "size", "wall s", "CPU s", "peak RSS (MiB)", "RAM bytes per byte of XML, at least", "why"],
                      [[u["contender"], f"×{u['size']}", num(u["wall_s"], 0), num(u["cpu_s"]), num(u["peak_rss_mib"], 0),
                        "; ".join(f"{num(v, 2)} ({k.replace('x', '×').replace('->', ' → ')})"
                                  for k, v in (u.get("ram_bytes_per_xml_byte_at_least") or {}).items()) or "–",
                        "killed at the RSS limit" if u.get("killed_at_rss_limit") else plain(u.get("note") or
                                                                                            f"exit status {u['rc']}")]
                       for u in unfinished])
    notes = [plain(c["source"]) for rec in data.get("recorded_elsewhere", {}).values() for c in rec.values()]
    if notes:
        body += "\n\n" + " ".join(f"{n[0].upper()}{n[1:]}." for n in notes)
    marginal_rows = []
    for label, entry in contenders.items():
        for step, m in entry.get("marginal", {}).items():
            marginal_rows.append([label, step.replace("x", "×").replace("->", " → "),
                                  num(m["ram_bytes_per_xml_byte"], 2),
                                  num(m["anon_ram_bytes_per_xml_byte"], 2) if "anon_ram_bytes_per_xml_byte" in m else "–",
                                  num(m["cpu_ms_per_page"]),
                                  f"**{ratio(m['cpu_per_page_vs_wikiextractor'])}**"
                                  if m.get("cpu_per_page_vs_wikiextractor") is not None else "–",
                                  _same_round(m.get("cpu_per_page_vs_wikiextractor_same_round")),
                                  _steady_rounds(m.get("cpu_per_page_vs_wikiextractor_steady_rounds")),
                                  _speed_adjusted(m.get("cpu_per_page_vs_wikiextractor_speed_adjusted"))])
    if marginal_rows:
        body += "\n\nMarginal cost between two sizes (start-up cancels): what each further page or byte costs.\n\n"
        body += table(["", "between", "RAM bytes per byte of XML", "of it, anonymous (not mapped from files)",
                       "CPU ms per page", "CPU per page / wikiextractor's (medians per size)",
                       "the same, per round (median of rounds)",
                       "the same, rounds at one machine speed (median; per round: ratio, speed spread)",
                       "the same, each run's CPU at one speed (median; per round)"], marginal_rows)
        same_size = [f"{label} {ratio(c['cpu_vs_wikiextractor_same_round']['median'])} at ×{size}"
                     f" ({c['cpu_vs_wikiextractor_same_round']['rounds']} rounds)"
                     for label, entry in contenders.items()
                     for size, c in sorted(entry["sizes"].items(), key=lambda kv: int(kv[0]))
                     if c.get("cpu_vs_wikiextractor_same_round")]
        body += ("\n\nThe medians per size may mix rounds run at different machine speeds (a shared machine's "
                 "speed changes for minutes at a time); a round runs the job and wikiextractor back to back at each "
                 "size, so its ratio does not depend on a speed that changes between rounds.")
        if data["summary"].get("steady_spread"):
            body += (" A speed probe (a fixed pure-Python workload, timed right before and right after every "
                     "run, in the benchmark's own process) gives each run's speed (the mean of the two): a round counts as at one speed when its runs' speeds are within "
                     f"×{data['summary']['steady_spread']} of each other, and dividing each run's CPU by its speed "
                     "puts the runs of a round at one speed.")
        if same_size:
            body += " Whole job / wikiextractor at one size, CPU, per round (median): " + "; ".join(same_size) + "."
    speed = data["summary"].get("wall_vs_1_worker", {})
    if speed:
        body += "\n\nWall time / the same job with 1 worker: " + "; ".join(
            f"{label}: " + ", ".join(f"{ratio(v)} at {s.replace('x', '×')}" for s, v in by_size.items())
            for label, by_size in speed.items()) + "."
    shuffle_rows = [[label, f"×{size}", num(c["shuffled_elements_per_page"]), num(c["shuffled_kib_per_page"]),
                     num(c.get("run_file_records_per_page")) if "run_file_records_per_page" in c else "–",
                     num(c.get("run_file_kib_per_page")) if "run_file_kib_per_page" in c else "–",
                     num(c.get("output_kib_per_page"))]
                    for label, entry in contenders.items()
                    for size, c in sorted(entry["sizes"].items(), key=lambda kv: int(kv[0]))
                    if c.get("shuffled_elements_per_page") is not None]
    if shuffle_rows:
        body += ("\n\nWhat crosses shuffles, per page (the job's `volume/*` counters; bytes as Beam's coder encodes "
                 "them, requests from a 1-in-16 sample), what the two-pass job's pass 1 hands between its steps in "
                 "sorted run files instead (`volume/tables/*`: only the files' paths are shuffled), and the Parquet "
                 "written:\n\n")
        body += table(["", "size", "elements shuffled per page", "KiB shuffled per page", "run-file records per page",
                       "KiB of run files per page", "KiB of Parquet per page"], shuffle_rows)
    body += scale_estimates(data)
    sizes = " and ".join(f"×{s}" for s in sorted(inputs, key=int))
    return Section("Scale: the corpus job and wikiextractor on the excerpt replicated ×8 and ×64",
                   "benchmarks/bench_scale.py",
                   machine_of(data),
                   f"{dump_name(data['dump'])} replicated {sizes} with new titles and anchor texts per copy, written "
                   "as a bz2 multistream dump with its index (100 pages per stream); each contender reads the same "
                   "file; medians of the runs shown; peak RSS is the sum over the process tree", body)


def _steady_rounds(cell: dict | None) -> str:
    if not cell:
        return "–"
    median = f"**{ratio(cell['median'])}**" if cell["median"] is not None else "none at one speed"
    rounds = ", ".join(f"{ratio(r)} ({num(spread, 2)})" for r, spread in zip(cell["ratios"], cell["probe_spreads"]))
    return f"{median} ({cell['rounds']} of {cell['rounds'] + cell['unsteady_rounds']}: {rounds})"


def _speed_adjusted(cell: dict | None) -> str:
    if not cell:
        return "–"
    return f"**{ratio(cell['median'])}** ({', '.join(ratio(r) for r in cell['ratios'])})"


def _same_round(cell: dict | None) -> str:
    if not cell:
        return "–"
    return f"{ratio(cell['median'])} ({cell['rounds']} round{'s' if cell['rounds'] != 1 else ''})"


def scale_estimates(data: dict) -> str:
    """The estimates bench_scale.py derives from the measured rates (scale.json's ``estimates``), as tables."""
    est = data.get("estimates") or {}
    jobs, assumed = est.get("by_job", {}), est.get("assumed", {})
    if not jobs:
        return ""
    rows = []
    for name, e in jobs.items():
        d = e["enwiki_dataflow"]
        rows.append([name, e["from"].split(", ", 2)[-1].replace("x", "×").replace("->", "→"), num(e["cpu_s_per_xml_mb"], 2),
                     num(e["shuffled_bytes_per_xml_byte"], 2), num(d["vcpu_hours"], 0), num(d["shuffle_gb"]),
                     num(d["run_files_gb"]) if "run_files_gb" in d else "–",
                     f"${num(d['compute_usd'])} + ${num(d['shuffle_usd'])} = **${num(d['total_usd'])}**",
                     num(d["wall_hours"])])
    body = (f"\n\n**Estimates** from these rates (not measurements): full English Wikipedia "
            f"({num(assumed['enwiki_xml_gb'], 0)} GB of XML) on Dataflow, and a "
            f"{num(assumed['workstation_xml_gb'], 0)} GB-XML wiki on a {assumed['workstation_cores']}-core, "
            f"{assumed['workstation_ram_gb']} GB workstation. Assumed: Dataflow spends "
            f"{ratio(assumed['dataflow_cpu_factor'], 0)} the CPU measured here; "
            f"${assumed['usd_per_vcpu_hour']} per vCPU-hour (n2-standard-4), ${assumed['usd_per_shuffle_gb']} per "
            f"shuffled GB; {assumed['dataflow_vcpus']} vCPUs at {100 * assumed['dataflow_utilisation']:.0f}% plus "
            f"{num(assumed['dataflow_startup_and_tail_h'] * 60, 0)} min of start-up and tail; the workstation's "
            f"{assumed['workstation_cores']} worker processes at {100 * assumed['workstation_parallel_efficiency']:.0f}% "
            "efficiency; costs per MB of XML as on the excerpt.\n\n")
    body += table(["job", "rates from", "CPU s per MB of XML", "bytes shuffled per byte of XML",
                   "enwiki: Dataflow vCPU-hours", "shuffled GB", "run files GB (through the bucket)",
                   "cost (compute + shuffle)", "wall hours"], rows)
    rows = []
    for name, e in jobs.items():
        w = e["workstation"]
        ram = w.get("ram_gb")
        low = w.get("ram_gb_1_worker_at_least")
        rows.append([name, num(w["cpu_hours"]), num(w["wall_hours"]),
                     num(w["ram_gb_1_worker"]) + (f" (≥ {num(low)} from the unfinished larger run)" if low else ""),
                     num(ram) if ram is not None else "not measured (no 2-worker run)",
                     num(w.get("fits_in_ram", w["fits_in_ram_1_worker"])), num(w.get("largest_xml_gb_1_worker"))])
    body += "\n\n" + table(["job", f"{num(assumed['workstation_xml_gb'], 0)} GB of XML: CPU hours",
                            f"wall hours, {assumed['workstation_cores']} workers", "RAM, 1 worker (GB)",
                            f"RAM, {assumed['workstation_cores']} workers (GB)",
                            f"fits in {assumed['workstation_ram_gb']} GB",
                            f"largest GB of XML in {assumed['workstation_ram_gb']} GB, 1 worker"], rows)
    return body


@renders("learning", "learning_gpu", "learning_cpu-lr1e-3")
def render_learning(stem: str, data: dict) -> Section:
    """The positive control (benchmarks/bench_learning.py): held-out word metrics against the baselines."""
    def f(x: Any, digits: int = 3) -> str:
        return "–" if x is None else f"{x:.{digits}f}"

    def ci(x: Any) -> str:
        return "" if not x else f" [{x[0]:.3f}, {x[1]:.3f}]"

    base, e, b = data["baselines"], data["edmem"], data["bart"]
    rows = [["other-token loss (nats)", f(base["unigram_other_loss"]) + " (unigram)",
             f(e["other_lm_loss"]) + ci(e["other_lm_loss_ci"]), f(b["other_lm_loss"]) + ci(b["other_lm_loss_ci"])],
            ["mention-token loss (nats)", f(base["unigram_mention_loss"]) + " (unigram)", f(e["mention_lm_loss"]),
             f(b["mention_lm_loss"])],
            ["mention first-token acc", f(base["constant_first_token_acc"]) + " (constant)",
             f(e["mention_first_token_acc"]), f(b["mention_first_token_acc"])],
            ["EL acc@1, targets linked >= 20 times", f(base["el_most_frequent_frequent"]) + " (most frequent)",
             f(e["el_acc_frequent"]) + ci(e["el_acc_frequent_ci"]), "–"],
            ["EL acc@1, all targets", f(base["el_most_frequent"]) + " (most frequent)", f(e["el_acc"]), "–"]]
    body = table(["held-out figure", "baseline", "EDMem", "BART"], rows)
    for name, arm in data.get("arms", {}).items():  # the other EDMem arms (the ablation at the control's budget)
        m = arm["metrics"]
        if name != "labels-edmem" and m.get("el_acc") is not None:
            body += (f"\n\nEDMem arm `{name}` (same budget and evaluation): other-token loss {f(m['other_lm_loss'])}, "
                     f"EL acc@1 on targets linked >= 20 times {f(m['el_acc_frequent'])}{ci(m['el_acc_frequent_ci'])}.")
    verdict = data["pass"]
    body += (f"\n\nPass criteria (issue 30): other-token loss >= 0.5 nats below the unigram floor: "
             f"{'yes' if verdict['other_loss_below_unigram_by_0.5'] else 'no'}; EL acc@1 on frequent targets above the "
             f"most-frequent baseline with the interval excluding it: "
             f"{'yes' if verdict['el_frequent_above_most_frequent'] else 'no'}. Wall time per run (minutes): "
             + ", ".join(f"{k} {v / 60:.0f}" for k, v in data["wall_s_per_run"].items())
             + ". Word metrics, all validation passages, 95% bootstrap intervals: [ablation.md](ablation.md).")
    return Section(f"Positive control, grid `{data['grid']}`: learning beyond token frequencies",
                   "benchmarks/bench_learning.py", machine_of(data),
                   f"ukwiki excerpt, own BPE of {data['vocab_size']} ids; {data['steps']} steps of 16 passages per run, "
                   f"seed {data['seed']}", body)


if __name__ == "__main__":
    sys.exit(main())
