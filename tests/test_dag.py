"""The wiki_corpus Airflow DAG: its task graph (DagBag), and real `airflow dags test` runs end to end
(sqlite in a temporary AIRFLOW_HOME, the DirectRunner, the tiny trainer), twice for one dump date.

The Airflow tests are skipped when Airflow or the Beam provider is not installed (`make test`
installs both, see requirements-airflow.txt); the publishing tests below need only the project.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.validate import validate_output
from tests.conftest import HAVE_WIKIDUMPS, REPO, dump

sys.path.insert(0, str(REPO / "dags"))
import wiki_corpus_tasks as dag_tasks  # noqa: E402  (standard library only; no Airflow needed)


def _installed(distribution: str) -> bool:
    """Without importing it: importing airflow here would write ~/airflow (no AIRFLOW_HOME in this process)."""
    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


HAVE_AIRFLOW = _installed("apache-airflow") and _installed("apache-airflow-providers-apache-beam")
needs_airflow = pytest.mark.skipif(
    not HAVE_AIRFLOW, reason="Airflow 3 and apache-airflow-providers-apache-beam are not installed "
                             "(pip install -r requirements-airflow.txt -c constraints.txt)")
HAVE_TRAINER = (REPO / "trainer" / "pretrain.py").exists() and importlib.util.find_spec("deepspeed") is not None

EXPECTED_UPSTREAM = {
    "plan": set(),
    "fetch_dump": {"plan"},
    "run_corpus_job": {"plan", "fetch_dump"},
    "validate_corpus": {"plan", "run_corpus_job"},
    "write_dataset_card": {"plan", "validate_corpus"},
    "publish_partition": {"plan", "write_dataset_card"},
    "train": {"plan", "publish_partition"},
}
DUMP_DATE = "20200101"


# ----------------------------------------------------------------------------- publishing (no Airflow)


def _corpus_copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["auto", "copy"], ids=["local-rename", "object-store-copy-then-delete"])
def test_publish_replaces_the_partition_whole(sample_corpus: Path, tmp_path: Path, method: str):
    wiki_root = tmp_path / "enwiki"
    partition = wiki_root / DUMP_DATE
    old = _corpus_copy(sample_corpus, partition)
    (old / "passages" / "train-00000-of-00099.parquet").write_bytes(b"a shard of an older run")
    (old / "left-by-hand.txt").write_text("stale")
    staging = _corpus_copy(sample_corpus, wiki_root / f"_tmp-{DUMP_DATE}-run2")
    (staging / "README.md").write_text("new card")
    expected = _tree(staging)
    (wiki_root / f"_tmp-{DUMP_DATE}-crashed-run").mkdir()  # an earlier failed run's leftovers
    (wiki_root / "_tmp-20191201-other-date").mkdir()

    how = dag_tasks.publish_partition(str(staging), str(partition), method=method)
    removed = dag_tasks.remove_leftovers(str(wiki_root), DUMP_DATE)

    assert how in (("rename", "exchange", "rename-aside") if method == "auto" else ("copy",))
    assert _tree(partition) == expected  # exactly the new files: nothing of the old partition survives
    validate_output(str(partition))
    assert removed == [str(wiki_root / f"_tmp-{DUMP_DATE}-crashed-run")]
    assert sorted(p.name for p in wiki_root.iterdir()) == [DUMP_DATE, "_tmp-20191201-other-date"]


def test_plan_decides_paths_and_refuses_bad_params(tmp_path: Path):
    params = {"wiki": "enwiki", "dump_date": DUMP_DATE, "input": "https://mirror.example/dumps",
              "output_root": "gs://bucket/corpus/", "runner": "DataflowRunner",
              "runner_options": {"project": "p", "region": "r", "temp_location": "gs://bucket/tmp",
                                 "setup_file": "./setup.py"},
              "job_config": "configs/pipeline/enwiki-full.yaml", "job_options": {"keep_red_links": False}}
    plan = dag_tasks.plan_run(params, "scheduled__2024-06-01T00:00:00+00:00")
    assert plan["partition"] == "gs://bucket/corpus/enwiki/20200101"
    assert plan["staging"] == "gs://bucket/corpus/enwiki/_tmp-20200101-scheduled__2024-06-01T00_00_00_00_00"
    assert plan["dump"] == "gs://bucket/corpus/_dumps/enwiki/20200101/enwiki-20200101-pages-articles-multistream.xml.bz2"
    opts = plan["pipeline_options"]
    assert opts["setup_file"] == str(REPO / "setup.py") and opts["config"] == str(REPO / "configs/pipeline/enwiki-full.yaml")
    assert opts["keep_red_links"] == "false"  # the job's flags take a value
    assert plan["dataflow_config"]["project_id"] == "p" and plan["dataflow_config"]["location"] == "r"
    with pytest.raises(dag_tasks.PlanError, match="gs://"):
        dag_tasks.plan_run({**params, "output_root": str(tmp_path)}, "r")
    with pytest.raises(dag_tasks.PlanError, match="input and output"):
        dag_tasks.plan_run({**params, "job_options": {"output": "x"}}, "r")
    with pytest.raises(dag_tasks.PlanError, match="YYYYMMDD"):
        dag_tasks.plan_run({**params, "dump_date": "2020-01-01"}, "r")


# ----------------------------------------------------------------------------- Airflow


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("airflow_home")
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "WIKIEDM_PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO"}
    proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return env


_GRAPH = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=%r)
dag = bag.dags.get("wiki_corpus")
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dags),
    "tasks": {t.task_id: {"upstream": sorted(t.upstream_task_ids), "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule),
                          "operator": [c.__name__ for c in type(t).__mro__]} for t in dag.tasks} if dag else {},
    "params": sorted(dag.params) if dag else [],
    "max_active_runs": dag.max_active_runs if dag else None,
    "schedule": str(dag.schedule) if dag else None,
}))
"""


@needs_airflow
def test_dagbag_imports_with_the_expected_task_graph(airflow_env):
    proc = subprocess.run([sys.executable, "-c", _GRAPH % str(REPO / "dags")], env=airflow_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["errors"] == {}
    assert got["dags"] == ["wiki_corpus"]  # the helper modules are not DAG files (.airflowignore)
    assert {t: set(v["upstream"]) for t, v in got["tasks"].items()} == EXPECTED_UPSTREAM
    job = got["tasks"]["run_corpus_job"]
    assert "BeamRunPythonPipelineOperator" in job["operator"]
    assert job["trigger_rule"] == "none_failed"  # runs after a skipped fetch, never after a failed one
    assert {"wiki", "dump_date", "input", "output_root", "runner", "runner_options", "job_config", "job_options",
            "py_interpreter", "train", "train_config", "train_max_steps"} <= set(got["params"])
    assert got["max_active_runs"] == 1 and got["schedule"] in ("None", "null")


def _dags_test(env: dict, logical_date: str, conf: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "wiki_corpus", logical_date,
                           "-c", json.dumps(conf)], env=env, capture_output=True, text=True, timeout=900)


def _task_states(env: dict) -> dict[str, str]:
    """Task states of the latest run, from Airflow's own database."""
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as db:
        run_id = db.execute("SELECT run_id FROM dag_run WHERE dag_id='wiki_corpus' ORDER BY id DESC LIMIT 1").fetchone()[0]
        rows = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id='wiki_corpus' AND run_id=?", (run_id,))
        return dict(rows.fetchall())


def _fail_message(proc: subprocess.CompletedProcess) -> str:
    return f"airflow dags test failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"


@pytest.fixture
def mirror_of_the_206_page_dump(tmp_path):
    """A Wikimedia mirror layout on 127.0.0.1 serving the multistream excerpt as enwiki's DUMP_DATE run."""
    if not HAVE_WIKIDUMPS:
        yield None
        return
    from tests.test_fetch_dump import Mirror

    run = tmp_path / "mirror" / "enwiki" / DUMP_DATE
    run.mkdir(parents=True)
    files = {}
    for kind, src in (("", "enwiki-2016-206pages-articles1-multistream.xml.bz2"),
                      ("-index", "enwiki-2016-206pages-articles1-multistream-index.txt.bz2")):
        ext = ".xml.bz2" if not kind else ".txt.bz2"
        name = f"enwiki-{DUMP_DATE}-pages-articles-multistream{kind}{ext}"
        data = Path(dump(src)).read_bytes()
        (run / name).write_bytes(data)
        files[name] = {"size": len(data), "url": f"/enwiki/{DUMP_DATE}/{name}",
                       "md5": hashlib.md5(data).hexdigest(), "sha1": hashlib.sha1(data).hexdigest()}
    status = {"jobs": {"articlesmultistreamdump": {"status": "done", "updated": "2020-01-02 03:04:05", "files": files}},
              "version": "0.8"}
    (run / "dumpstatus.json").write_text(json.dumps(status))
    server = Mirror(tmp_path / "mirror")
    yield server
    server.close()


@needs_airflow
@pytest.mark.slow
def test_dags_test_end_to_end_twice_replaces_the_partition_whole(airflow_env, sample_dump, tmp_path,
                                                                  mirror_of_the_206_page_dump):
    out_root = tmp_path / "corpus"
    wiki_root, partition = out_root / "enwiki", out_root / "enwiki" / DUMP_DATE
    first_input = dump("enwiki-2020-tiny-7pages.xml.bz2") if HAVE_WIKIDUMPS else sample_dump
    base = {"wiki": "enwiki", "dump_date": DUMP_DATE, "output_root": str(out_root), "py_interpreter": sys.executable}

    # Run 1: a local dump (fetch skipped), then a 2-step training run when the trainer is there.
    proc = _dags_test(airflow_env, "2026-01-01T00:00:00+00:00", {
        **base, "input": first_input, "job_options": {"keep_red_links": True, "progress_every_s": 5},
        "train": HAVE_TRAINER, "train_max_steps": 2})
    assert proc.returncode == 0, _fail_message(proc)
    states = _task_states(airflow_env)
    assert states["fetch_dump"] == "skipped"
    assert {t: s for t, s in states.items() if t not in ("fetch_dump", "train")} == {
        t: "success" for t in EXPECTED_UPSTREAM if t not in ("fetch_dump", "train")}
    first = validate_output(str(partition))
    assert first["config"]["input"] == first_input and first["config"]["progress_every_s"] == 5
    assert (partition / "README.md").read_text().startswith("---\nlicense: cc-by-sa-4.0")
    assert sorted(p.name for p in wiki_root.iterdir()) == [DUMP_DATE]  # no staging folder left
    if HAVE_TRAINER:
        assert states["train"] == "success"
        (run_dir,) = (out_root / "_runs" / "enwiki" / DUMP_DATE).iterdir()
        steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                 if json.loads(line).get("split") == "train"]
        assert steps == [1, 2]
        assert (run_dir / "checkpoints" / "latest").exists()
    else:
        assert states["train"] == "skipped"

    # Things only the old partition has: they must not survive the re-run.
    (partition / "passages" / "train-00007-of-00099.parquet").write_bytes(b"an older run's shard")
    (partition / "notes.txt").write_text("left by hand")

    # Run 2, same dump date: fetched from a mirror (checksums verified) when ../shared is there, read in
    # parallel by multistream ranges on 2 workers (one passages file per range and split); no training.
    mirror = mirror_of_the_206_page_dump
    second = {**base, "input": mirror.url if mirror else sample_dump, "train": False,
              "job_options": {"keep_red_links": True, "read_range_mb": 1},
              "runner_options": {"direct_num_workers": 2, "direct_running_mode": "multi_processing"}}
    proc = _dags_test(airflow_env, "2026-01-02T00:00:00+00:00", second)
    assert proc.returncode == 0, _fail_message(proc)
    states = _task_states(airflow_env)
    assert states["train"] == "skipped"
    assert states["fetch_dump"] == ("success" if mirror else "skipped")
    m = validate_output(str(partition))
    on_disk = sorted(str(p.relative_to(partition)) for p in partition.rglob("*") if p.is_file())
    assert on_disk == sorted([f["path"] for f in m["files"]] + ["manifest.json", "stats.json", "README.md"])
    n = m["job"]["read_ranges"]  # one passages file per read range and split (2 for the 206-page mirror)
    assert n == (2 if mirror else 1)
    assert sorted(p.name for p in (partition / "passages").iterdir()) == [
        f"{split}-{i:05d}-of-{n:05d}.parquet" for split in ("train", "validation") for i in range(n)]
    assert sorted(p.name for p in wiki_root.iterdir()) == [DUMP_DATE]
    if mirror:
        downloads = out_root / "_dumps" / "enwiki" / DUMP_DATE
        assert m["config"]["input"] == str(downloads / f"enwiki-{DUMP_DATE}-pages-articles-multistream.xml.bz2")
        assert m["job"]["read_ranges"] >= 2 and m["counters"]["pages_read"] == 206
        assert sorted(p.name for p in downloads.iterdir()) == sorted(
            ["dumpstatus.json", f"enwiki-{DUMP_DATE}-pages-articles-multistream.xml.bz2",
             f"enwiki-{DUMP_DATE}-pages-articles-multistream-index.txt.bz2"])
        assert f"| dump date | {DUMP_DATE} |" in (partition / "README.md").read_text()

    # Run 3: a bad input fails loudly in `plan` and leaves the published partition as it was.
    before = _tree(partition)
    proc = _dags_test(airflow_env, "2026-01-03T00:00:00+00:00", {**base, "input": str(tmp_path / "missing.xml.bz2")})
    assert _task_states(airflow_env)["plan"] == "failed"
    assert "does not exist" in proc.stdout + proc.stderr
    assert _tree(partition) == before
