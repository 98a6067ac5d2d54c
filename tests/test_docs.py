"""The manual (README.md, docs/*.md) checked like code: Markdown that renders, links that resolve, commands that
parse, figures that come from the results files."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import re
import shlex
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from wikiedm import cli

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MANUAL = [README, *DOCS, *[p for p in (REPO / "trainer" / "README.md", REPO / "benchmarks" / "README.md",
                                      REPO / "CHANGELOG.md") if p.exists()]]
BENCHMARKS_MD = REPO / "docs" / "benchmarks.md"
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
# Subcommands that are Beam jobs: options their own --help does not list are Beam pipeline options.
BEAM_JOB_MODULES = {"pipelines.wiki_mentions", "pipelines.link_mentions"}


def ids(paths):
    return [str(p.relative_to(REPO)) for p in paths]


# ----------------------------------------------------------------------------------------- the checks

def fence_problems(text: str) -> list[str]:
    """Unclosed code fences, and closing fences that carry text (```S=False: not a fence a renderer closes on)."""
    problems, open_at, marker = [], None, ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if not match:
            continue
        if open_at is None:
            open_at, marker = number, match.group(1)
        elif match.group(1)[0] == marker[0] and len(match.group(1)) >= len(marker):
            if match.group(2).strip():  # not a closing fence: the block stays open
                problems.append(f"line {number}: a closing fence with text after it: {line.strip()!r}")
            else:
                open_at = None
    if open_at is not None:
        problems.append(f"line {open_at}: code fence never closed")
    return problems


def repeated_blocks(text: str, size: int = 5) -> list[str]:
    """Runs of ``size`` lines that occur twice, verbatim (blank lines and table separators ignored)."""
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not re.fullmatch(r"\|?[\s:|-]+\|?", line.strip())]
    first_seen: dict[tuple[str, ...], int] = {}
    found = []
    for i in range(len(lines) - size + 1):
        block = tuple(text for _, text in lines[i:i + size])
        if block in first_seen and i - first_seen[block] >= size:
            found.append(f"lines {lines[i][0]}-{lines[i + size - 1][0]} repeat lines from {lines[first_seen[block]][0]}")
        first_seen.setdefault(block, i)
    return found


def without_code(text: str, inline: bool = True) -> str:
    """The text outside code fences (and inline code): links there are examples, not links."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            out.append("")
        elif not inside:
            out.append(re.sub(r"`[^`]*`", "", line) if inline else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in without_code(path.read_text(), inline=False).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path) -> list[str]:
    text = without_code(path.read_text())
    problems = []
    for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    return problems


def wikiedm_commands(text: str) -> list[list[str]]:
    """Every command line in a code fence that starts with ``wikiedm SUB``, continuation lines joined."""
    commands, inside, pending = [], False, ""
    for line in text.splitlines():
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        line = pending + line.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("$ "):
            line = line[2:]
        if re.match(r"^wikiedm \S", line):
            commands.append(shlex.split(line, comments=True))
    return commands


def options_of(command: list[str]) -> list[str]:
    """The --options a command uses (``[--kb`` in an optional part counts, ``...`` does not)."""
    return [token.lstrip("[").split("=")[0].rstrip("]") for token in command[2:]
            if token.lstrip("[").startswith("--")]


@lru_cache(maxsize=None)
def help_text(subcommand: str, flag: str = "--help") -> str:
    """``wikiedm SUBCOMMAND --help`` (or ``--help-config``, every config key), in this process; a module's
    main() that configures logging leaves the test process's root logger as it was."""
    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main([subcommand, flag])
        except SystemExit:
            pass
        finally:
            root.handlers[:], root.level = handlers, level
    return out.getvalue() + err.getvalue()


@lru_cache(maxsize=None)
def beam_option_names() -> frozenset[str]:
    from apache_beam.options.pipeline_options import PipelineOptions

    return frozenset(PipelineOptions([]).get_all_options(retain_unknown_options=False))


def undocumented_options(command: list[str]) -> list[str]:
    sub = command[1]
    if sub not in cli.SUBCOMMANDS:
        return [f"no subcommand {sub!r}"]
    missing = []
    for option in options_of(command):
        # --help shows the common options; --help-config, where a subcommand has it, every config key
        if any(re.search(rf"(?<![\w.-]){re.escape(option)}(?![\w.-])", help_text(sub, flag))
               for flag in ("--help", "--help-config")):
            continue
        if cli.SUBCOMMANDS[sub].module in BEAM_JOB_MODULES and option[2:] in beam_option_names():
            continue
        missing.append(option)
    return missing


def headline_lines(readme: str) -> list[str]:
    match = re.search(r"<!-- headlines -->(.*?)<!-- /headlines -->", readme, re.S)
    assert match, "README.md has no <!-- headlines --> ... <!-- /headlines --> block"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.strip().startswith("<!--")]


def figures(line: str) -> list[str]:
    line = re.sub(r"\]\([^)]*\)", "]", line)  # link targets are file names, not figures
    return re.findall(r"(?<![\w.])\d+(?:[.,]\d+)*", line)


def figures_missing(line: str, benchmarks: str) -> list[str]:
    return [f for f in figures(line) if not re.search(rf"(?<![\d.,]){re.escape(f)}(?![\d]|[.,]\d)", benchmarks)]


def load_make_docs():
    spec = importlib.util.spec_from_file_location("make_docs", REPO / "benchmarks" / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# A commit hash (hex with a digit and a letter), or a word that dates a run against another version of the code.
HISTORY_NAME = re.compile(r"(^|[_.-])((?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}|before|after|latest|old|new|"
                          r"quiet|loaded|replay)([_.-]|$)")
# The figures a page quotes from a benchmark: ratios (×1.23) and times per unit of work (25.2 ms). An estimate
# (~12 GB) says it is one; other quantities of a sentence are often properties of the input, not results.
QUOTED_FIGURE = re.compile(r"(?<!~)×\s?(\d+(?:\.\d+)?)|(?<![\w.×~])(\d+(?:\.\d+)?)\s?ms(?!\w)")


def history_names(names: list[str]) -> list[str]:
    """Results files named after a commit, or as one side of a before/after comparison."""
    return [name for name in names if HISTORY_NAME.search(Path(name).stem)]


def sections(markdown: str) -> dict[str, str]:
    """The text under each ``##`` heading of a page, by the heading's anchor."""
    parts = re.split(r"^## (.*)$", markdown, flags=re.M)
    return {slug(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def paragraphs(text: str) -> list[str]:
    """Paragraphs, and each table row on its own."""
    out = []
    for block in re.split(r"\n\s*\n", without_code(text, inline=False)):
        rows = [line for line in block.splitlines() if line.lstrip().startswith("|")]
        out += rows if rows else [block] if block.strip() else []
    return out


def quoted_figures(paragraph: str) -> list[str]:
    paragraph = re.sub(r"\]\([^)]*\)", "]", paragraph)  # link targets are names, not figures
    return [a or b for a, b in QUOTED_FIGURE.findall(paragraph)]


def shows(figure: str, section: str) -> bool:
    """Whether ``section`` holds ``figure``, exactly or as a number that rounds to it (73 ms quotes 73.4)."""
    digits = len(figure.split(".")[1]) if "." in figure else 0
    numbers = re.findall(r"(?<![\d.])\d[\d,]*(?:\.\d+)?", section)
    return any(round(float(n.replace(",", "")), digits) == float(figure) for n in numbers)


def figures_not_in_their_source(path: Path, benchmarks: str) -> list[str]:
    """Figures quoted beside a link to a section of docs/benchmarks.md that the section does not show."""
    by_anchor = sections(benchmarks)
    problems = []
    for paragraph in paragraphs(path.read_text()):
        anchors_linked = re.findall(r"\]\((?:docs/)?benchmarks\.md#([^)\s]+)\)", paragraph)
        if not anchors_linked:
            continue
        source = "\n".join(by_anchor.get(anchor, "") for anchor in anchors_linked)
        problems += [f"{figure} (linked: {', '.join(anchors_linked)})"
                     for figure in quoted_figures(paragraph) if not shows(figure, source)]
    return problems


def ratios_in_two_files(results: dict[str, dict]) -> dict[str, list[str]]:
    """Named ratios (the flat entries of a file's ``ratios``) that two results files both record: one figure
    with two sources, bound to disagree (two runs)."""
    files: dict[str, list[str]] = {}
    for stem, data in sorted(results.items()):
        ratios = data.get("ratios") if isinstance(data, dict) else None
        for name, value in (ratios or {}).items():
            if not isinstance(value, dict):  # a dict is one series' figures (scale files), named per input
                files.setdefault(name, []).append(stem)
    return {name: stems for name, stems in files.items() if len(stems) > 1}


def load_suite():
    spec = importlib.util.spec_from_file_location("benchmark_suite", BENCHMARKS / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def makefile_recipe(target: str) -> list[str]:
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("path", MANUAL, ids=ids(MANUAL))
def test_code_fences_are_balanced(path):
    assert fence_problems(path.read_text()) == []


@pytest.mark.parametrize("path", MANUAL, ids=ids(MANUAL))
def test_no_block_of_lines_is_repeated(path):
    assert repeated_blocks(path.read_text()) == []


def test_the_checks_catch_a_pasted_duplicate_and_a_broken_fence():
    lines = [line for line in README.read_text().splitlines() if line.strip()][10:15]
    planted = README.read_text() + "\n\n" + "\n".join(lines) + "\n"
    assert repeated_blocks(README.read_text()) == []
    assert len(repeated_blocks(planted)) == 1
    assert repeated_blocks("a\nb\nc\nd\n\ne\n|---|---|\nx\na\nb\nc\nd\ne\n") == ["lines 9-13 repeat lines from 1"]
    assert fence_problems("```\ncode\n```S=False\n") == ["line 3: a closing fence with text after it: '```S=False'",
                                                         "line 1: code fence never closed"]
    assert fence_problems("```json\n{}\n```\n") == []


@pytest.mark.parametrize("path", MANUAL, ids=ids(MANUAL))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title `x` here\n\n[ok](#title-x-here) [f](b.md) [g](a.md#nope) "
                                   "[web](https://example.org) `[code](none.md)`\n")
    assert broken_links(tmp_path / "a.md") == ["b.md: no such file", "a.md#nope: no heading with anchor #nope in a.md"]


COMMANDS = [(path, command) for path in [README, *DOCS] for command in wikiedm_commands(path.read_text())]


@pytest.mark.parametrize("path,command", COMMANDS, ids=[f"{p.name}:{' '.join(c[:2])}" for p, c in COMMANDS])
def test_every_wikiedm_command_shown_parses(path, command):
    assert undocumented_options(command) == [], f"{path.name}: {shlex.join(command)}"


def test_the_manual_shows_a_command_for_every_job():
    shown = {command[1] for _, command in COMMANDS}
    assert {"corpus", "pretrain", "validate", "report", "export", "fetch"} <= shown
    assert undocumented_options(["wikiedm", "validate", "--no_such_option"]) == ["--no_such_option"]
    assert undocumented_options(["wikiedm", "no-such-job"]) == ["no subcommand 'no-such-job'"]


def test_headline_figures_come_from_the_benchmarks_page():
    benchmarks = BENCHMARKS_MD.read_text()
    lines = headline_lines(README.read_text())
    assert 3 <= len(lines) <= 6
    assert all(figures(line) for line in lines), "a headline without a figure"
    assert {line: figures_missing(line, benchmarks) for line in lines} == {line: [] for line in lines}
    assert figures_missing("×9.87 faster on 12,345 pages", benchmarks) == ["9.87", "12,345"]


def test_benchmarks_page_is_generated_from_the_results_files(tmp_path):
    make_docs = load_make_docs()
    regenerated = tmp_path / "benchmarks.md"
    assert make_docs.main(["--output", str(regenerated)]) == 0
    assert regenerated.read_text() == BENCHMARKS_MD.read_text(), "docs/benchmarks.md is out of date: run make docs"


def test_a_new_results_file_appears_without_a_renderer(tmp_path):
    make_docs = load_make_docs()
    (tmp_path / "gpu_check.json").write_text(json.dumps({"machine": "1 x H100", "tokens_per_s": 12345.6,
                                                          "mfu": 0.41, "nested": {"skipped": 1}}))
    page = make_docs.render_all(tmp_path)
    assert "## Gpu check (`gpu_check.json`)" in page
    assert "Machine: 1 x H100." in page
    assert "| `tokens_per_s` | 12,345.600 |" in page and "| `mfu` | 0.410 |" in page
    assert "skipped" not in page
    # the suite's table links the section of every file there is, and names the others
    assert "[`gpu_check.json`](#gpu-check-gpu_checkjson)" in page and "`pipeline.json` (not measured yet)" in page


# ------------------------------------------------------------------------- benchmarks/ as a suite (one file each)

def test_results_files_are_named_for_what_they_measure():
    names = [p.name for p in RESULTS.iterdir()]
    assert history_names(names) == [], "git keeps earlier runs: one current file per benchmark, no commit names"
    assert history_names(["pipeline_46c1429_quiet.json", "labels-latest.json", "scale_synthetic_before_after.png",
                          "pipeline.json", "scale_replicated_k8_bytes.json", "ablation_small-long.json"]) == [
        "pipeline_46c1429_quiet.json", "labels-latest.json", "scale_synthetic_before_after.png"]


def test_results_files_hold_the_current_run_only():
    """No before/after halves, and no commit named where the machine or the input is described."""
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        assert not {"before", "after"} & set(data), f"{path.name}: a before/after pair (keep the current run)"
        for key in ("machine", "machine_load", "device", "input", "what"):
            value = data.get(key)
            assert not (isinstance(value, str) and re.search(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
                                                             value)), f"{path.name}: {key} names a commit"


def test_each_named_ratio_has_one_results_file():
    results = {p.stem: json.loads(p.read_text()) for p in RESULTS.glob("*.json")}
    assert ratios_in_two_files(results) == {}
    assert ratios_in_two_files({"pipeline": {"ratios": {"extraction_vs_wikiextractor": 0.46, "job": 1.79}},
                                "extract": {"ratios": {"extraction_vs_wikiextractor": 0.50}},
                                "scale": {"ratios": {"series": {"job": 2.0}}}}) == {
        "extraction_vs_wikiextractor": ["extract", "pipeline"]}


def test_the_benchmarks_page_labels_no_run_as_before_or_after():
    labels = re.findall(r"^(?:#+ |\*\*)(.*)$", BENCHMARKS_MD.read_text(), flags=re.M)
    assert [label for label in labels if re.search(r"\b(before|after|latest)\b", label, re.I)] == []


def test_every_results_file_has_its_benchmark_in_the_suite():
    suite = load_suite()
    entries = suite.by_name()
    assert sorted(p.stem for p in RESULTS.glob("*.json") if p.stem not in entries) == [], \
        "a results file no benchmarks/suite.py entry writes"
    for png in RESULTS.glob("*.png"):
        assert (RESULTS / f"{png.stem}.json").exists(), f"{png.name}: a plot without its results file"
    for bench in suite.SUITE:
        assert (REPO / bench.script).exists(), bench.script
        assert all((BENCHMARKS / helper).exists() for helper in bench.helpers), bench.helpers
        # the command writes the file: it names it, or the script writes it by default
        written = f"results/{bench.name}."  # NAME.json, or NAME.{json,png} in a script's docstring
        assert written in " ".join(bench.command) or written in (REPO / bench.script).read_text(), \
            f"{bench.name}: {shlex.join(bench.command)} does not write {bench.results}"


def test_every_option_a_suite_command_passes_is_one_its_script_defines():
    """Options before a lone ``--`` are the script's own (after it, the corpus job's)."""
    for bench in load_suite().SUITE:
        source = (REPO / bench.script).read_text()
        args = list(bench.command)
        own = args[:args.index("--")] if "--" in args else args
        undefined = [a for a in own if a.startswith("--") and not any(
            form in source for form in (f'"{a}"', f"'{a}'", f"{a})"))]  # argparse, or a shell case
        assert undefined == [], f"{bench.name}: {bench.script} defines no {undefined}"


def test_every_script_in_benchmarks_is_a_benchmark_a_helper_or_a_documented_tool():
    suite = load_suite()
    known = {Path(b.script).name for b in suite.SUITE} | {h for b in suite.SUITE for h in b.helpers} | set(suite.TOOLS)
    scripts = {p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")}
    assert sorted(scripts - known) == [], "add it to benchmarks/suite.py (SUITE, a helper, or TOOLS), or remove it"
    page = BENCHMARKS_MD.read_text()
    assert sorted(name for name in scripts if name not in page) == [], "a script docs/benchmarks.md does not name"


def test_the_suite_prepares_runs_and_reports_a_failure(tmp_path, capsys):
    suite = load_suite()
    made, ran = tmp_path / "corpus", tmp_path / "ran.txt"
    ok = suite.Benchmark("ok", "test", "writes a file", ("python", "-c", f"open({str(ran)!r}, 'w').write('ran')"),
                         prepare=("python", "-c", f"import os; os.mkdir({str(made)!r})", "--output", str(made)))
    broken = suite.Benchmark("broken", "test", "fails", ("python", "-c", "raise SystemExit(3)"))
    assert suite.run([ok, broken]) == 1
    assert made.is_dir() and ran.read_text() == "ran"
    assert "failed: broken" in capsys.readouterr().err
    assert suite.run([ok]) == 0  # the prepared folder exists: not made again (mkdir would fail)


def test_make_bench_runs_the_suite_then_writes_the_page():
    assert makefile_recipe("bench") == ["$(PY) benchmarks/suite.py", "$(PY) benchmarks/make_docs.py"]
    suite = load_suite()
    skipped = [b for b in suite.SUITE if b.skip]
    page = BENCHMARKS_MD.read_text()
    assert all(f"no: {b.skip}" in page for b in skipped), "benchmarks.md says which benchmarks make bench skips"


# ------------------------------------------------------------------------- one source per figure

@pytest.mark.parametrize("path", [README, *DOCS], ids=ids([README, *DOCS]))
def test_figures_quoted_beside_a_benchmarks_link_are_in_that_section(path):
    if path == BENCHMARKS_MD:
        pytest.skip("the source itself")
    assert figures_not_in_their_source(path, BENCHMARKS_MD.read_text()) == []


def test_the_figure_check_catches_a_figure_from_another_run():
    page = ("## Corpus job (`pipeline.json`)\n\nextraction ×0.46, 25.2 ms per page\n\n"
            "## Extraction (`extract.json`)\n\nextraction ×0.50\n")
    doc = REPO / "docs" / "_probe.md"
    text = ("Extraction alone ×0.50, the job 25.2 ms per page ([pipeline](benchmarks.md#corpus-job-pipelinejson)).\n\n"
            "Rounded: 25 ms, an estimate ~×7 ([pipeline](benchmarks.md#corpus-job-pipelinejson)).\n\n"
            "Unlinked: ×9.99.\n\n| table row | ×0.46 | [link](benchmarks.md#corpus-job-pipelinejson) |\n"
            "| next row | ×0.51 | [link](benchmarks.md#extraction-extractjson) |\n")
    try:
        doc.write_text(text)
        assert figures_not_in_their_source(doc, page) == ["0.50 (linked: corpus-job-pipelinejson)",
                                                          "0.51 (linked: extraction-extractjson)"]
    finally:
        doc.unlink()


# ------------------------------------------------------------------------- what the README shows

def test_readme_shows_the_output_folder_and_how_to_load_it():
    readme = README.read_text()
    output = sections(readme)["the-output"]
    assert "OUT/" in output and "├── passages/" in output, "the output folder as an annotated tree"
    assert "load_dataset(" in output
    assert "token_start" in output and "token_end" in output


def test_corpus_md_names_every_column_and_mention_field_once():
    from schemas import PASSAGE_SCHEMA

    columns = sections((REPO / "docs" / "corpus.md").read_text())["output-out"]
    fields = [f.name for f in PASSAGE_SCHEMA] + [f.name for f in PASSAGE_SCHEMA.field("mentions").type.value_type]
    assert [name for name in fields if f"`{name}`" not in columns] == []
    # the list lives there: the README links it rather than listing the columns again
    assert not re.search(r"`passage_id`, `page_id`, `title`", README.read_text())


def test_comments_that_point_at_a_section_find_it():
    for path in (REPO / "Makefile", REPO / "pyproject.toml"):
        for page, heading in re.findall(r'(README|docs/[\w-]+\.md),? "([^"]+)"', path.read_text()):
            target = README if page == "README" else REPO / page
            assert any(line.lstrip("#").strip().startswith(heading) for line in target.read_text().splitlines()
                       if line.startswith("#")), f"{path.name}: no section {heading!r} in {page}"
