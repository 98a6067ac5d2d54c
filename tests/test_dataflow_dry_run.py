"""Dataflow, offline: the full job graph built by the real DataflowRunner (--dry_run true: built,
staged locally, not submitted), and the setup.py package Dataflow workers install."""
from __future__ import annotations

import email
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from apache_beam.runners.dataflow import dataflow_runner

from pipelines.wiki_mentions import run
from tests.conftest import HAVE_WIKIDUMPS, REPO, dump

pytestmark = pytest.mark.slow

NAMED_STEPS = ("ParseWikiDump", "BuildTables", "WritePassagesByRange", "WriteEntityVocab", "WriteManifest")
# Valid-looking names: Beam validates them even in a dry run, and an invalid bucket (such as the 1-letter
# "gs://b") sends it looking for a default bucket over the network.
GCP = ["--project", "wikiedm-dry-run", "--region", "us-central1", "--temp_location", "gs://wikiedm-dry-run/tmp",
       "--setup_file", "./setup.py"]


class DataflowRunner(dataflow_runner.DataflowRunner):
    """The real DataflowRunner; it keeps the instance of its last run so a test can read the job it built.
    (Named like its base: Beam validates the options of a runner by that name as for the Dataflow service.)"""

    last: "DataflowRunner | None" = None

    def run_pipeline(self, pipeline, options, pipeline_proto=None):
        result = super().run_pipeline(pipeline, options, pipeline_proto)
        type(self).last = self
        return result


@pytest.fixture
def excerpt(sample_dump) -> str:
    """The multistream excerpt (its index beside it: several read ranges), or the project's sample."""
    return dump("enwiki-2016-206pages-articles1-multistream.xml.bz2") if HAVE_WIKIDUMPS else sample_dump


def test_dataflow_job_graph_has_every_named_step(excerpt, monkeypatch, capsys):
    """One dry run (what `python -m pipelines.wiki_mentions ... --runner=DataflowRunner --dry_run true` calls:
    its main is run(argv)); the job is built, staged locally and not submitted."""
    monkeypatch.chdir(REPO)  # --setup_file ./setup.py, as in docs/orchestration.md
    DataflowRunner.last = None
    rc = run(["--input", excerpt, "--output", "gs://wikiedm-dry-run/out", "--read_range_mb", "1",
              f"--runner={__name__}.DataflowRunner", "--dry_run", "true", *GCP])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "dry run with " in printed and "DataflowRunner: the job graph was built and not submitted" in printed
    runner = DataflowRunner.last
    assert runner is not None and runner.job is not None
    proto = runner.proto_pipeline  # what the Dataflow job carries (runner v2: the portable pipeline)
    transforms = proto.components.transforms
    names = {t.unique_name for t in transforms.values()}
    top_level = {transforms[s].unique_name for root in proto.root_transform_ids for s in transforms[root].subtransforms}
    assert set(NAMED_STEPS) <= top_level, sorted(set(NAMED_STEPS) - top_level)
    # Pass 1's steps group run paths by shard (the runs reach the workers as files under the output folder),
    # its store is pass 2's side input; pass 2 writes its files where it reads them; the manifest reads every
    # written file as a side input.
    assert {"BuildTables/ResolveTitlesGroupByShard", "BuildTables/BuildAliasRows",
            "BuildTables/WriteLookupStoreGroupByShard", "WritePassagesByRange/LabelTokenizeWrite",
            "WriteManifest"} <= names
    assert runner.job.proto.type_.name == "JOB_TYPE_BATCH"
    # Workers get the project as an sdist built from setup.py, staged as workflow.tar.gz.
    from apache_beam.portability.api import beam_runner_api_pb2

    staged = set()
    for env in proto.components.environments.values():
        assert env.urn == "beam:env:docker:v1"
        for dep in env.dependencies:
            role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
            staged.add(role.staged_name)
    assert "workflow.tar.gz" in staged


def _job_modules() -> list[str]:
    """The first-party files loaded once the corpus job's module (and the DAG's helpers) are imported."""
    script = (
        "import json, sys\n"
        "import pipelines.wiki_mentions, pipelines.dataset_card, pipelines.fetch_dump, pipelines.validate\n"
        "print(json.dumps(sorted(m.__file__ for n, m in list(sys.modules.items())\n"
        "                        if n.split('.')[0] in ('pipelines', 'schemas') and getattr(m, '__file__', None))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _imported_names(files: list[str]) -> set[str]:
    """Top-level names of every import statement in ``files`` (lazy ones inside functions too)."""
    import ast

    names = set()
    for f in files:
        for node in ast.walk(ast.parse(Path(f).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("__future__", "pipelines", "schemas")}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_closure(roots: set[str]) -> set[str]:
    """The declared requirements and everything they pull in (as installed here), normalised names."""
    import importlib.metadata as md

    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req and "gcp" not in req:  # apache-beam[gcp] is what the job declares
                continue
            todo.append(_normalise(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0]))
    return seen


def test_setup_py_sdist_ships_the_job_and_declares_its_runtime_dependencies(tmp_path: Path):
    """Build the sdist the way Beam's stager falls back to (`python setup.py sdist`) from a copy of the
    packaging files; every module the job loads must be in it, every third-party distribution it loads
    must be required (directly or through a declared requirement), and it must install and import."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("wikiedm", "pipelines", "schemas", "trainer", "linker"):
        if (REPO / package).is_dir():
            shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)], cwd=src,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = dist.glob("wikiedm-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
        pkg_info = email.message_from_bytes(tar.extractfile(f"{tar.getnames()[0].split('/')[0]}/PKG-INFO").read())

    files = _job_modules()
    shipped = {str(Path(f).resolve().relative_to(REPO)) for f in files}
    assert {"pipelines/wiki_mentions.py", "pipelines/dump/multistream.py", "schemas/corpus.py"} <= shipped
    assert shipped <= members, sorted(shipped - members)
    for package in ("pipelines", "schemas"):
        on_disk = {str(p.relative_to(REPO)) for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts}
        assert on_disk <= members, sorted(on_disk - members)

    import importlib.metadata as md

    declared = {_normalise(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0])
                for r in pkg_info.get_all("Requires-Dist") or [] if "extra ==" not in r}
    assert {"apache-beam", "pyarrow", "mwparserfromhell", "zstandard", "tokenizers", "transformers", "pyyaml"} <= declared
    covered = _requirement_closure(declared)
    by_module = md.packages_distributions()
    imports = _imported_names(files)
    unpackaged = sorted(n for n in imports if n not in by_module)  # e.g. a first-party package setup.py leaves out
    assert not unpackaged, f"the job imports modules no installed distribution (nor the sdist) provides: {unpackaged}"
    first_party = {n for n in imports if "wikiedm" in by_module[n]}  # shipped in the sdist itself
    assert all(any(m.startswith(f"{n}/") for m in members) for n in first_party), first_party
    missing = sorted(n for n in imports - first_party if not any(_normalise(d) in covered for d in by_module[n]))
    assert not missing, f"the job imports distributions setup.py does not require: {missing}"

    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(sdist)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = (f"import sys; sys.path.insert(0, {str(target)!r}); import pipelines.wiki_mentions as w, schemas; "
             f"assert w.__file__.startswith({str(target)!r}), w.__file__; print('ok')")
    proc = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
