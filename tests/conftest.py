"""Shared fixtures: the real dump excerpts in ../shared/wikidumps, the project's own
sample dump, and a helper that runs the corpus job for real (DirectRunner)."""
from __future__ import annotations

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


def dump(name: str) -> str:
    return str(WIKIDUMPS / name)


def run_job(input_path: str, output: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the corpus job in a subprocess, exactly as a user would (python -m)."""
    cmd = [sys.executable, "-m", "pipelines.wiki_mentions", "--input", input_path, "--output", str(output),
           "--progress_every_s", "60", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"job failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def sample_dump(tmp_path_factory) -> str:
    from pipelines.sample_dump import write_sample

    return write_sample(str(tmp_path_factory.mktemp("sample") / "samplewiki-pages-articles.xml.bz2"))


@pytest.fixture(scope="session")
def sample_corpus(tmp_path_factory, sample_dump) -> Path:
    """The job's output on the project's own sample (shared by several tests)."""
    out = tmp_path_factory.mktemp("sample_out")
    run_job(sample_dump, out, "--num_shards", "3", "--validation_fraction", "0.1")
    return out


# How the tests that take any shared dump run the job on it, once per session (shared_dump_corpus).
SHARED_DUMP_JOB_ARGS = ("--keep_red_links", "true", "--num_shards", "1", "--validation_fraction", "0.3")


class SharedDumpCorpora:
    """NAME -> the job's output on ../shared/wikidumps/NAME with SHARED_DUMP_JOB_ARGS, made once when first
    asked for; ``stdout[NAME]`` is what that run printed."""

    def __init__(self, root_factory) -> None:
        self.root_factory, self.made, self.stdout = root_factory, {}, {}

    def __call__(self, name: str) -> Path:
        if name not in self.made:
            out = self.root_factory.mktemp("shared_dump_out")
            self.stdout[name] = run_job(dump(name), out, *SHARED_DUMP_JOB_ARGS).stdout
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
    run_job(dump("enwiki-2016-206pages-articles1.xml.bz2"), out, "--num_shards", "2",
            "--validation_fraction", "0.05", "--keep_red_links", "true")
    return out
