"""The corpus job's output folder: a rerun of the same dump and config may reuse it; anything else needs
``--overwrite true``, and then no file of the old corpus survives.

A run records what it is building in ``OUT/.wikiedm-run.json`` before it writes anything else: the config (all
of it but ``output`` and the keys of how it runs, such as ``progress_every_s``) and the input's identity (path
and size). The next run into the same folder compares:

- an empty or new folder: the run goes ahead;
- the same record (or, for a folder from before the record existed, the same config in its manifest.json): a
  rerun, allowed and idempotent (an Airflow retry, a resumed run); the job itself replaces the earlier files.
  Options an earlier version had and this one has not (:data:`RETIRED_KEYS`) are left out of the comparison;
- another record or manifest: refused in one line naming what differs, unless ``--overwrite true``, which first
  removes every file below the folder (the old card README.md and label_coverage.png too);
- files but neither record nor manifest: not a wikiedm corpus, refused even with ``--overwrite`` (nothing of
  someone else's is deleted): choose a new folder.
"""
from __future__ import annotations

import json
import logging
import os
import threading

from pipelines.config import WikiMentionsConfig
from wikiedm import storage

log = logging.getLogger(__name__)

RUN_RECORD = ".wikiedm-run.json"
# A dry run checks a remote --output too, but offline (or without credentials) the storage client retries for
# minutes: a dry run that gets no answer in this time says so and goes on to build the job.
DRY_RUN_CHECK_S = 20.0
# Keys that change how the job runs, not what it writes (the same input and config give byte-identical files
# whatever the reading parallelism): a rerun that changes them is the same run.
HOW_IT_RUNS = frozenset({"output", "progress_every_s", "read_range_mb", "index", "sort_buffer_rows"})
# Options of earlier versions, still in the run records and manifests of their runs: left out of the comparison, so
# that a rerun into a folder of an earlier version is not refused over them ("job": both of its jobs made the same
# rows; the removed shuffle job's options had no effect on the two-pass job's output).
RETIRED_KEYS = frozenset({"job", *WikiMentionsConfig.REMOVED_OPTIONS})


class OutputInUseError(ValueError):
    """--output holds a corpus of another dump or config (or files that are no corpus)."""


def run_identity(config: dict) -> dict:
    """What makes two runs the same run: the config (but :data:`HOW_IT_RUNS`), the input file's path and size."""
    config = _compared(config)
    path = config.get("input", "")
    size = os.path.getsize(path) if path and not storage.is_remote(path) and os.path.isfile(path) else None
    return {"config": config, "input": {"path": path, "size": size}}


def _compared(config: dict) -> dict:
    """The keys of a config that decide the output: without :data:`HOW_IT_RUNS` and :data:`RETIRED_KEYS`."""
    return {k: v for k, v in config.items() if k not in HOW_IT_RUNS and k not in RETIRED_KEYS}


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} {a!r} -> {b!r}")
    return out


def _manifest_config(output: str) -> dict | None:
    path = storage.join(output, storage.MANIFEST)
    if not storage.exists(path):
        return None
    try:
        return json.loads(storage.read_bytes(path)).get("config")
    except (OSError, ValueError, AttributeError):
        return {}


def guard_output(output: str, config: dict, overwrite: bool, dry_run: bool = False) -> str:
    """Check ``output`` before a run writes there (module docstring); with ``overwrite`` empty it first. Unless a
    dry run, record this run. Returns what was found: 'new', 'rerun' or 'overwritten'; raises OutputInUseError."""
    identity = run_identity(config)
    record_path = storage.join(output, RUN_RECORD)
    if not storage.is_remote(output) and os.path.exists(output) and not os.path.isdir(output):
        raise OutputInUseError(f"--output {output} is a file: the corpus is a folder; choose a new or empty folder")
    files = storage.list_files(output)
    found = "new"
    if files:
        if storage.exists(record_path):
            recorded = json.loads(storage.read_bytes(record_path))
            if isinstance(recorded.get("config"), dict):  # a record of an earlier version may hold retired keys
                recorded["config"] = _compared(recorded["config"])
            differs = _differences(recorded, identity)
        else:
            manifest = _manifest_config(output)
            if manifest is None:
                raise OutputInUseError(f"--output {output} holds {len(files)} file(s) and no wikiedm corpus; "
                                       "choose a new or empty folder")
            differs = _differences(_compared(manifest), identity["config"], "config.")
        if not differs:
            found = "rerun"
        elif not overwrite:
            shown = "; ".join(differs[:3]) + (f"; and {len(differs) - 3} more" if len(differs) > 3 else "")
            raise OutputInUseError(f"--output {output} holds a corpus of another dump or config ({shown}); "
                                   "pass --overwrite true to replace it, or choose another folder")
        else:
            found = "overwritten"
            if not dry_run:
                storage.delete_files(files)
    if not dry_run:
        storage.write_json_atomic(record_path, identity)
    return found


def guard_output_for_dry_run(output: str, config: dict, overwrite: bool, wait_s: float = DRY_RUN_CHECK_S) -> str:
    """:func:`guard_output` of a dry run (which writes nothing), given ``wait_s`` to answer: a refusal is raised as
    in a real run; no answer in time (a remote store out of reach), or a failure of the store, is logged and returns 'unchecked'."""
    if not storage.is_remote(output):
        return guard_output(output, config, overwrite, dry_run=True)
    answer: dict = {}

    def check() -> None:
        try:
            answer["found"] = guard_output(output, config, overwrite, dry_run=True)
        except Exception as exc:  # handed to the caller below
            answer["error"] = exc

    # A daemon thread: a client still retrying when the dry run ends does not hold the process open.
    thread = threading.Thread(target=check, name="wikiedm-dry-run-output-check", daemon=True)
    thread.start()
    thread.join(wait_s)
    if isinstance(answer.get("error"), OutputInUseError):
        raise answer["error"]
    if "found" in answer:
        return answer["found"]
    if "error" in answer:
        log.warning("dry run: the output folder %s could not be checked (%s); a real run checks it", output,
                    answer["error"])
        return "unchecked"
    log.warning("dry run: %s gave no answer in %.0f s; the output folder was not checked (a real run checks it)",
                output, wait_s)
    return "unchecked"
