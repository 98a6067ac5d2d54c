"""Train a byte-level BPE tokenizer on a corpus's own text: a vocabulary of the corpus's language.

    wikiedm train-tokenizer --corpus OUT --output TOKENIZER_DIR [--vocab_size 8000]
    wikiedm corpus --input DUMP --output OUT2 --tokenizer TOKENIZER_DIR
    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT2 --output RUN

GPT-2's vocabulary (the default) is English: it cuts Cyrillic, Greek, CJK... into single bytes, and
its 50k-way output layer dominates a small model's step. This learns GPT-2's kind of tokenizer
(byte-level BPE, GPT-2's pre-tokenisation: every text is representable, nothing is unknown) from
the text of OUT's **train** passages only (validation pages do not leak into the vocabulary),
streamed shard by shard from Parquet. Consecutive windows of a page overlap; the overlap is read
once. OUT is any finished corpus with passage text (the default ``--passage_text true``), e.g. one
built first with the default tokenizer; the tokenizer only decides how the text is cut, so the
second corpus, built with ``--tokenizer TOKENIZER_DIR``, has the same pages, mentions and split.

The folder written loads with ``AutoTokenizer.from_pretrained`` (transformers 4.x and 5.x: its
``tokenizer_config.json`` names ``PreTrainedTokenizerFast``) and ``wikiedm.tokenizer.load_encoder``.
Its special tokens come first: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<mask>`` 3, ``[Es]`` 4, ``[Ee]`` 5
(the trainer's mention markers, reserved so the trainer adds nothing: the model's vocabulary is
exactly ``--vocab_size``), then the 256 bytes, then the merges. Same corpus and options, same files
(``training.json`` records both). A folder holding anything else is not replaced unless ``--overwrite true``.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from typing import Iterator

from wikiedm.fields import option
from wikiedm.tokenizer import BOS_TOKEN, EOS_TOKEN, MASK_TOKEN, PAD_TOKEN, save_pretrained_portable

log = logging.getLogger(__name__)

ENTITY_START, ENTITY_END = "[Es]", "[Ee]"  # trainer.data's mention markers (wikiedm may not import the trainer)
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, MASK_TOKEN, ENTITY_START, ENTITY_END)
BYTE_ALPHABET = 256
TRAINING_RECORD = "training.json"  # what the folder was trained from, with which options
PROG = "wikiedm train-tokenizer"


@dataclass
class TrainTokenizerConfig:
    corpus: str = option("", "corpus folder (OUT of wikiedm corpus) whose train passages' text is learnt from",
                         required=True, path="corpus")
    output: str = option("", "tokenizer folder to write; then: wikiedm corpus --tokenizer FOLDER", required=True,
                         metavar="DIR")
    vocab_size: int = option(8000, "tokens in the vocabulary, its 6 special tokens and 256 bytes included")
    min_frequency: int = option(2, "a merge must occur at least this often in the text")
    max_passages: int = option(0, "read at most this many train passages (0: all)")
    overwrite: bool = option(False, "replace the tokenizer already in --output (otherwise an error)")

    def validate(self) -> None:
        if not self.corpus or not self.output:
            raise ValueError("--corpus and --output are required")
        if self.vocab_size < BYTE_ALPHABET + len(SPECIAL_TOKENS):
            raise ValueError(f"--vocab_size must be at least {BYTE_ALPHABET + len(SPECIAL_TOKENS)} "
                             f"(the {BYTE_ALPHABET} bytes and {len(SPECIAL_TOKENS)} special tokens), got {self.vocab_size}")
        if self.min_frequency < 1 or self.max_passages < 0:
            raise ValueError("--min_frequency must be >= 1 and --max_passages >= 0")


class TokenizerTrainingError(ValueError):
    """The corpus cannot be learnt from, or the output folder holds another tokenizer."""


# ----------------------------------------------------------------------------- the text


def train_shards(corpus: str) -> list[str]:
    """The corpus's passages/train-* shards, from its manifest (a finished corpus), in name order."""
    manifest_path = os.path.join(corpus, "manifest.json")
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise TokenizerTrainingError(f"{manifest_path} is missing: {corpus} is not a finished corpus folder") from None
    shards = sorted(e["path"] for e in manifest.get("files", [])
                    if e.get("kind") == "passages" and os.path.basename(e["path"]).startswith("train-"))
    if not shards:
        raise TokenizerTrainingError(f"{manifest_path} lists no passages/train-*.parquet shard")
    return [os.path.join(corpus, p) for p in shards]


def iter_train_texts(corpus: str, max_passages: int = 0, batch_rows: int = 512) -> Iterator[str]:
    """The text of the corpus's train passages, one string each, the overlap with the window before left out.

    Streamed (a Parquet batch at a time). A window's text starts at ``char_offset`` in its article;
    when the window before it (same page, ``window_index - 1``) was the one read just before, the
    characters both hold are yielded once.
    """
    import pyarrow.parquet as pq

    read = 0
    prev_page, prev_window, prev_end = None, -1, 0
    for shard in train_shards(corpus):
        pf = pq.ParquetFile(shard)
        if "text" not in pf.schema_arrow.names:
            raise TokenizerTrainingError(f"{shard} has no text column: build the corpus with --passage_text true")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["page_id", "window_index", "char_offset", "text"]):
            columns = batch.to_pydict()
            for page, window, offset, text in zip(columns["page_id"], columns["window_index"],
                                                  columns["char_offset"], columns["text"]):
                if max_passages and read >= max_passages:
                    return
                read += 1
                skip = prev_end - offset if (page == prev_page and window == prev_window + 1) else 0
                prev_page, prev_window, prev_end = page, window, offset + len(text)
                if skip < len(text):
                    yield text[max(skip, 0):]


# ----------------------------------------------------------------------------- training


def train_byte_level_bpe(texts: Iterator[str], vocab_size: int, min_frequency: int = 2):
    """A GPT-2-style byte-level BPE learnt from ``texts``, as a ``PreTrainedTokenizerFast``.

    Set up as wikiedm.tokenizer's GPT-2 default (its pre-tokenisation, decoder and offset trimming),
    so the corpus job maps mentions onto its tokens the same way.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD_TOKEN, bos_token=BOS_TOKEN,
                                  eos_token=EOS_TOKEN, mask_token=MASK_TOKEN,
                                  additional_special_tokens=[ENTITY_START, ENTITY_END])
    ids = [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    if ids != list(range(len(SPECIAL_TOKENS))):  # pragma: no cover - the trainer places them first
        raise RuntimeError(f"special tokens got ids {ids}, expected 0..{len(SPECIAL_TOKENS) - 1}")
    return tok


def training_record(config: TrainTokenizerConfig) -> dict:
    """What a folder was trained from: the options and the train shards' digests from the corpus manifest."""
    from importlib.metadata import version

    shards = [os.path.relpath(p, config.corpus) for p in train_shards(config.corpus)]  # first: its clear errors
    with open(os.path.join(config.corpus, "manifest.json"), encoding="utf-8") as f:
        files = {e["path"]: e.get("sha256") for e in json.load(f).get("files", [])}
    options = {k: v for k, v in asdict(config).items() if k not in ("corpus", "output", "overwrite")}
    return {"options": options, "train_shards": {p: files.get(p) for p in shards},
            "tokenizers": version("tokenizers")}


def check_output_folder(output: str, record: dict, overwrite: bool) -> None:
    """Refuse to write into a folder that already holds files, unless ``overwrite`` or they are this very
    tokenizer (trained from the same shards with the same options: training is deterministic)."""
    if os.path.isfile(output):
        raise TokenizerTrainingError(f"--output {output} is a file, not a folder")
    if overwrite or not os.path.isdir(output) or not os.listdir(output):
        return
    try:
        with open(os.path.join(output, TRAINING_RECORD), encoding="utf-8") as f:
            if json.load(f) == record:
                return
    except (OSError, ValueError):
        pass
    raise TokenizerTrainingError(f"{output} already holds files other than this tokenizer (other options or "
                                 "another corpus); give --overwrite true to replace them")


def train_tokenizer(config: TrainTokenizerConfig) -> dict:
    """Train and write the tokenizer; return a summary (what ``wikiedm train-tokenizer`` prints)."""
    import time

    config.validate()
    record = training_record(config)
    check_output_folder(config.output, record, config.overwrite)
    started = time.monotonic()
    counted = {"passages": 0, "characters": 0}

    def texts() -> Iterator[str]:
        for text in iter_train_texts(config.corpus, config.max_passages):
            counted["passages"] += 1
            counted["characters"] += len(text)
            yield text

    tok = train_byte_level_bpe(texts(), config.vocab_size, config.min_frequency)
    if counted["passages"] == 0:
        raise TokenizerTrainingError(f"{config.corpus} has no train passage text to learn from")
    os.makedirs(config.output, exist_ok=True)
    for name in (*_TOKENIZER_FILES, TRAINING_RECORD):  # no file of an older tokenizer stays beside the new one
        path = os.path.join(config.output, name)
        if os.path.isfile(path):
            os.remove(path)
    save_pretrained_portable(tok, config.output)
    with open(os.path.join(config.output, TRAINING_RECORD), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    return {"output": config.output, "vocab_size": len(tok), "special_tokens": dict(zip(SPECIAL_TOKENS, range(6))),
            "passages_read": counted["passages"], "characters_read": counted["characters"],
            "seconds": round(time.monotonic() - started, 2)}


# What save_pretrained may write (a replaced folder keeps none of the old ones).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                    "added_tokens.json")


def train_tokenizer_parser(prog: str = PROG):
    """``wikiedm train-tokenizer``'s command line (light: checked before the tokenizer libraries are imported)."""
    from wikiedm.config import ConfigParser

    return ConfigParser(TrainTokenizerConfig, prog=prog, description=__doc__.splitlines()[0], pass_unknown=False,
                        common=("corpus", "output", "vocab_size", "overwrite"))


def check_train_tokenizer_command(prog: str, argv: list[str]) -> None:
    """What ``wikiedm train-tokenizer`` checks before it reads a passage: the command line, the corpus's manifest
    and the output folder (another tokenizer there: refused unless --overwrite true)."""
    from wikiedm.config import ConfigError

    config, _, rest = train_tokenizer_parser(prog).check(argv)
    if rest:
        raise ConfigError(f"unknown option(s): {' '.join(rest)}")
    try:
        check_output_folder(config.output, training_record(config), config.overwrite)
    except TokenizerTrainingError as exc:
        raise ConfigError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    from wikiedm.config import ConfigError

    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config, _, rest = train_tokenizer_parser().check(list(sys.argv[1:] if argv is None else argv))
        if rest:
            raise ConfigError(f"unknown option(s): {' '.join(rest)}")
        summary = train_tokenizer(config)
    except (ValueError, OSError) as exc:  # ConfigError and TokenizerTrainingError are ValueErrors
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
