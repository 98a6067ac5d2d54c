"""What a pre-training run and an export may write over: their own earlier output, not another run's.

Light on purpose (no torch, no DeepSpeed): ``wikiedm pretrain`` and ``wikiedm export`` check here before they
import either, and the trainer's ranks check again before they write.

``wikiedm pretrain --output RUN``. A run records what it trains in ``RUN/.wikiedm-run.json`` before it writes
anything else: its config (all of it but ``train.output_dir`` and the keys of how it runs, :data:`HOW_IT_RUNS`)
and the corpus it reads (its absolute path and a digest of the passages, entity vocabulary and tokenizer that
its manifest lists). The next start into the same folder compares:

- a new or empty folder, or one where no run has written checkpoints or metrics yet: it goes ahead;
- the same record: a resume (``train.resume auto`` continues from ``checkpoints/latest``), allowed;
- a folder from before the record existed: its ``config.yaml`` stands in for the record (the keys both know;
  the corpus by its path); checkpoints with neither: allowed (the trainer's own checks on resume apply);
- another record: refused in one line naming what differs, unless ``--overwrite true``, which first removes
  that run's files (:data:`RUN_FILES`; other files in the folder, such as a log of yours, stay).

``wikiedm export --output FILE``. The safetensors file names the checkpoint it was exported from in its
metadata (``checkpoint``). A file exported from the same run (any of its checkpoints) is replaced; one exported
from another run is refused unless ``--overwrite true``; a file that is no wikiedm export is never replaced.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import yaml

from wikiedm.config import ConfigError

RUN_RECORD = ".wikiedm-run.json"
# Keys that change how a run goes, not what it trains: a resume may change them (another machine, other logging,
# a simulated kill). train.output_dir is the folder itself; data.path is recorded as the corpus.
HOW_IT_RUNS = frozenset({
    "train.output_dir", "train.resume", "train.stop_after_steps", "train.log_every", "train.eval_every",
    "train.save_every", "train.keep_checkpoints", "train.log_loss_grad_norms", "train.log_sample_ids", "train.plot",
    "train.peak_tflops", "train.report_to", "train.micro_batch_size", "train.compile", "data.num_workers",
    "data.verify_sha256", "data.validation_batches", "model.memory_kernel", "model.entity_block_size",
    "model.memory_partition",
})
# What trainer.pretrain writes in RUN (trainer.metrics: metrics, samples, loss.png, tensorboard/, wandb/);
# --overwrite true removes these and nothing else.
RUN_FILES = ("checkpoints", "metrics.jsonl", "samples.jsonl", "loss.png", "tensorboard", "wandb", "config.yaml",
             RUN_RECORD)
# The corpus files a run reads (manifest kinds): their digests identify the corpus.
CORPUS_KINDS = frozenset({"passages", "entity_vocab", "tokenizer"})


class OutputInUseError(ConfigError):
    """--output holds another run's checkpoints, or a file exported from another run (or no export at all)."""


# ----------------------------------------------------------------------------- wikiedm pretrain --output RUN


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def corpus_digest(corpus: str) -> str | None:
    """sha256 over the (path, sha256) of the files a run reads, as the corpus's manifest lists them."""
    try:
        with open(os.path.join(corpus, "manifest.json"), encoding="utf-8") as f:
            files = json.load(f).get("files", [])
    except (OSError, ValueError, AttributeError):
        return None
    read = sorted((e.get("path"), e.get("sha256")) for e in files if e.get("kind") in CORPUS_KINDS)
    return hashlib.sha256(json.dumps(read).encode()).hexdigest()


def _absolute(path: str) -> str:
    """A local path made absolute (the same run started from another folder names the same files); a URL as is."""
    return path if "://" in path else os.path.abspath(path)


def _run_config(tree: dict) -> tuple[dict, str]:
    """(the config's keys that define the run, flattened; the corpus path made absolute) of a config tree."""
    flat = _flatten(tree)
    corpus = _absolute(str(flat.pop("data.path", "") or ""))
    if flat.get("model.init_from"):
        flat["model.init_from"] = _absolute(str(flat["model.init_from"]))
    return {k: v for k, v in sorted(flat.items()) if k not in HOW_IT_RUNS}, corpus


def run_identity(config) -> dict:
    """What makes two starts the same run: a trainer.config.Config (or its dict) -> the record's contents."""
    tree = config if isinstance(config, dict) else config.to_dict()
    run_config, corpus = _run_config(tree)
    return {"config": run_config, "corpus": {"path": corpus, "files": corpus_digest(corpus)}}


def _recorded(run: Path) -> dict | None:
    """What the folder's run recorded or, before the record existed, the part of its config.yaml that would be."""
    record = run / RUN_RECORD
    if record.is_file():
        try:
            return json.loads(record.read_text())
        except ValueError:
            return {"config": {"unreadable": str(record)}}
    config_yaml = run / "config.yaml"
    if config_yaml.is_file():
        try:
            tree = yaml.safe_load(config_yaml.read_text())
        except yaml.YAMLError:
            tree = None
        if not isinstance(tree, dict):
            return {"config": {"unreadable": str(config_yaml)}}
        run_config, corpus = _run_config(tree)
        return {"config": run_config, "corpus": {"path": corpus}}
    return None


def _differences(old: dict, new: dict) -> list[str]:
    """What differs, as 'key old -> new': the config keys both know (a key added by a later version is no change),
    and the corpus as far as the old record names it."""
    if "unreadable" in old.get("config", {}):
        return [f"{old['config']['unreadable']} unreadable"]
    a, b = old.get("config", {}), new.get("config", {})
    out = [f"{key} {a[key]!r} -> {b[key]!r}" for key in sorted(set(a) & set(b)) if a[key] != b[key]]
    a, b = old.get("corpus", {}), new.get("corpus", {})
    out += [f"corpus {key} {a[key]!r} -> {b.get(key)!r}" for key in sorted(a) if a[key] != b.get(key)]
    return out


def _has_run_outputs(run: Path) -> bool:
    """Whether a run has trained here: a checkpoint or a metrics row written."""
    checkpoints = run / "checkpoints"
    return (checkpoints.is_dir() and any(checkpoints.iterdir())) or (run / "metrics.jsonl").is_file()


def check_run_folder(output: str | os.PathLike, identity: dict, overwrite: bool) -> str:
    """Whether a run of ``identity`` may write in ``output`` (module docstring), writing nothing: 'new', 'resume'
    or 'overwrite' (another run's files, to be removed first); raises OutputInUseError."""
    run = Path(output)
    if run.exists() and not run.is_dir():
        raise OutputInUseError(f"--output {output} is a file, not a run folder")
    recorded = _recorded(run) if run.is_dir() else None
    if recorded is None:
        return "new"
    differs = _differences(recorded, identity)
    if not differs:
        return "resume"
    if not _has_run_outputs(run):
        return "new"  # a start that failed before it trained: nothing of it to keep
    if overwrite:
        return "overwrite"
    shown = "; ".join(differs[:3]) + (f"; and {len(differs) - 3} more" if len(differs) > 3 else "")
    raise OutputInUseError(f"--output {output} holds another run's checkpoints or metrics ({shown}); pass "
                           "--overwrite true to replace that run, or choose another --output (--train.resume "
                           f"{run / 'checkpoints'}/step_N there starts from one of its checkpoints)")


def remove_run_files(output: str | os.PathLike) -> None:
    """Remove what a run wrote in ``output`` (:data:`RUN_FILES`); other files stay."""
    for name in RUN_FILES:
        path = Path(output) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def write_run_record(output: str | os.PathLike, identity: dict) -> None:
    run = Path(output)
    run.mkdir(parents=True, exist_ok=True)
    tmp = run / f"{RUN_RECORD}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, run / RUN_RECORD)


def guard_run_folder(output: str | os.PathLike, identity: dict, overwrite: bool) -> str:
    """check_run_folder, then (another run's files removed first with ``overwrite``) record this run."""
    found = check_run_folder(output, identity, overwrite)
    if found == "overwrite":
        remove_run_files(output)
    write_run_record(output, identity)
    return found


# ----------------------------------------------------------------------------- wikiedm export --output FILE


def resolve_checkpoint(path: str | Path) -> tuple[Path, str]:
    """A tag directory, a checkpoints/ directory (its latest) or a run directory (its checkpoints' latest)."""
    p = Path(path)
    if (p / "checkpoints" / "latest").exists():
        p = p / "checkpoints"
    if (p / "latest").exists():
        return p, (p / "latest").read_text().strip()
    if p.is_dir() and any(p.glob("*model_states.pt")):
        return p.parent, p.name
    raise SystemExit(f"{path}: not a DeepSpeed checkpoint (no 'latest' file and no *model_states.pt)")


def safetensors_metadata(path: str | os.PathLike) -> dict | None:
    """The ``__metadata__`` of a safetensors file (its JSON header: no torch needed); None if it is none."""
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100_000_000:
                return None
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error):
        return None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return metadata if isinstance(metadata, dict) else None


def check_export_output(checkpoint: str, output: str, overwrite: bool) -> str:
    """Whether an export of ``checkpoint`` may write ``output`` (module docstring): 'new', 'same run' or
    'overwrite'; raises OutputInUseError (a ConfigError), or ConfigError for a path that is no checkpoint."""
    out = Path(output)
    if not out.exists():
        return "new"
    if out.is_dir():
        raise OutputInUseError(f"--output {output} is a folder: give the path of the .safetensors file to write")
    metadata = safetensors_metadata(out) or {}
    previous = metadata.get("checkpoint")
    if not previous or "edmem_spec" not in metadata:
        raise OutputInUseError(f"--output {output} exists and is not a wikiedm export; choose another file")
    try:
        ckpt_dir, _ = resolve_checkpoint(checkpoint)
    except SystemExit as exc:
        raise ConfigError(str(exc.code)) from None
    if Path(previous).resolve().parent == ckpt_dir.resolve():
        return "same run"
    if overwrite:
        return "overwrite"
    raise OutputInUseError(f"--output {output} holds weights exported from another run ({previous}); pass "
                           "--overwrite true to replace it, or choose another file")
