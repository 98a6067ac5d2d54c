"""Label quality: how many hidden links does the missing-mention labeller recover?

EDMem labels an unlinked mention when its entity is linked elsewhere in the
same page, or is the page itself. To measure that on real text, this
benchmark makes a copy of a dump in which such links are *hidden* (the
wikitext ``[[Target|shown]]`` becomes plain ``shown``), runs the corpus job on
the copy, and checks which hidden spans came back as labels:

* hidden       links turned into plain text whose entity is still linked
               elsewhere in the page (after hiding), or is the page's own
               entity; the first link of each entity stays, the rest are hidden;
* recoverable  hidden spans whose text equals a remaining anchor text of that
               entity in the page, or an alias (alias table of the copy) of the
               page's own entity: what EDMem's rules can find from the page;
* recovered    hidden spans labelled with exactly that span (any entity);
  correct      ... and with the hidden link's entity;
* precision    correct / recovered.

A hidden span the passages cannot hold (not on token boundaries, or longer
than a window's overlap and cut by every window) is ``not_in_passages``: it is
left out of recovered/recoverable/precision, which measure the labeller, and
counted apart (the job's tokenizer and window settings decide, as in
ChunkWindows). ``*_all`` fields keep every hidden span, for comparison with
runs before that split.

Hidden spans are found by extracting each page before and after hiding: the
plain texts must be equal (pages where they are not are skipped and
counted), and the hidden spans are the links of the original extraction that
the copy's extraction no longer has. Entities come from the dump's own
redirects (chains followed); red links are their own entity, as the job's
``--keep_red_links true`` has them (these are excerpts: most targets are
absent).

    python benchmarks/bench_labels.py [--dumps A.xml.bz2,B.xml] [--json OUT] [-- job flags]

Extra job flags (after ``--``) go to the corpus job, e.g. ``-- --labels.ambiguity skip``.
"""
from __future__ import annotations

import argparse
import bz2
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from synth_dump import dump_header, page_xml  # noqa: E402

from pipelines.corpus.tokenizer import load_encoder, tokenize_with_mentions  # noqa: E402
from pipelines.corpus.windows import cut_windows  # noqa: E402
from pipelines.dump import iter_pages, read_siteinfo  # noqa: E402
from pipelines.records import Mention, RawPage  # noqa: E402
from pipelines.wikitext import (  # noqa: E402
    ExtractionError,
    extract_article,
    is_disambiguation,
    normalize_title,
    parse_link_target,
    redirect_target,
)

SHARED = (REPO / ".." / "shared" / "wikidumps").resolve()
DEFAULT_DUMPS = (
    "enwiki-2016-206pages-articles1.xml.bz2",
    "enwiki-2019-196pages-namespaces.xml.bz2",
    "enwiki-2019-11pages-partial.xml",
    "enwiki-2020-tiny-7pages.xml.bz2",
    "enwiki-pear-1page-schema0.10.xml",
    "enwiki-5pages-tables-no-siteinfo.xml.bz2",
    "simplewiki-2019-7pages.xml.bz2",
    "ukwiki-2023-first100k-lines-truncated.xml.xz",
)
# An innermost wikilink: no brackets inside, optional label.
_WIKILINK = re.compile(r"\[\[([^\[\]|\n]+)(?:\|([^\[\]]*))?\]\]")


class Wiki:
    """The pages of a dump, its redirects (followed) and disambiguation pages."""

    def __init__(self, path: str) -> None:
        self.site = read_siteinfo(path)
        self.pages: list[RawPage] = [p for p in iter_pages(path) if isinstance(p, RawPage)]
        self.redirects: dict[str, str] = {}
        self.disambiguation: set[str] = set()
        for page in self.pages:
            if page.ns != 0:
                continue
            title = normalize_title(page.title, self.site)
            target = None
            if page.redirect is not None:
                parsed = parse_link_target(page.redirect, self.site)
                target = parsed.title if parsed.kind == "article" else ""
            elif page.text:
                target = redirect_target(page.text, self.site)
            if target is not None:
                self.redirects[title] = target
            elif page.text and is_disambiguation(page.text, self.site):
                self.disambiguation.add(title)

    def entity(self, title: str) -> str | None:
        """The entity a link target names (redirects followed), None when not an entity."""
        seen = set()
        while title in self.redirects:
            if title in seen or not self.redirects[title]:
                return None
            seen.add(title)
            title = self.redirects[title]
        return None if title in self.disambiguation else title


def hide_links(wiki: Wiki, page: RawPage, title: str) -> str:
    """The page's wikitext with repeated links (and links to the page itself) made plain text."""
    own = wiki.entity(title)
    seen: set[str] = set()

    def replace(m: re.Match) -> str:
        target, label = m.group(1), m.group(2)
        if "%" in target or "&" in target or target.lstrip().startswith(":") or label == "":
            return m.group(0)
        parsed = parse_link_target(target, wiki.site)
        if parsed.kind != "article":
            return m.group(0)
        entity = wiki.entity(parsed.title)
        if entity is None:
            return m.group(0)
        first = entity not in seen
        seen.add(entity)
        if entity != own and first:
            return m.group(0)
        return label if label is not None else target

    return _WIKILINK.sub(replace, page.text)


def mark_in_passages(text: str, spans: list[dict], windows: dict) -> None:
    """Set each span's ``in_passages``: would a mention there survive tokenisation and windowing?"""
    mentions = [Mention(s["start"], s["end"], s["surface"], s["entity"], "hidden") for s in spans]
    tokenized = tokenize_with_mentions(text, mentions, load_encoder(windows["tokenizer"]))
    kept = {(w.mention.start, w.mention.end)
            for window in cut_windows(tokenized.token_ids, tokenized.spans,
                                      window=windows["window"], overlap=windows["overlap"])
            for w in window.mentions}
    for s in spans:
        s["in_passages"] = (s["start"], s["end"]) in kept


def make_hidden_copy(src: str, dst: str, windows: dict | None = None) -> tuple[dict, dict]:
    """Write the copy; return (hidden spans by page id, counts)."""
    windows = windows or {"tokenizer": "gpt2-bpe", "window": 128, "overlap": 10}
    wiki = Wiki(src)
    header = dump_header(src)
    hidden: dict[int, list[dict]] = {}
    counts = defaultdict(int)
    with bz2.open(dst, "wt", encoding="utf-8") as out:
        out.write(header)
        for page in wiki.pages:
            text = page.text
            title = normalize_title(page.title, wiki.site) if page.ns == 0 else page.title
            is_article = page.ns == 0 and title not in wiki.redirects and title not in wiki.disambiguation
            if is_article and text:
                counts["articles"] += 1
                modified = hide_links(wiki, page, title)
                if modified != text:
                    try:
                        before = extract_article(text, wiki.site, title=title)
                        after = extract_article(modified, wiki.site, title=title)
                    except (ExtractionError, RecursionError):
                        counts["pages_skipped_extraction_error"] += 1
                        modified = text
                    else:
                        if before.text != after.text:
                            counts["pages_skipped_text_changed"] += 1
                            modified = text
                        else:
                            spans = _hidden_spans(wiki, title, before, after.links)
                            if spans:
                                mark_in_passages(before.text, spans, windows)
                            counts["hidden"] += len(spans)
                            if spans:
                                hidden[page.page_id] = spans
                text = modified
            out.write(page_xml(page.page_id, page.ns, page.title, text, page.redirect))
        out.write("</mediawiki>\n")
    return hidden, dict(counts)


def _hidden_spans(wiki: Wiki, title: str, extraction, after) -> list[dict]:
    before, text = extraction.links, extraction.text
    kept = {(m.start, m.end) for m in after}
    remaining = defaultdict(set)  # entity -> anchor texts still linked in the page
    for m in after:
        entity = wiki.entity(m.target)
        if entity is not None:
            remaining[entity].add(m.surface)
    own = wiki.entity(title)
    spans = []
    for m in before:
        if (m.start, m.end) in kept:
            continue
        entity = wiki.entity(m.target)
        if entity is None or not (entity == own or entity in remaining):
            continue  # hidden by the wikitext rule but not by EDMem's: not counted
        spans.append({"start": m.start, "end": m.end, "surface": m.surface, "entity": entity,
                      "own": entity == own, "anchors": sorted(remaining.get(entity, ())), "title": title,
                      "context": text[max(0, m.start - 50):m.start] + "[[" + text[m.start:m.end] + "]]"
                      + text[m.end:m.end + 50]})
    return spans


def window_settings(job_flags: list[str]) -> dict:
    """The tokenizer and window settings the job runs with (its defaults unless flagged)."""
    settings = {"tokenizer": "gpt2-bpe", "window": 128, "overlap": 10}
    for i, flag in enumerate(job_flags[:-1]):
        name = flag.lstrip("-")
        if flag.startswith("--") and name in settings:
            settings[name] = job_flags[i + 1] if name == "tokenizer" else int(job_flags[i + 1])
    return settings


def run_job(dump: str, out: str, extra: list[str]) -> float:
    cmd = [sys.executable, "-m", "pipelines.wiki_mentions", "--input", dump, "--output", out,
           "--keep_red_links", "true", "--direct_num_workers", "1", *extra]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


VARIANTS_OFF = ["--labels.label_case_variants", "false", "--labels.label_plural_variants", "false",
                "--labels.label_possessive_variants", "false"]


def job_cpu(dump: str, extra: list[str], repeats: int) -> dict:
    """CPU seconds (user + sys) of the whole job on ``dump``, variant rules off vs on, alternated in
    one run, ``repeats`` times each: medians and their ratio. (Run under flock /work/bench.lock.)"""
    import resource
    import statistics

    seconds: dict[str, list[float]] = {"variants_off": [], "variants_on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for name, flags in (("variants_off", VARIANTS_OFF), ("variants_on", [])):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                run_job(dump, os.path.join(tmp, f"{name}-{i}"), [*extra, *flags])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                seconds[name].append(round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2))
                print(f"  {name} run {i + 1}: {seconds[name][-1]} CPU s", flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {"dump": Path(dump).name, "repeats": repeats, "cpu_seconds": seconds, "median_cpu_seconds": medians,
            "ratio_on_off": round(medians["variants_on"] / medians["variants_off"], 3)}


def labels_by_page(out: str, contexts: dict | None = None) -> dict[int, dict[tuple[int, int], tuple[str, str]]]:
    """page id -> {(start, end) in the article text: (entity, source)} of every mention in the passages.

    Passages version 2: a mention's char_start/char_end index its window's text, which starts at
    the row's char_offset in the article. With ``contexts``, also fill it with
    (page id, start, end) -> the window text around each mention (for reading labels)."""
    found: dict[int, dict] = defaultdict(dict)
    for path in sorted(Path(out, "passages").glob("*.parquet")):
        table = pq.read_table(path, columns=["page_id", "char_offset", "text", "mentions"])
        for page_id, offset, text, mentions in zip(table.column("page_id").to_pylist(),
                                                   table.column("char_offset").to_pylist(),
                                                   table.column("text").to_pylist(),
                                                   table.column("mentions").to_pylist()):
            for m in mentions:
                key = (offset + m["char_start"], offset + m["char_end"])
                found[page_id][key] = (m["entity"], m["source"])
                if contexts is not None:
                    a, b = m["char_start"], m["char_end"]
                    contexts[(page_id, *key)] = (text[max(0, a - 60):a] + "[[" + text[a:b] + "]]"
                                                 + text[b:b + 60]).replace("\n", " ")
    return found


def aliases_of(out: str, entities: set[str]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = defaultdict(set)
    for path in sorted(Path(out, "alias_table").glob("*.parquet")):
        table = pq.read_table(path, columns=["alias", "entity"])
        for alias, entity in zip(table.column("alias").to_pylist(), table.column("entity").to_pylist()):
            if entity in entities:
                result[entity].add(alias)
    return result


def score(hidden: dict[int, list[dict]], out: str, examples: int = 0) -> dict:
    contexts: dict = {}
    labels = labels_by_page(out, contexts if examples else None)
    own_entities = {s["entity"] for spans in hidden.values() for s in spans if s["own"]}
    own_aliases = aliases_of(out, own_entities)
    counts = {scope: defaultdict(int) for scope in ("passages", "all")}
    by_source: dict[str, int] = defaultdict(int)
    correct_by_source: dict[str, int] = defaultdict(int)
    missed, wrong = [], []
    elsewhere: dict[str, int] = defaultdict(int)  # labels on text that was never a link: volume only
    elsewhere_spans: dict[str, list] = defaultdict(list)
    for page_id, page_labels in labels.items():
        at_hidden = {(s["start"], s["end"]) for s in hidden.get(page_id, ())}
        for span, (entity, source) in page_labels.items():
            if source != "hyperlink" and span not in at_hidden:
                elsewhere[source] += 1
                if examples:
                    elsewhere_spans[source].append({"entity": entity, "context": contexts.get((page_id, *span), "")})
    for page_id, spans in hidden.items():
        page_labels = labels.get(page_id, {})
        for s in spans:
            scopes = [counts["all"]] + ([counts["passages"]] if s.get("in_passages", True) else [])
            can = s["surface"] in s["anchors"] or (s["own"] and s["surface"] in own_aliases.get(s["entity"], ()))
            label = page_labels.get((s["start"], s["end"]))
            if label is not None and label[1] == "hyperlink":
                label = None
            right = label is not None and label[0] == s["entity"]
            for c in scopes:
                c["hidden"] += 1
                c["recoverable"] += can
                c["recovered"] += label is not None
                c["correct"] += right
                c["recoverable_correct"] += right and can
            if not s.get("in_passages", True):
                continue
            if label is None:
                overlapping = [(k, v) for k, v in page_labels.items() if k[0] < s["end"] and s["start"] < k[1]]
                missed.append({"recoverable": can, "title": s["title"], "surface": s["surface"], "entity": s["entity"],
                               "anchors": s["anchors"][:5], "context": s["context"],
                               "overlapping_labels": [list(k) + list(v) for k, v in overlapping]})
                continue
            by_source[label[1]] += 1
            correct_by_source[label[1]] += right
            if not right:
                wrong.append({"title": s["title"], "surface": s["surface"], "entity": s["entity"],
                              "labelled": label[0], "source": label[1], "context": s["context"]})
    c, a = counts["passages"], counts["all"]
    return {
        **{k: c[k] for k in ("hidden", "recoverable", "recovered", "correct", "recoverable_correct")},
        "not_in_passages": a["hidden"] - c["hidden"],
        "recovered_of_hidden": _ratio(c["correct"], c["hidden"]),
        "recovered_of_recoverable": _ratio(c["recoverable_correct"], c["recoverable"]),
        "precision": _ratio(c["correct"], c["recovered"]),
        "recovered_by_source": dict(sorted(by_source.items())),
        "correct_by_source": {source: correct_by_source[source] for source in sorted(by_source)},
        "labels_elsewhere_by_source": dict(sorted(elsewhere.items())),
        "all": {**{k: a[k] for k in ("hidden", "recoverable", "recovered", "correct", "recoverable_correct")},
                "recovered_of_hidden": _ratio(a["correct"], a["hidden"]),
                "recovered_of_recoverable": _ratio(a["recoverable_correct"], a["recoverable"]),
                "precision": _ratio(a["correct"], a["recovered"])},
        "examples": {"missed_recoverable": [m for m in missed if m["recoverable"]][:examples],
                     "missed_other": [m for m in missed if not m["recoverable"]][:examples],
                     "wrong": wrong[:examples],
                     # a seeded sample of labels on text that was never a link, per source, to read
                     "elsewhere": {source: random.Random(0).sample(spans, min(examples, len(spans)))
                                   for source, spans in sorted(elsewhere_spans.items())}} if examples else {},
    }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", default=",".join(str(SHARED / d) for d in DEFAULT_DUMPS),
                        help="comma-separated dump paths (default: the shared excerpts)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--examples", type=int, default=0, help="keep this many missed and wrong spans per dump in the JSON")
    parser.add_argument("--cpu", type=int, default=0,
                        help="instead: time the whole job's CPU on each dump (not hidden), variant rules off vs on, "
                             "this many times each")
    args = parser.parse_args(argv)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]}
    if args.cpu:
        runs = [job_cpu(d, extra, args.cpu) for d in args.dumps.split(",") if d]
        for r in runs:
            print(f"{r['dump']}: median CPU {r['median_cpu_seconds']}, on/off x{r['ratio_on_off']}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine, "job_flags": extra, "cpu": runs}, indent=2) + "\n")
        return 0
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dump in [d for d in args.dumps.split(",") if d]:
            if not os.path.exists(dump):
                print(f"skipping {dump}: not found", file=sys.stderr)
                continue
            name = Path(dump).name
            copy = os.path.join(tmp, name.split(".xml")[0] + "-hidden.xml.bz2")
            hidden, counts = make_hidden_copy(dump, copy, window_settings(extra))
            out = os.path.join(tmp, name + "-out")
            seconds = run_job(copy, out, extra)
            results[name] = {**counts, **score(hidden, out, args.examples), "job_seconds": round(seconds, 1)}
            r = results[name]
            print(f"{name:<48} hidden {r['hidden']:>5}  recoverable {r['recoverable']:>5}  "
                  f"correct {r['correct']:>5}  of hidden {r['recovered_of_hidden']}  "
                  f"of recoverable {r['recovered_of_recoverable']}  precision {r['precision']}", flush=True)
    totals = {k: sum(r[k] for r in results.values())
              for k in ("hidden", "recoverable", "recovered", "correct", "recoverable_correct", "not_in_passages")}
    if totals["hidden"]:
        totals["recovered_of_hidden"] = round(totals["correct"] / totals["hidden"], 4)
        totals["recovered_of_recoverable"] = round(totals["recoverable_correct"] / max(totals["recoverable"], 1), 4)
        totals["precision"] = round(totals["correct"] / max(totals["recovered"], 1), 4)
    print(f"all dumps: {totals}")
    if args.json:
        doc = {"machine": machine, "job_flags": extra, "dumps": results, "totals": totals}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
