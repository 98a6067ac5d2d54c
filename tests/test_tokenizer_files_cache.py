"""The default tokenizer's saved files come from a disk cache: equal to ``save_pretrained_portable``'s, read
without importing transformers, and rebuilt when an entry is damaged. The folder the corpus job writes from them
(OUT/tokenizer/) loads with ``AutoTokenizer.from_pretrained``, its config in the form transformers 4.x reads too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import tokenizer_behaviour
from wikiedm.tokenizer import load_tokenizer, save_pretrained_portable, saved_tokenizer_files

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
        save_pretrained_portable(load_tokenizer(), tmp)
        expected = [(name, (Path(tmp) / name).read_bytes()) for name in sorted(os.listdir(tmp))]
    assert {name for name, _ in expected} >= {"tokenizer.json", "tokenizer_config.json"}
    assert json.loads(dict(expected)["tokenizer_config.json"])["tokenizer_class"] == "PreTrainedTokenizerFast"

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


def test_the_corpus_jobs_tokenizer_folder_loads_with_auto_tokenizer(sample_corpus, tmp_path):
    """OUT/tokenizer/ of a real run: its tokenizer_config.json names PreTrainedTokenizerFast (transformers 5 writes
    TokenizersBackend, which 4.x refuses), and the installed transformers loads it with AutoTokenizer exactly as
    the folder save_pretrained writes itself: the same class, ids, offsets, special tokens and decoding, the ids
    the job tokenised with (a passage's token_ids decode to its text)."""
    import pyarrow.parquet as pq
    import transformers
    from transformers import AutoTokenizer

    folder = sample_corpus / "tokenizer"
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert not isinstance(config.get("extra_special_tokens"), list)
    as_saved = tmp_path / "as_saved"  # the folder as the installed transformers' save_pretrained writes it
    load_tokenizer().save_pretrained(str(as_saved))
    if transformers.__version__.startswith("5."):  # 5.x writes its own class name: the comparison means something
        assert json.loads((as_saved / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"

    texts = ["Київ — столиця України. <s> 🙂 <|endoftext|>", "river <mask> city</s>", "<pad>Paris's café"]

    ours = tokenizer_behaviour(folder, texts)
    assert ours == tokenizer_behaviour(as_saved, texts)
    assert ours["named"] == [50257, 50258, 50259, 50260, 50256] and ours["len"] == 50261
    tok = AutoTokenizer.from_pretrained(str(folder))
    shard = next(p for p in sorted((sample_corpus / "passages").glob("train-*.parquet")) if pq.read_metadata(p).num_rows)
    row = pq.read_table(shard, columns=["token_ids", "text"]).slice(0, 1).to_pylist()[0]
    assert tok.decode(row["token_ids"]) == row["text"]
