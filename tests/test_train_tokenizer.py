"""`wikiedm train-tokenizer`: a byte-level BPE learnt from a corpus's own train passages, on the real Ukrainian
excerpt. Deterministic; far fewer tokens per Cyrillic character than GPT-2's; a corpus built with it
(`wikiedm corpus --tokenizer DIR`) decodes back and keeps its mentions' token spans; the trainer runs on it with a
vocabulary of exactly --vocab_size."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO, dump, run_job_here, tokenizer_behaviour
from wikiedm.cli import main as wikiedm_main
from wikiedm.train_tokenizer import SPECIAL_TOKENS, TRAINING_RECORD, iter_train_texts

UKWIKI = "ukwiki-2023-first100k-lines-truncated.xml.xz"
VOCAB = 1000


def train(corpus: Path, output: Path, *args: str) -> int:
    return wikiedm_main(["train-tokenizer", "--corpus", str(corpus), "--output", str(output),
                         "--vocab_size", str(VOCAB), *args])


def rows(corpus: Path, split: str) -> list[dict]:
    return [r for p in sorted((corpus / "passages").glob(f"{split}-*.parquet")) for r in pq.read_table(p).to_pylist()]


@pytest.fixture(scope="module")
def uk_corpus(shared_dump_corpus) -> Path:
    """The session's corpus of the ukwiki excerpt (GPT-2's tokenizer): what the tokenizer learns from."""
    return shared_dump_corpus(UKWIKI)


@pytest.fixture(scope="module")
def uk_tokenizer(uk_corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uk_tokenizer")
    assert train(uk_corpus, out) == 0
    return out


@pytest.fixture(scope="module")
def uk_own_corpus(uk_tokenizer, tmp_path_factory) -> Path:
    """The ukwiki excerpt again, tokenised with its own tokenizer (the session corpus's job options)."""
    from tests.conftest import SHARED_DUMP_JOB_ARGS

    out = tmp_path_factory.mktemp("uk_own_corpus")
    run_job_here(dump(UKWIKI), out, *SHARED_DUMP_JOB_ARGS, "--tokenizer", str(uk_tokenizer))
    return out


def test_the_folder_loads_everywhere_with_the_specials_first(uk_tokenizer):
    from transformers import AutoTokenizer

    from trainer.data import load_tokenizer as trainer_tokenizer
    from wikiedm.tokenizer import load_encoder

    hf = AutoTokenizer.from_pretrained(str(uk_tokenizer))
    assert len(hf) == VOCAB
    assert [hf.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    tok, ids = trainer_tokenizer(uk_tokenizer)  # adds [Es]/[Ee] only when missing: here nothing
    assert (ids.pad, ids.bos, ids.eos, ids.mask, ids.entity_start, ids.entity_end, ids.vocab_size) == (0, 1, 2, 3, 4, 5, VOCAB)
    text = "Київ — столиця України. <s> [Es] 🙂"
    token_ids, offsets = load_encoder(str(uk_tokenizer)).encode_with_offsets(text)
    assert tok.decode(token_ids) == text
    assert not set(token_ids) & set(range(len(SPECIAL_TOKENS)))  # special-token text in an article is plain text
    first_word = [text[a:b] for a, b in offsets if b <= len("Київ")]
    assert "".join(first_word) == "Київ" and len(first_word) < len("Київ".encode())  # merged beyond bytes


def test_same_corpus_and_options_same_files(uk_corpus, uk_tokenizer, tmp_path):
    again = tmp_path / "again"
    assert train(uk_corpus, again) == 0
    names = sorted(p.name for p in uk_tokenizer.iterdir())
    assert names == sorted(p.name for p in again.iterdir()) and "tokenizer.json" in names
    for name in names:
        assert (uk_tokenizer / name).read_bytes() == (again / name).read_bytes(), name
    record = json.loads((again / TRAINING_RECORD).read_text())
    assert record["options"]["vocab_size"] == VOCAB and list(record["train_shards"]) == ["passages/train-00000-of-00001.parquet"]


def test_an_existing_different_tokenizer_is_kept_unless_overwrite(uk_corpus, uk_tokenizer, tmp_path, capsys):
    out = tmp_path / "tok"
    assert train(uk_corpus, out, "--max_passages", "200") == 0
    assert train(uk_corpus, out, "--max_passages", "200") == 0  # the same tokenizer: written again, the same
    before = (out / "tokenizer.json").read_bytes()
    capsys.readouterr()
    assert train(uk_corpus, out) == 2  # other options
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite true" in err
    assert (out / "tokenizer.json").read_bytes() == before
    assert train(uk_corpus, out, "--overwrite", "true") == 0
    assert (out / "tokenizer.json").read_bytes() == (uk_tokenizer / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("args, message", [(("--vocab_size", "100"), "at least 262"),
                                           (("--min_frequency", "0"), "--min_frequency")])
def test_bad_options_are_one_line_errors(uk_corpus, tmp_path, capsys, args, message):
    assert wikiedm_main(["train-tokenizer", "--corpus", str(uk_corpus), "--output", str(tmp_path / "t"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert wikiedm_main(["train-tokenizer", "--corpus", str(tmp_path / "none"), "--output", str(tmp_path / "t")]) == 2
    assert "--corpus" in (err := capsys.readouterr().err) and "no such folder" in err, err  # checked before any import
    (tmp_path / "empty").mkdir()
    assert wikiedm_main(["train-tokenizer", "--corpus", str(tmp_path / "empty"), "--output", str(tmp_path / "t")]) == 2
    assert "--corpus" in (err := capsys.readouterr().err) and err.count("\n") == 1, err


def test_it_reads_the_train_passages_once_each_overlap_left_out(uk_corpus):
    train_rows, validation_rows = rows(uk_corpus, "train"), rows(uk_corpus, "validation")
    assert validation_rows
    texts = list(iter_train_texts(str(uk_corpus)))
    assert 0 < len(texts) <= len(train_rows)
    # The pieces of a page join into its text from the first window's start to the last window's end, once.
    pages: dict[int, list[dict]] = {}
    for r in train_rows:
        pages.setdefault(r["page_id"], []).append(r)
    read = "".join(texts)
    total = 0
    for windows in pages.values():
        windows.sort(key=lambda r: r["window_index"])
        total += windows[-1]["char_offset"] + len(windows[-1]["text"]) - windows[0]["char_offset"]
    multi = [w for w in pages.values() if len(w) > 2]
    assert multi  # the overlap logic is exercised
    assert abs(len(read) - total) <= len(train_rows)  # up to a character split at a window's edge, per window
    assert sum(len(r["text"]) for r in train_rows) > 1.05 * len(read)  # the overlap (~8% here) was not read twice
    held_out = {r["page_id"] for r in validation_rows}
    assert not held_out & set(pages)


def test_cyrillic_takes_far_fewer_tokens_than_with_gpt2(uk_corpus, uk_tokenizer):
    """On held-out text (the validation passages), the own 1000-token vocabulary against GPT-2's 50k."""
    from wikiedm.tokenizer import load_encoder

    text = "\n".join(r["text"] for r in rows(uk_corpus, "validation"))
    own = len(load_encoder(str(uk_tokenizer)).encode_with_offsets(text)[0])
    gpt2 = len(load_encoder().encode_with_offsets(text)[0])
    print(f"tokens per character on {len(text)} held-out ukwiki characters: own {VOCAB}: {own / len(text):.3f}, "
          f"gpt2: {gpt2 / len(text):.3f} (x{gpt2 / own:.2f})")
    assert gpt2 > 1.8 * own


def test_a_corpus_built_with_it_decodes_back_and_keeps_its_mention_spans(uk_corpus, uk_own_corpus, uk_tokenizer):
    from transformers import AutoTokenizer

    saved = {p.name: p.read_bytes() for p in (uk_own_corpus / "tokenizer").iterdir()}
    assert saved["tokenizer.json"] == (uk_tokenizer / "tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(str(uk_own_corpus / "tokenizer"))
    own_rows = rows(uk_own_corpus, "train") + rows(uk_own_corpus, "validation")
    assert len(own_rows) < len(rows(uk_corpus, "train") + rows(uk_corpus, "validation")) / 1.5  # fewer, longer windows
    exact, mentions = 0, 0
    for r in own_rows:
        assert max(r["token_ids"]) < VOCAB and min(r["token_ids"]) >= len(SPECIAL_TOKENS)
        decoded = tok.decode(r["token_ids"])
        exact += decoded == r["text"]
        assert r["text"] in decoded, r["passage_id"]  # less, at most, a character split at an edge
        for m in r["mentions"]:
            mentions += 1
            assert r["text"][m["char_start"]:m["char_end"]] == m["surface"]
            assert tok.decode(r["token_ids"][m["token_start"]:m["token_end"]]).strip() == m["surface"]
    assert mentions > 1000 and exact > 0.95 * len(own_rows)


def test_the_trainer_runs_on_it_with_its_vocabulary(uk_own_corpus, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.pretrain", "--config", "configs/pretrain/tiny.yaml", "--corpus",
           str(uk_own_corpus), "--output", str(run), "--max_steps", "2", "--data.max_seq_len", "64",
           "--model.max_positions", "64", "--train.save_every", "0", "--train.eval_every", "0"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"vocabulary {VOCAB}" in proc.stdout + proc.stderr
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train_steps = [s for s in steps if s.get("split") == "train"]
    assert [s["step"] for s in train_steps] == [1, 2]
    assert abs(train_steps[0]["lm_loss"] - math.log(VOCAB)) < 0.5  # a uniform guess over the own vocabulary


def hand_made_corpus(corpus: Path) -> Path:
    """What train-tokenizer reads of a corpus, written by hand (no corpus job): a manifest, one train shard."""
    import pyarrow as pa

    (corpus / "passages").mkdir(parents=True)
    words = "Київ столиця України місто на Дніпрі river city capital".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(40)]
    pq.write_table(pa.table({"page_id": list(range(40)), "window_index": [0] * 40, "char_offset": [0] * 40,
                             "text": texts}), corpus / "passages" / "train-00000-of-00001.parquet")
    (corpus / "manifest.json").write_text(json.dumps({"files": [
        {"kind": "passages", "path": "passages/train-00000-of-00001.parquet", "sha256": "0" * 64}]}))
    return corpus


def test_another_tokenizer_in_the_output_is_refused_by_the_light_check(tmp_path):
    """On a hand-made corpus (a manifest and one train shard with text: no corpus job): the same tokenizer again is
    written again; other options into its folder are refused by `wikiedm train-tokenizer`'s check, in one line, before
    a passage is read; --overwrite true replaces it."""
    from wikiedm.cli import check
    from wikiedm.config import ConfigError

    corpus = hand_made_corpus(tmp_path / "corpus")
    out = tmp_path / "tok"
    args = ["--corpus", str(corpus), "--output", str(out), "--min_frequency", "1"]
    assert wikiedm_main(["train-tokenizer", *args, "--vocab_size", "300"]) == 0
    check("train-tokenizer", [*args, "--vocab_size", "300"])  # the same tokenizer: allowed
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigError, match=r"already holds files other than this tokenizer .*--overwrite true"):
        check("train-tokenizer", [*args, "--vocab_size", "280"])
    proc = subprocess.run([sys.executable, "-m", "wikiedm.cli", "train-tokenizer", *args, "--vocab_size", "280"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"wikiedm train-tokenizer: error: {out} already holds files other than this")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert wikiedm_main(["train-tokenizer", *args, "--vocab_size", "280", "--overwrite", "true"]) == 0
    assert json.loads((out / TRAINING_RECORD).read_text())["options"]["vocab_size"] == 280


def test_the_config_names_a_class_transformers_4_and_5_both_load(tmp_path):
    """tokenizer_config.json names PreTrainedTokenizerFast and lists [Es]/[Ee] as additional_special_tokens (what
    transformers 4.x reads; 5.x wrote TokenizersBackend and extra_special_tokens, which 4.x refuses). The installed
    transformers loads it exactly as the folder it wrote itself: the same class, ids, offsets, specials, decoding."""
    import shutil

    import transformers
    from transformers import AutoTokenizer

    out = tmp_path / "tok"
    corpus = hand_made_corpus(tmp_path / "corpus")
    assert wikiedm_main(["train-tokenizer", "--corpus", str(corpus), "--output", str(out), "--vocab_size", "300",
                         "--min_frequency", "1"]) == 0
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and "extra_special_tokens" not in config
    assert config["additional_special_tokens"] == ["[Es]", "[Ee]"]
    as_saved = tmp_path / "as_saved"  # the folder as save_pretrained wrote it
    shutil.copytree(out, as_saved)
    AutoTokenizer.from_pretrained(str(out)).save_pretrained(str(as_saved))
    if transformers.__version__.startswith("5."):  # 5.x writes its own names back: the comparison below means something
        assert json.loads((as_saved / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"

    texts = ["Київ — столиця України. <s> [Es] 🙂", "river city [Ee] capital <mask> x", "<pad>Дніпрі</s>"]

    ours = tokenizer_behaviour(out, texts, ("[Es]", "[Ee]"))
    assert ours == tokenizer_behaviour(as_saved, texts, ("[Es]", "[Ee]"))
    assert ours["markers"] == [4, 5] and {0, 1, 2, 3, 4, 5} <= set(ours["specials"]) and ours["len"] == 300
