"""wiki_corpus: a Wikipedia dump -> the entity-annotated corpus partition of its dump date (-> a training run).

    plan -> fetch_dump -> run_corpus_job -> validate_corpus -> write_dataset_card -> publish_partition -> train

* plan                  decide every path and option once (XCom); fail early on bad params or a missing input
* fetch_dump            download the multistream dump, its index and dumpstatus.json from a mirror and verify
                        sha1/md5 (skipped when ``input`` is a local or gs:// dump)
* run_corpus_job        ``python -m pipelines.wiki_mentions`` with BeamRunPythonPipelineOperator, Direct or
                        Dataflow runner, writing to OUT_ROOT/WIKI/_tmp-DATE-RUN (never to the partition)
* validate_corpus       every file of manifest.json: present, bytes, sha256, rows, schema; fails loudly
* write_dataset_card    README.md with Hugging Face front matter, in the staging folder
* publish_partition     replace OUT_ROOT/WIKI/DATE whole (atomic directory exchange locally; copy-then-delete
                        with manifest.json as the commit point on gs://) and remove earlier runs' leftovers
* train                 optional: ``deepspeed trainer/pretrain.py --config ... --data PARTITION`` (skipped unless
                        params.train)

Re-running a dump date replaces its partition whole; one run at a time (max_active_runs=1).
Trigger: ``airflow dags trigger wiki_corpus -c '{"wiki": "enwiki", "dump_date": "20240601", ...}'``.
Environment: WIKIEDM_HOME (the project folder; default: this file's parent's parent), WIKIEDM_PYTHON
(the interpreter with the project; default: WIKIEDM_HOME/.venv/bin/python), WIKIEDM_OUTPUT_ROOT.
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta

from airflow.sdk import DAG, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the helpers beside this file
import wiki_corpus_tasks as tasks  # noqa: E402  (standard library only at import)
from wiki_corpus_beam import BeamPythonJobOperator  # noqa: E402

DEFAULT_OUTPUT_ROOT = os.environ.get("WIKIEDM_OUTPUT_ROOT", str(tasks.PROJECT_DIR / "out" / "airflow"))

with DAG(
    dag_id="wiki_corpus",
    description="Wikipedia dump -> entity-annotated pre-training corpus (one partition per dump date)",
    doc_md=__doc__,
    schedule=None,  # dump dates are not calendar dates: trigger with the dump_date to build
    catchup=False,
    max_active_runs=1,  # a run clears its date's leftovers; two runs of one date must not overlap
    tags=["wikiedm", "beam", "wikipedia"],
    default_args={"retries": 0, "owner": "wikiedm"},
    params={
        "wiki": Param("enwiki", type="string", pattern=r"^[a-z][a-z0-9_]*$",
                      description="wiki database name: enwiki, dewiki, simplewiki ..."),
        "dump_date": Param(type="string", pattern=r"^\d{8}$", description="the dump run's date, YYYYMMDD"),
        "input": Param("https://dumps.wikimedia.org", type="string",
                       description="a mirror base URL (http(s)://, file://: fetched and verified), or the path of a "
                                   "dump file (local or gs://: used as it is)"),
        "output_root": Param(DEFAULT_OUTPUT_ROOT, type="string",
                             description="partitions go to OUTPUT_ROOT/WIKI/DUMP_DATE (local or gs://)"),
        "download_root": Param("", type="string", description="where fetched dumps go; '' = OUTPUT_ROOT/_dumps"),
        "runner": Param("DirectRunner", enum=["DirectRunner", "DataflowRunner"]),
        "runner_options": Param({}, type="object",
                                description="Beam options, e.g. {\"direct_num_workers\": 2, \"direct_running_mode\": "
                                            "\"multi_processing\"} or {\"project\": ..., \"region\": ..., "
                                            "\"temp_location\": \"gs://...\", \"setup_file\": \"./setup.py\"}"),
        "job_config": Param("", type="string",
                            description="the job's YAML config, relative to the project (configs/pipeline/enwiki-full.yaml)"),
        "job_options": Param({}, type="object", description="corpus job flags over the config, e.g. {\"read_range_mb\": 64}"),
        "py_interpreter": Param(tasks.project_python(), type="string",
                                description="python of the environment that has the project (runs the Beam job)"),
        "train": Param(False, type="boolean", description="pre-train on the published partition"),
        "train_config": Param("configs/pretrain/tiny.yaml", type="string"),
        "train_max_steps": Param(100, type=["null", "integer"], minimum=1),
        "train_num_procs": Param(1, type="integer", minimum=1, description="ranks (GPUs, or CPU processes)"),
        "train_launcher": Param("", type="string",
                                description="'' = deepspeed beside py_interpreter; 'python' = one process; or a command"),
        "train_extra_args": Param([], type="array", description="more trainer flags, e.g. [\"--train.eval_every\", \"0\"]"),
        "runs_root": Param("", type="string", description="training runs; '' = OUTPUT_ROOT/_runs"),
    },
) as dag:

    @task(retries=0)
    def plan() -> dict:
        ctx = get_current_context()
        try:
            planned = tasks.plan_run(dict(ctx["params"]), ctx["run_id"])
            tasks.check_input(planned)
        except tasks.PlanError as exc:
            raise AirflowFailException(str(exc)) from None  # bad params: retrying will not help
        return planned

    @task(retries=2, retry_delay=timedelta(minutes=5), execution_timeout=timedelta(hours=12))
    def fetch_dump(planned: dict) -> dict:
        if planned["fetch"] is None:
            raise AirflowSkipException(f"input is a dump path ({planned['dump']}): nothing to fetch")
        return tasks.fetch(planned)

    planned = plan()
    fetched = fetch_dump(planned)

    run_corpus_job = BeamPythonJobOperator(
        task_id="run_corpus_job",
        py_file="pipelines.wiki_mentions",
        py_options=["-m"],  # the project's module, importable in py_interpreter's environment
        py_interpreter="{{ params.py_interpreter }}",
        runner="{{ params.runner }}",
        pipeline_options=planned["pipeline_options"],
        dataflow_config=planned["dataflow_config"],
        trigger_rule="none_failed",  # runs after a skipped fetch (local input), never after a failed one
        execution_timeout=timedelta(hours=24),
    )

    @task(retries=0)
    def validate_corpus(planned: dict) -> dict:
        from pipelines.validate import InvalidOutputError

        try:
            return tasks.validate(planned["staging"])
        except InvalidOutputError as exc:
            raise AirflowFailException(f"the corpus job's output is not valid, nothing published: {exc}") from None

    @task
    def write_dataset_card(planned: dict) -> str:
        return tasks.write_card(planned["staging"], planned["dump_date"])

    @task(retries=1)
    def publish_partition(planned: dict) -> dict:
        return tasks.publish(planned)

    @task(execution_timeout=timedelta(days=7))
    def train(planned: dict) -> str:
        ctx = get_current_context()
        params = ctx["params"]
        if not params["train"]:
            raise AirflowSkipException("params.train is false")
        import logging

        return tasks.train(dict(params), planned, params["py_interpreter"], logging.getLogger("wiki_corpus.train"))

    validated = validate_corpus(planned)
    card = write_dataset_card(planned)
    published = publish_partition(planned)
    fetched >> run_corpus_job >> validated >> card >> published >> train(planned)
