"""Shared fixtures: the real dump excerpts in ../shared/wikidumps, the project's own
sample dump, and a helper that runs the corpus job for real (DirectRunner)."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def wikidumps_dir() -> Path:
    env = os.environ.get("WIKIDUMPS_DIR")
    return Path(env) if env else (REPO / ".." / "shared" / "wikidumps").resolve()


WIKIDUMPS = wikidumps_dir()
HAVE_WIKIDUMPS = (WIKIDUMPS / "README.md").exists()
needs_shared = pytest.mark.skipif(not HAVE_WIKIDUMPS, reason=f"no real dump excerpts at {WIKIDUMPS}")
_DUMP_NAMES = sorted(p.name for p in WIKIDUMPS.glob("*.xml*") if "-index." not in p.name) if HAVE_WIKIDUMPS else []


def dump(name: str) -> str:
    return str(WIKIDUMPS / name)


def distinct_dumps() -> list[str]:
    """The shared dumps, each set of pages once: a multistream file whose plain twin is there (the same name
    without ``-multistream``) is left out. It holds the same pages, and the job makes the same files, byte for
    byte, from either (test_pipeline_real_dumps.py checks it), so tests of what the job makes of a dump's pages
    need not run it twice."""
    names = set(_DUMP_NAMES)
    return sorted(n for n in names if not ("-multistream" in n and n.replace("-multistream", "", 1) in names))


def _job_argv(input_path: str, output: Path, args: tuple[str, ...]) -> list[str]:
    return ["--input", input_path, "--output", str(output), "--progress_every_s", "60", *args]


def run_job(input_path: str, output: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the corpus job in a subprocess, exactly as a user would (python -m)."""
    cmd = [sys.executable, "-m", "pipelines.wiki_mentions", *_job_argv(input_path, output, args)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"job failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_job_here(input_path: str, output: Path, *args: str) -> str:
    """Run the corpus job in this process, through what ``python -m pipelines.wiki_mentions`` calls
    (pipelines.wiki_mentions.run); return what it printed. For the fixtures that only need the job's output:
    the same job less ~3 s of interpreter and imports per run. The command line itself is run_job's."""
    import contextlib
    import io

    from pipelines.wiki_mentions import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(_job_argv(input_path, output, args))
    if code != 0:
        raise AssertionError(f"job failed ({code}):\n{out.getvalue()[-3000:]}\n{err.getvalue()[-6000:]}")
    return out.getvalue()


@pytest.fixture(scope="session", autouse=True)
def beam_graph_building_as_in_the_jobs():
    """TestPipelines build their graphs as the jobs do (pipelines.launch.memoize_dofn_specs)."""
    if "apache_beam" in sys.modules:  # this process collected tests that use Beam
        from pipelines.launch import memoize_dofn_specs

        memoize_dofn_specs()


@pytest.fixture(scope="session")
def sample_dump(tmp_path_factory) -> str:
    from pipelines.sample_dump import write_sample

    return write_sample(str(tmp_path_factory.mktemp("sample") / "samplewiki-pages-articles.xml.bz2"))


@pytest.fixture(scope="session")
def sample_corpus(tmp_path_factory, sample_dump) -> Path:
    """The job's output on the project's own sample (shared by several tests)."""
    out = tmp_path_factory.mktemp("sample_out")
    run_job_here(sample_dump, out, "--validation_fraction", "0.1")
    return out


# How the tests that take any shared dump run the job on it, once per session (shared_dump_corpus).
SHARED_DUMP_JOB_ARGS = ("--keep_red_links", "true", "--validation_fraction", "0.3")


class SharedDumpCorpora:
    """NAME -> the job's output on ../shared/wikidumps/NAME with SHARED_DUMP_JOB_ARGS, made once when first
    asked for; ``stdout[NAME]`` is what that run printed."""

    def __init__(self, root_factory) -> None:
        self.root_factory, self.made, self.stdout = root_factory, {}, {}

    def __call__(self, name: str) -> Path:
        if name not in self.made:
            out = self.root_factory.mktemp("shared_dump_out")
            self.stdout[name] = run_job_here(dump(name), out, *SHARED_DUMP_JOB_ARGS)
            self.made[name] = out
        return self.made[name]


@pytest.fixture(scope="session")
def shared_dump_corpus(tmp_path_factory) -> SharedDumpCorpora:
    """The session's runs of the job on the shared dumps: the pipeline, markup, linker and passage-text
    tests read the same run of each dump (tests must not change these folders: copy them first)."""
    if not HAVE_WIKIDUMPS:
        pytest.skip(f"no real dump excerpts at {WIKIDUMPS}")
    return SharedDumpCorpora(tmp_path_factory)


@pytest.fixture(scope="session")
def enwiki206_corpus(tmp_path_factory) -> Path:
    """The job's output on the 206-page enwiki excerpt (the realistic real-dump run)."""
    if not HAVE_WIKIDUMPS:
        pytest.skip(f"no real dump excerpts at {WIKIDUMPS}")
    out = tmp_path_factory.mktemp("enwiki206_out")
    run_job_here(dump("enwiki-2016-206pages-articles1.xml.bz2"), out, "--validation_fraction", "0.05",
                 "--keep_red_links", "true")
    return out


# -- parallel runs: `make test` runs the suite on 2 processes (pytest-xdist, -n 2) --------------------------
# A session fixture is made once per worker process. So that no corpus job or training run is made twice, the
# tests go to the workers in work units that keep together the tests sharing one: the tests that read one shared
# dump's session run (the dump's name is in the test's id, or in its code or its module's fixtures' code); the
# tests that read the 206-page corpus or the training runs (one unit: the training runs read that corpus); and
# otherwise one unit per module. Units start longest first (the training runs, then the real-dump jobs), so no
# long unit is left for the end. The units are found from the test files' source (the controller collects nothing).
ENWIKI206_DUMP = "enwiki-2016-206pages-articles1.xml.bz2"
ENWIKI206_UNIT = "enwiki206 corpus and the training runs"
_ENWIKI206_FIXTURES = frozenset({"enwiki206_corpus", "corpus_dir", "trainer_runs", "tokenizer_and_ids"})


def _unit_of_reads(names: set[str], params: str, strings: list[str]) -> str | None:
    """The unit of a test that takes or names the fixtures ``names``, has the id parameters ``params`` and holds
    ``strings`` in its code; None when it reads no session corpus. A dump named in the id decides, then the
    206-page corpus, then a dump named in the code."""
    def unit_of_dump_in(texts: list[str]) -> str | None:
        dumps = [name for text in texts for name in _DUMP_NAMES if name in text]
        if not dumps:
            return None
        name = max(dumps, key=len)  # the most specific name (a multistream dump's rather than its stem's)
        return ENWIKI206_UNIT if name == ENWIKI206_DUMP else f"dump {name}"

    if not names & {"shared_dump_corpus", *_ENWIKI206_FIXTURES}:
        return None
    unit = unit_of_dump_in([params])
    if unit is None and names & _ENWIKI206_FIXTURES:
        unit = ENWIKI206_UNIT
    if unit is None and "shared_dump_corpus" in names:
        unit = unit_of_dump_in(strings)
    return unit


@functools.lru_cache(maxsize=None)
def _reads_of_module(module: str) -> dict[str, tuple[set[str], list[str]]]:
    """test function name -> (the fixtures it takes or names, the strings it holds), for ``module``."""
    import ast

    path = REPO / module
    if not path.is_file():
        return {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                 for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value.value, str)}
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def reads(fn, seen=()) -> tuple[set[str], list[str]]:
        """The fixture names ``fn`` takes or names, and the strings it holds, with those of the module's
        fixtures and constants it uses."""
        names = {arg.arg for arg in fn.args.args}
        strings = []
        for node in (inner for statement in fn.body for inner in ast.walk(statement)):  # not the decorators'
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
                names.add(node.value)  # request.getfixturevalue("enwiki206_corpus")
            elif isinstance(node, ast.Name) and node.id in constants:
                strings.append(constants[node.id])
        for name in sorted(names & functions.keys() - {fn.name, *seen}):
            more_names, more_strings = reads(functions[name], (*seen, fn.name))
            names |= more_names
            strings += more_strings
        return names, strings

    return {name: reads(fn) for name, fn in functions.items() if name.startswith("test")}


def work_unit(nodeid: str) -> str:
    """The unit of work a test goes to (a test id -> a name); see above."""
    module, _, rest = nodeid.partition("::")
    name, _, params = rest.rpartition("::")[2].partition("[")
    names, strings = _reads_of_module(module).get(name, (set(), []))
    unit = _unit_of_reads(names, params, strings)
    if unit:
        return unit
    return ENWIKI206_UNIT if module.startswith("tests/trainer/") else module


def _unit_order(unit: str) -> int:
    return 0 if unit == ENWIKI206_UNIT else 1 if unit.startswith("dump ") else 2


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkScheduling(LoadScopeScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # the collection's order (below), not the units' sizes

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SharedWorkScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if getattr(config, "workerinput", None) is not None:  # an xdist worker (the controller collects nothing)
        items.sort(key=lambda item: _unit_order(work_unit(item.nodeid)))  # stable: modules keep their order


def tokenizer_behaviour(folder, texts: list[str], markers: tuple[str, ...] = ()) -> dict:
    """What AutoTokenizer makes of a tokenizer folder, for comparing two folders: its class, size, special ids,
    the ids of ``markers``, and the ids, offsets and decoding (with and without specials) of ``texts``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    encoded = [tok(text, return_offsets_mapping=True) for text in texts]
    return {"class": type(tok), "len": len(tok), "specials": sorted(tok.all_special_ids),
            "named": [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id, tok.unk_token_id],
            "markers": tok.convert_tokens_to_ids(list(markers)), "ids": [e["input_ids"] for e in encoded],
            "offsets": [e["offset_mapping"] for e in encoded],
            "decoded": [tok.decode(e["input_ids"], skip_special_tokens=skip) for e in encoded
                        for skip in (False, True)]}
