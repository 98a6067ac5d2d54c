"""The logic of the wiki_corpus DAG's tasks, as plain functions (testable without Airflow).

Top-level imports are the standard library only: the scheduler imports the DAG file (and
so this module) often; Beam, pyarrow and the project's packages are imported inside the
functions, in the task's process.

Layout under the output root (any Beam filesystem: local, gs://, s3://):

    OUT_ROOT/WIKI/DUMPDATE/                    one published partition per dump date
    OUT_ROOT/WIKI/_tmp-DUMPDATE-RUNTOKEN/      where a run's job writes; published only once valid
    OUT_ROOT/_dumps/WIKI/DUMPDATE/             verified downloads (dump, index, dumpstatus.json)
    OUT_ROOT/_runs/WIKI/DUMPDATE/RUNTOKEN/     training runs (a retry of the task resumes there)
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

PROJECT_DIR = Path(os.environ.get("WIKIEDM_HOME") or Path(__file__).resolve().parents[1])
MIRROR_SCHEMES = ("http://", "https://", "ftp://", "file://")
_WIKI = re.compile(r"^[a-z][a-z0-9_]*$")
_DATE = re.compile(r"^\d{8}$")
# Job flags the plan sets itself; a user's job_options may not override them.
_PLANNED_FLAGS = ("input", "output")


class PlanError(ValueError):
    """The DAG run's params are inconsistent; the message says which."""


def project_python() -> str:
    """The interpreter that has the project and its pinned dependencies (the Beam job runs there)."""
    if os.environ.get("WIKIEDM_PYTHON"):
        return os.environ["WIKIEDM_PYTHON"]
    venv = PROJECT_DIR / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def is_mirror_url(source: str) -> bool:
    return source.startswith(MIRROR_SCHEMES)


def run_token(run_id: str) -> str:
    """An Airflow run id (``manual__2024-06-01T00:00:00+00:00``) as a path- and GCS-safe name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id).strip("_") or uuid.uuid4().hex[:12]


def _join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts)])


def _project_path(path: str) -> str:
    """A path relative to the project (configs/..., ./setup.py) made absolute; URLs and absolute paths kept."""
    if not path or "://" in path or os.path.isabs(path):
        return path
    return str((PROJECT_DIR / path).resolve())


def _flag_value(value):
    """The job's boolean flags take a value (``--keep_red_links true``); Beam's bare flags stay booleans."""
    return str(value).lower() if isinstance(value, bool) else value


def plan_run(params: dict, run_id: str) -> dict:
    """Every path and option of one DAG run, decided once (the other tasks read it from XCom)."""
    wiki, date = params["wiki"], str(params["dump_date"])
    if not _WIKI.match(wiki):
        raise PlanError(f"wiki {wiki!r}: expected a database name such as enwiki")
    if not _DATE.match(date):
        raise PlanError(f"dump_date {date!r}: expected YYYYMMDD")
    out_root = _project_path(params["output_root"].strip()).rstrip("/")  # relative: to the project folder
    if not out_root:
        raise PlanError("output_root is empty")
    token = run_token(run_id)
    wiki_root = _join(out_root, wiki)
    source = params["input"].strip()
    if is_mirror_url(source):
        download_dir = _join(_project_path(params.get("download_root") or "") or _join(out_root, "_dumps"), wiki, date)
        names = {"dump": f"{wiki}-{date}-pages-articles-multistream.xml.bz2",
                 "index": f"{wiki}-{date}-pages-articles-multistream-index.txt.bz2"}
        dump, fetch = _join(download_dir, names["dump"]), {"mirror": source, "dest": download_dir}
    else:
        dump, fetch = _project_path(source), None
    staging = _join(wiki_root, f"_tmp-{date}-{token}")
    job_options = dict(params.get("job_options") or {})
    clash = sorted(set(job_options) & set(_PLANNED_FLAGS))
    if clash:
        raise PlanError(f"job_options may not set {clash}: the DAG decides input and output")
    runner_options = dict(params.get("runner_options") or {})
    if runner_options.get("setup_file"):
        runner_options["setup_file"] = _project_path(runner_options["setup_file"])
    pipeline_options = {"input": dump, "output": staging}
    if params.get("job_config"):
        pipeline_options["config"] = _project_path(params["job_config"])
    pipeline_options.update({k: _flag_value(v) for k, v in job_options.items()})
    pipeline_options.update(runner_options)
    dataflow = params["runner"] == "DataflowRunner"
    if dataflow and not (runner_options.get("project") and runner_options.get("region")
                         and str(runner_options.get("temp_location", "")).startswith("gs://")):
        raise PlanError("DataflowRunner needs runner_options project, region and a gs:// temp_location")
    if dataflow and not out_root.startswith("gs://"):
        raise PlanError("DataflowRunner workers cannot write a local output_root; use gs://")
    return {
        "wiki": wiki,
        "dump_date": date,
        "run_token": token,
        "fetch": fetch,
        "dump": dump,
        "staging": staging,
        "partition": _join(wiki_root, date),
        "wiki_root": wiki_root,
        "run_dir": _join(_project_path(params.get("runs_root") or "") or _join(out_root, "_runs"), wiki, date, token),
        "pipeline_options": pipeline_options,
        # The Beam provider's Dataflow path reads project and region from here (DataflowConfiguration).
        "dataflow_config": ({"project_id": runner_options["project"], "location": runner_options["region"],
                             "job_name": f"wiki-corpus-{wiki}-{date}".replace("_", "-"), "append_job_name": True}
                            if dataflow else {}),
    }


def check_input(plan: dict) -> None:
    """Fail before any work when a local or gs:// input does not exist (a mirror is checked by fetching)."""
    if plan["fetch"] is None:
        from pipelines import storage

        if not storage.exists(plan["dump"]):
            raise PlanError(f"input {plan['dump']} does not exist")


def fetch(plan: dict) -> dict:
    """Download and verify the dump, its index and dumpstatus.json (a verified copy is kept)."""
    from pipelines.fetch_dump import fetch_dump

    # One retry mechanism: the task's own Airflow retries (a retried task keeps every file that already
    # verifies), so no download loop runs inside them (was 3 attempts x 3 task tries x per-file retries).
    result = fetch_dump(plan["wiki"], plan["dump_date"], plan["fetch"]["dest"], mirror=plan["fetch"]["mirror"],
                        retries=0)
    if result.dump != plan["dump"]:
        raise PlanError(f"fetched {result.dump}, the plan expected {plan['dump']}")
    return result.to_dict()


def validate(staging: str) -> dict:
    """Check the job's output against its manifest (files, bytes, sha256, rows, schemas); a small summary."""
    from pipelines.validate import validate_output

    manifest = validate_output(staging)
    return {"files": len(manifest["files"]), "passages": manifest["summary"]["passages"],
            "mentions": manifest["summary"]["mentions"], "manifest": _join(staging, "manifest.json")}


def write_card(staging: str, dump_date: str) -> str:
    from pipelines.dataset_card import write_dataset_card

    return write_dataset_card(staging, dump_date=dump_date)


# ----------------------------------------------------------------------------- publishing


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _rename_exchange(a: str, b: str) -> bool:
    """Atomically swap two directories (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a filesystem without the flag
        return False
    raise OSError(err, os.strerror(err), b)


def publish_partition(staging: str, partition: str, *, method: str = "auto") -> str:
    """Replace ``partition`` whole with the validated ``staging`` folder; return how it was done.

    Local filesystems (``rename``): with no old partition, one atomic rename; otherwise the two
    directories are exchanged atomically (renameat2) and the old one, now at ``staging``, is
    deleted, so a reader sees the old partition or the new one, never a mix. Where the exchange
    is unsupported, two renames: the old partition moves aside, the new one takes its name.

    Object stores (``copy``, gs:// and s3://, which have no directory rename): copy-then-delete
    with the manifest as the commit point. The old partition's manifest.json is deleted first (from
    then on the folder reads as an incomplete run), then its other files; the new files are
    copied with manifest.json last; then staging is deleted. A reader that checks for
    manifest.json (pipelines.validate, the trainer) never takes a half-copied partition.
    """
    if method == "auto":
        method = "rename" if _is_local(partition) and _is_local(staging) else "copy"
    if method == "rename":
        staging_dir, partition_dir = staging.removeprefix("file://"), partition.removeprefix("file://")
        if not os.path.isdir(partition_dir):
            os.makedirs(os.path.dirname(partition_dir), exist_ok=True)
            os.rename(staging_dir, partition_dir)
            return "rename"
        if _rename_exchange(staging_dir, partition_dir):
            shutil.rmtree(staging_dir)  # now the old partition
            return "exchange"
        aside = f"{partition_dir.rstrip('/')}-old-{uuid.uuid4().hex[:8]}"
        os.rename(partition_dir, aside)
        os.rename(staging_dir, partition_dir)
        shutil.rmtree(aside)
        return "rename-aside"
    if method != "copy":
        raise ValueError(f"unknown publish method {method!r}")
    from apache_beam.io.filesystems import FileSystems

    from pipelines import storage

    old_manifest = storage.join(partition, storage.MANIFEST)
    if storage.exists(old_manifest):
        storage.delete_files([old_manifest])
    storage.delete_files(storage.list_files(partition))
    sources = storage.list_files(staging)
    relative = [storage.relative_to(staging, s) for s in sources]
    if storage.MANIFEST not in relative:
        raise PlanError(f"{staging} has no {storage.MANIFEST}: not a finished run, not published")
    ordered = sorted(zip(relative, sources), key=lambda rs: rs[0] == storage.MANIFEST)  # manifest last
    body = [(r, s) for r, s in ordered if r != storage.MANIFEST]
    if body:
        FileSystems.copy([s for _, s in body], [storage.join(partition, r) for r, _ in body])
    FileSystems.copy([storage.join(staging, storage.MANIFEST)], [storage.join(partition, storage.MANIFEST)])
    storage.delete_files(sources)
    if _is_local(staging) and os.path.isdir(staging):
        shutil.rmtree(staging)
    return "copy"


def remove_leftovers(wiki_root: str, dump_date: str) -> list[str]:
    """Delete the staging folders earlier failed runs of this dump date left (``_tmp-DATE-*``).

    Safe because the DAG runs one run at a time (max_active_runs=1); other dates are untouched.
    """
    prefix = f"_tmp-{dump_date}-"
    removed = []
    if _is_local(wiki_root):
        root = wiki_root.removeprefix("file://")
        if os.path.isdir(root):
            for name in sorted(os.listdir(root)):
                if name.startswith(prefix) or (name.startswith(f"{dump_date}-old-")):
                    shutil.rmtree(os.path.join(root, name))
                    removed.append(_join(wiki_root, name))
        return removed
    from pipelines import storage

    for path in storage.list_files(wiki_root):
        top = storage.relative_to(wiki_root, path).split("/", 1)[0]
        if top.startswith(prefix):
            removed.append(path)
    storage.delete_files(removed)
    return removed


def publish(plan: dict) -> dict:
    from pipelines.validate import validate_output

    how = publish_partition(plan["staging"], plan["partition"])
    removed = remove_leftovers(plan["wiki_root"], plan["dump_date"])
    # Cheap re-check where the files were copied (rename keeps the same files: nothing to re-hash).
    validate_output(plan["partition"], check_sha256=False)
    return {"partition": plan["partition"], "method": how, "removed_leftovers": removed}


# ----------------------------------------------------------------------------- training


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_command(params: dict, data: str, run_dir: str, python: str, port: int) -> list[str]:
    """``python -m wikiedm.cli pretrain --num_gpus N --master_port P --config C --corpus OUT --output RUN --max_steps S``.

    ``train_launcher``: '' = ``wikiedm pretrain --num_gpus N`` (its ranks through DeepSpeed's launcher);
    ``python`` runs one process; any other command (``torchrun``, ``deepspeed``) is given the installed trainer's file.
    """
    common = ["--config", _project_path(params["train_config"]), "--corpus", data, "--output", run_dir]
    if params.get("train_max_steps"):
        common += ["--max_steps", str(params["train_max_steps"])]
    common += [str(a) for a in params.get("train_extra_args") or []]
    launcher = params.get("train_launcher") or ""
    if launcher == "python":
        return [python, "-m", "wikiedm.cli", "pretrain", *common]
    if not launcher:
        return [python, "-m", "wikiedm.cli", "pretrain", "--num_gpus", str(params.get("train_num_procs") or 1),
                "--master_port", str(port), *common]
    import importlib.util

    ranks = "--num_gpus" if Path(launcher).name == "deepspeed" else "--nproc_per_node"  # deepspeed's or torchrun's
    return [launcher, ranks, str(params.get("train_num_procs") or 1), "--master_port", str(port),
            importlib.util.find_spec("trainer.pretrain").origin, *common]


def train(params: dict, plan: dict, python: str, log) -> str:
    """Run the trainer on the published partition; its output goes to the run's own folder."""
    if not _is_local(plan["partition"]) or not _is_local(plan["run_dir"]):
        raise PlanError("the train task runs on local (or mounted) paths; train on gs:// data where the GPUs are")
    port = free_port()
    cmd = train_command(params, plan["partition"], plan["run_dir"], python, port)
    log.info("training: %s", " ".join(cmd))
    env = {**os.environ, "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # into the task log as it comes
        log.info("%s", line.rstrip())
    if proc.wait() != 0:
        raise RuntimeError(f"training exited with {proc.returncode}: {' '.join(cmd)}")
    return plan["run_dir"]
