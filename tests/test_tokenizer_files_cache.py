"""The default tokenizer's saved files come from a disk cache: equal to ``save_pretrained``'s, read
without importing transformers, and rebuilt when an entry is damaged."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from wikiedm.tokenizer import load_tokenizer, saved_tokenizer_files

REPO = Path(__file__).resolve().parents[1]
# Prints whether transformers was imported, then the files' names and sizes.
READ = ("import sys, json; from wikiedm.tokenizer import saved_tokenizer_files; files = saved_tokenizer_files(); "
        "print(json.dumps(['transformers' in sys.modules, [(n, len(d)) for n, d in files]]))")


def _read_in_a_fresh_process(cache: Path) -> tuple[bool, list]:
    env = {**os.environ, "WIKIEDM_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, check=True, cwd=REPO)
    imported, files = json.loads(out.stdout.strip().splitlines()[-1])
    return imported, [tuple(f) for f in files]


def test_default_tokenizer_files_are_cached_and_equal_save_pretrained(tmp_path, monkeypatch):
    with tempfile.TemporaryDirectory() as tmp:
        load_tokenizer().save_pretrained(tmp)
        expected = [(name, (Path(tmp) / name).read_bytes()) for name in sorted(os.listdir(tmp))]
    assert {name for name, _ in expected} >= {"tokenizer.json", "tokenizer_config.json"}

    monkeypatch.setenv("WIKIEDM_CACHE", str(tmp_path))
    assert saved_tokenizer_files() == expected  # built, and written to the cache
    (entry,) = (tmp_path / "tokenizers").iterdir()
    assert entry.name.startswith("gpt2-bpe-") and (entry / "digests.json").exists()
    sizes = [(name, len(data)) for name, data in expected]

    # A fresh process reads the entry and never imports transformers.
    assert _read_in_a_fresh_process(tmp_path) == (False, sizes)

    # A damaged file is not served: the entry is rebuilt (transformers imported once more), then read again.
    (entry / "tokenizer.json").write_bytes(b"{}")
    assert _read_in_a_fresh_process(tmp_path) == (True, sizes)
    assert (entry / "tokenizer.json").read_bytes() == dict(expected)["tokenizer.json"]
    assert _read_in_a_fresh_process(tmp_path) == (False, sizes)
    assert [p.name for p in (tmp_path / "tokenizers").iterdir()] == [entry.name]  # no partial folder left


def test_an_unwritable_cache_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("WIKIEDM_CACHE", str(blocker))  # makedirs under a file fails
    files = saved_tokenizer_files()
    assert dict(files)["tokenizer.json"] and blocker.read_text() == "not a folder"
