"""Write docs/benchmarks.md from benchmarks/results/*.json: every measured figure of the manual has one source.

    python benchmarks/make_docs.py                 # (re)write docs/benchmarks.md
    python benchmarks/make_docs.py --check         # exit 1 if docs/benchmarks.md differs from the results files

One renderer per results file, chosen by the file's stem (``@renders("pipeline")``); a file no renderer
claims gets the generic one, which lists its top-level scalar figures, so a new results file shows up
without editing this script and a dedicated renderer can be added later. Files that record a comparison
against an earlier version of the code (named after a commit, "before", or listed in ``ARCHIVED``) are
history: they are listed under "Archived runs" and not rendered (CHANGELOG.md tells the story).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
OUTPUT = REPO / "docs" / "benchmarks.md"

# Where a file does not record its machine: every such file here was written on the project's development
# machine (the files that do record it say the same).
DEFAULT_MACHINE = "2-core x86-64 CPU development machine shared with other work (not recorded in the file)"

# Comparisons of the code against a former version of itself (old vs new in one run): history, not a figure
# a user can reproduce from this checkout.
ARCHIVED = {
    "chunk_windows": "windowing, former vs current implementation",
    "extract_replay": "wikitext extraction, former vs current implementation",
    "read": "dump reading, former hand-written decompression adapters vs the codecs' own readers",
    "read_job_equivalence": "corpus job outputs before and after the decompression rewrite",
    "tokenize_label": "tokenising and label matching, former vs current implementation",
    "scale_replicated_bytes": "shuffled bytes of a former version of the job",
}
_COMMIT_OR_BEFORE = re.compile(r"(^|_)([0-9a-f]{7,40}|before)(_|$)")


@dataclass
class Section:
    title: str
    script: str
    machine: str
    input: str
    body: str  # Markdown: a table and a few notes


Renderer = Callable[[str, dict], Section]  # (file stem, the file's JSON)
RENDERERS: dict[str, Renderer] = {}
# Sections in this order; stems not listed follow alphabetically.
ORDER = ["pipeline", "extract", "labels", "scale_replicated", "scale_replicated_k8_bytes", "scale_synthetic",
         "scale_synthetic_bytes", "parallel", "graph_build", "linker_quality", "linker", "linker_memory",
         "trainer", "trainer_lm_loss_cpu", "memory", "learning", "learning_cpu-lr1e-3", "learning_gpu", "ablation", "ablation_small-long"]


def renders(*stems: str) -> Callable[[Renderer], Renderer]:
    def register(fn: Renderer) -> Renderer:
        for stem in stems:
            RENDERERS[stem] = fn
        return fn
    return register


def is_archived(stem: str) -> bool:
    return stem in ARCHIVED or bool(_COMMIT_OR_BEFORE.search(stem))


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
    load = str(data.get("machine_load", ""))
    machine = ("2-core CPU development machine with nothing else running" if load.startswith("quiet") else
               "2-core CPU development machine shared with other work" if load.startswith("loaded") else
               machine_of(data))
    return Section("Corpus job vs wikiextractor: CPU per page", "benchmarks/bench_pipeline.py", machine,
                   f"{dump_name(data['dump'])} replicated {sizes} with new titles (marginal CPU per page "
                   f"between the sizes, so start-up cancels); DirectRunner, 1 worker; medians of "
                   f"{data['repeat']} runs", body)


@renders("extract")
def render_extract(stem: str, data: dict) -> Section:
    res = data["results"]
    rows = [[name, num(res[key]["marginal_cpu_ms_per_page"]), num(res[key]["fixed_cpu_s"], 2)]
            for name, key in (("extraction stage (dump reader + extract_article)", "extraction"),
                              ("wikiextractor --links --processes 1", "wikiextractor"))]
    body = table(["", "marginal CPU ms per page", "fixed CPU s"], rows)
    body += (f"\n\nExtraction / wikiextractor: **{ratio(data['ratios']['extraction_cpu_per_page_vs_wikiextractor'])}**"
             f" CPU per page (Python {data.get('python', '?')}, mwparserfromhell "
             f"{data.get('mwparserfromhell', '?')}).")
    return Section("Wikitext extraction vs wikiextractor", "benchmarks/bench_extract.py", machine_of(data),
                   f"{dump_name(data['dump'])} replicated ×2 and ×8; medians of {data['repeat']}", body)


@renders("labels", "labels-latest")
def render_labels(stem: str, data: dict) -> Section:
    run = data["after"] if "after" in data else data
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


SCALE_TITLES = {
    "scale_replicated": "Scale: the enwiki excerpt replicated",
    "scale_replicated_k8_bytes": "Scale: the replicated excerpt with the alias cap at 8, shuffled bytes",
    "scale_synthetic": "Scale: synthetic enwiki-shaped dumps",
    "scale_synthetic_bytes": "Scale: synthetic enwiki-shaped dumps, shuffled bytes",
}


def _scale_series(data: dict) -> list[tuple[str, list[dict]]]:
    return [(name, rows) for name, rows in data["results"].items() if "before" not in name]


@renders("scale_replicated", "scale_replicated_k8_bytes", "scale_synthetic", "scale_synthetic_bytes")
def render_scale(stem: str, data: dict) -> Section:
    parts = []
    for name, rows in _scale_series(data):
        has_bytes = any(r.get("shuffled_kib_per_page") is not None for r in rows)
        header = ["size", "pages", "CPU ms per page", "peak RSS (MiB)", "shuffled elements per page",
                  "largest key-join group"] + (["shuffled KiB per page"] if has_bytes else [])
        table_rows = [[f"×{r['size']}" if r["size"] < 100 else num(r["size"]), num(r["pages"]),
                       num(r["cpu_ms_per_page"]), num(r["peak_rss_mib"], 0), num(r["shuffled_per_page"]),
                       num(r["largest_group"])] + ([num(r.get("shuffled_kib_per_page"))] if has_bytes else [])
                      for r in rows]
        marginal = data.get("ratios", {}).get(name, {}).get("marginal_cpu_ms_per_page")
        note = ("\n\nMarginal CPU per page between consecutive sizes: "
                + ", ".join(f"{num(m)} ms" for m in marginal)) if marginal else ""
        label = "" if name in ("after", "this checkout") else f"**{name}**\n\n"
        parts.append(label + table(header, table_rows) + note)
    flags = " ".join(data.get("job_flags", []))
    source = data.get("input") or ("synthetic enwiki-shaped dumps (benchmarks/synth_dump.py), sizes in articles"
                                   if max(data["sizes"]) >= 100 else
                                   "the 206-page enwiki excerpt replicated with new titles and anchor texts")
    return Section(SCALE_TITLES.get(stem, ""), "benchmarks/bench_scale.py", machine_of(data),
                   f"{source}" + (f"; job flags `{flags}`" if flags and flags not in source else "")
                   + "; DirectRunner, 1 worker, one run per size",
                   "\n\n".join(parts))


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


@renders("trainer", "trainer_lm_loss_cpu")
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
    if stem == "trainer":
        body += "\n\nThe floor set by matrix-product FLOPs (exact softmax over the whole table):\n\n"
        body += table(["geometry", "BART GFLOP", "memory GFLOP", "EDMem / BART at equal efficiency"],
                      [[name, num(g["bart"] / 1e9, 0), num(g["memory"] / 1e9, 1), ratio(g["ratio_bound"])]
                       for name, g in (("this benchmark", geo["this_geometry"]),
                                       ("the paper (BART-large, 1M × 256)", geo["paper_geometry"]))])
    else:  # the same preset as trainer.json's: its floor once, not its table again
        body += (f"\n\nThe floor set by matrix-product FLOPs at this geometry: "
                 f"{ratio(geo['this_geometry']['ratio_bound'])}.")
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
    title = {"trainer": "EDMem step vs the same BART",
             "trainer_lm_loss_cpu": "EDMem step vs the same BART: chunked vs dense LM loss"}[stem]
    return Section(title, "benchmarks/bench_trainer.py", data.get("device", DEFAULT_MACHINE),
                   f"`{data['preset']}` preset (d {m['d_model']}, {m['lower_layers']} + {m['upper_layers']} layers "
                   f"per stack), {num(m['entities'])} × {m['entity_dim']} table, {m['batch']} × {m['seq_len']} "
                   f"tokens, {m['mentions']} mentions per sequence, {data['dtype']}, {m['threads']} thread; "
                   f"models stepped in turn, medians of {m['rounds']} rounds", body)


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

Every measured figure of this manual, one section per results file. `make bench` re-runs the benchmarks and
rewrites this page; `make docs` rewrites it from the files as they are. Each section names the script that
wrote the file, the machine and the input. Timings from a 2-core machine shared with other work are noisy:
the ratios, measured side by side in one run, are the stable part.
"""


def script_for(stem: str) -> str:
    guess = REPO / "benchmarks" / f"bench_{stem}.py"
    return f"benchmarks/{guess.name}" if guess.exists() else "not recorded"


def render_all(results_dir: Path = RESULTS) -> str:
    files = {p.stem: p for p in sorted(results_dir.glob("*.json"))}
    current = sorted((s for s in files if not is_archived(s)),
                     key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))
    out = [HEADER]
    for stem in current:
        data = json.loads(files[stem].read_text())
        section = RENDERERS.get(stem, render_generic)(stem, data)
        title = section.title or stem.replace("_", " ").capitalize()
        out.append(f"## {title} (`{stem}.json`)\n")
        out.append(f"Script: `{section.script or script_for(stem)}`. Machine: {section.machine}. "
                   f"Input: {section.input}.\n")
        out.append(section.body.rstrip() + "\n")
    archived = [s for s in files if is_archived(s)]
    if archived:
        out.append("## Archived runs\n")
        out.append("Comparisons of the code with an earlier version of itself, kept as measured; the changes they "
                   "measured are in [CHANGELOG.md](../CHANGELOG.md).\n")
        out += [f"- `{s}.json`: {ARCHIVED.get(s, _archived_what(files[s]))}" for s in archived]
        out.append("")
    return "\n".join(out)


def _archived_what(path: Path) -> str:
    try:
        what = json.loads(path.read_text()).get("what")
    except (ValueError, AttributeError):
        what = None
    return plain(what.split(";")[0].split(" (")[0]) if isinstance(what, str) else "an earlier run of the same benchmark"


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
