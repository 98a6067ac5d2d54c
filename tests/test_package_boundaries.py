"""Package boundaries: the import-linter contracts (pyproject.toml) hold and can fail; the trainer and the
linker run without Beam; the moved modules keep their old import paths; wikiedm.storage behaves as
Beam's filesystems do."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("wikiedm", "schemas", "pipelines", "trainer", "linker")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_copy(tmp_path: Path, violation: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the packages (and the contracts), with one import appended to one module."""
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    if violation:
        module, line = violation
        with open(tmp_path / module, "a", encoding="utf-8") as fh:
            fh.write(f"\n{line}\n")
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def test_contracts_hold_on_the_tree(tmp_path):
    result = _lint_copy(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module,line,contract", [
    ("trainer/data.py", "import apache_beam", "The trainer and the linker need neither the corpus job nor Beam"),
    ("linker/catalogue.py", "from pipelines import wiki_mentions", "The trainer and the linker need neither"),
    ("wikiedm/storage.py", "from apache_beam.io.filesystems import FileSystems", "The base packages"),
    ("pipelines/wiki_mentions.py", "from linker.link import Linker", "imports the linker only in its BLINK"),
    ("trainer/metrics.py", "import linker.kb", "independent of each other"),
    ("linker/evaluate.py", "from linker.cli import linker_config", "no import circle"),
])
def test_a_violating_import_breaks_its_contract(tmp_path, module, line, contract):
    result = _lint_copy(tmp_path, (module, line))
    assert result.returncode == 1, result.stdout + result.stderr
    assert " 0 broken" not in result.stdout and contract in result.stdout.split("Broken contracts", 1)[1]


def _modules_loaded_by(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    return set(out.stdout.split())


def test_trainer_and_linker_import_without_beam():
    loaded = _modules_loaded_by("import trainer.pretrain, trainer.export, linker.cli, linker.train, linker.evaluate")
    assert not {m for m in loaded if m.split(".")[0] in ("apache_beam", "pipelines")}
    assert "wikiedm.config" in loaded


def test_opening_and_validating_a_corpus_needs_no_beam(sample_corpus):
    """The trainer's start-up checks (manifest, sha256, schemas) and the linker's reads run Beam-free."""
    loaded = _modules_loaded_by(
        "from trainer.data import open_corpus\n"
        f"corpus = open_corpus({str(sample_corpus)!r})\n"
        "assert corpus.train_shards and corpus.n_entities > 3\n"
        "from linker.corpus_data import iter_examples\n"
        f"assert next(iter_examples({str(sample_corpus)!r}, 'train')).entity")
    assert not {m for m in loaded if m.split(".")[0] in ("apache_beam", "pipelines")}


def test_old_import_paths_are_the_moved_modules():
    import pipelines.config
    import pipelines.corpus.stopwords
    import pipelines.corpus.tokenizer
    import pipelines.records
    import pipelines.storage
    import pipelines.validate
    import wikiedm.config
    import wikiedm.records
    import wikiedm.stopwords
    import wikiedm.storage
    import wikiedm.tokenizer
    import wikiedm.validate
    from pipelines.transforms.write import schema_fingerprint

    assert pipelines.storage is wikiedm.storage and pipelines.validate is wikiedm.validate
    assert pipelines.corpus.tokenizer is wikiedm.tokenizer and pipelines.corpus.stopwords is wikiedm.stopwords
    assert pipelines.records.Mention is wikiedm.records.Mention
    assert pipelines.config.parse_config is wikiedm.config.parse_config
    assert schema_fingerprint is wikiedm.validate.schema_fingerprint
    from pipelines.corpus.tokenizer import _is_remote  # private names too (the shim is the module itself)
    assert _is_remote("gs://b/t")


def test_python_m_pipelines_validate_still_runs(sample_corpus, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "pipelines.validate", str(sample_corpus)], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: "), ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-m", "pipelines.validate", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "manifest.json is missing" in bad.stderr


# ----------------------------------------------------------------------------- storage


def _tree(root: Path) -> None:
    for rel in ("x.json", "a/b/y.parquet", "a/.hidden", "a/b/c/z.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())


def test_local_storage_lists_and_joins_as_beam_does(tmp_path):
    from apache_beam.io.filesystems import FileSystems

    from wikiedm import storage

    _tree(tmp_path)
    for folder in (str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a") + "/"):
        beam = sorted(m.path for r in FileSystems.match([FileSystems.join(folder, "**")]) for m in r.metadata_list)
        assert storage.list_files(folder) == beam and len(beam) >= 3
    assert storage.list_files(str(tmp_path / "missing")) == []
    assert storage.join(str(tmp_path), "a", "b") == FileSystems.join(str(tmp_path), "a", "b")
    target = str(tmp_path / "new" / "deep" / "f.json")  # parent folders are made, the write is atomic
    storage.write_json_atomic(target, {"b": 1, "a": [2]})
    assert storage.read_bytes(target) == b'{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert storage.list_files(str(tmp_path / "new")) == [target]  # no temporary file left
    data = storage.read_bytes(target)
    assert storage.sha256_of_file(target) == (storage.sha256_hex(data), len(data))
    storage.delete_files([target])
    assert not storage.exists(target)


@pytest.mark.parametrize("backend", ["arrow", "beam"])
def test_remote_filesystems_read_write_list_and_rename(tmp_path, backend):
    """URLs go to the remote filesystem: pyarrow's outside the job, Beam's inside it (file:// URLs here, the
    same calls as gs:// or s3:// ones); a ParquetFileWriter output reads back identical to parquet_bytes."""
    import pyarrow as pa

    from pipelines.beam_filesystem import BeamFileSystems
    from wikiedm import storage

    remote = storage.ArrowFileSystem() if backend == "arrow" else BeamFileSystems()
    if backend == "beam":  # Beam's local filesystem takes plain paths behind file://
        pytest.importorskip("apache_beam")
    previous = storage.use_remote_filesystem(remote)
    try:
        root = f"file://{tmp_path}" if backend == "arrow" else str(tmp_path)
        _tree(tmp_path)
        if backend == "arrow":
            assert storage.list_files(root) == sorted(f"{root}/{r}" for r in
                                                      ("x.json", "a/b/y.parquet", "a/.hidden", "a/b/c/z.txt"))
            assert storage.list_files(f"{root}/nope") == []
        fs = remote
        url = fs.join(root, "out", "f.parquet")
        schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
        rows = [{"k": str(i), "v": i} for i in range(10)]
        with fs.create(url) as fh:
            fh.write(storage.parquet_bytes(rows, schema, 4))
        assert fs.exists(url)
        with fs.open(url) as fh:
            assert fh.read() == storage.parquet_bytes(rows, schema, 4)
        fs.rename(url, url + ".moved")
        assert not fs.exists(url) and fs.exists(url + ".moved")
        fs.delete([url + ".moved"])
        assert not fs.exists(url + ".moved")
    finally:
        storage.use_remote_filesystem(previous)


def test_pipelines_register_beams_filesystems_for_urls():
    code = ("from wikiedm import storage; before = type(storage._remote).__name__\n"
            "import pipelines; print(before, type(storage._remote).__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["ArrowFileSystem", "BeamFileSystems"]
