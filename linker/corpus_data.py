"""Mention examples from a corpus's passages: BLINK's training data, from our own output.

A passage row holds GPT-2 BPE token ids (``OUT/tokenizer``) and mentions as
token spans; an example is the decoded text left of the mention, the mention,
the text right of it (within the 128-token window), and the gold entity.
Hyperlinks are the gold mentions (``sources``); the heuristic labels can be
added, but they are easy cases by construction (exact alias matches).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import pyarrow.parquet as pq

from linker.catalogue import FIRST_ENTITY_ID
from linker.inputs import ContextText
from schemas.corpus import MentionSource

HYPERLINK = MentionSource.HYPERLINK


@dataclass(frozen=True, slots=True)
class MentionExample:
    context: ContextText
    entity_id: int
    entity: str
    surface: str  # the anchor text as in the article (the alias-table key of the baseline)
    source: str
    passage_id: str


def load_corpus_tokenizer(corpus_dir: str):
    """The tokenizer the corpus job saved (OUT/tokenizer), for decoding passages."""
    from wikiedm.tokenizer import load_tokenizer

    return load_tokenizer(f"{corpus_dir.rstrip('/')}/tokenizer")


def passage_examples(row: dict, decode, sources: Sequence[str] = (HYPERLINK,)) -> list[MentionExample]:
    """The mentions of one passage row (vocabulary entities only) as text examples."""
    ids = row["token_ids"]
    out = []
    for m in row["mentions"]:
        if m["source"] not in sources or m["entity_id"] < FIRST_ENTITY_ID:
            continue
        start, end = m["token_start"], m["token_end"]
        left, mention, right = decode(ids[:start]), decode(ids[start:end]), decode(ids[end:])
        # Byte-level BPE puts the space before a word inside its token: move it back to the context,
        # so that left + mention + right is the passage text.
        stripped = mention.strip()
        lead = len(mention) - len(mention.lstrip())
        left, right = left + mention[:lead], mention[lead + len(stripped):] + right
        context = ContextText(left, stripped, right)
        out.append(MentionExample(context, int(m["entity_id"]), m["entity"], m["surface"], m["source"], row["passage_id"]))
    return out


def split_files(corpus_dir: str, split: str) -> list[str]:
    from wikiedm import storage

    files = [p for p in storage.list_files(storage.join(corpus_dir, "passages"))
             if p.rsplit("/", 1)[-1].startswith(f"{split}-") and p.endswith(".parquet")]
    if not files:
        raise FileNotFoundError(f"no passages/{split}-*.parquet in {corpus_dir}")
    return files


def iter_examples(corpus_dir: str, split: str, sources: Sequence[str] = (HYPERLINK,), limit: int = 0,
                  shuffle_files_seed: int | None = None) -> Iterator[MentionExample]:
    """Examples of a split, streamed row group by row group (bounded memory)."""
    tokenizer = load_corpus_tokenizer(corpus_dir).backend_tokenizer

    def decode(ids):
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    files = split_files(corpus_dir, split)
    if shuffle_files_seed is not None:
        random.Random(shuffle_files_seed).shuffle(files)
    n = 0
    for path in files:
        with _open(path) as fh:
            reader = pq.ParquetFile(fh)
            for batch in reader.iter_batches(columns=["passage_id", "token_ids", "mentions"], batch_size=256):
                for row in batch.to_pylist():
                    for example in passage_examples(row, decode, sources):
                        yield example
                        n += 1
                        if limit and n >= limit:
                            return


def _open(path: str):
    from wikiedm import storage

    return storage.open_read(path)


def shuffled(items: Iterable, buffer_size: int, seed: int) -> Iterator:
    """A streaming shuffle through a buffer of ``buffer_size`` items."""
    rng = random.Random(seed)
    buffer: list = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        i = rng.randrange(buffer_size)
        yield buffer[i]
        buffer[i] = item
    rng.shuffle(buffer)
    yield from buffer


def examples_with_fallback(corpus_dir: str, split: str = "validation", fallback: str = "train",
                           sources: Sequence[str] = (HYPERLINK,), limit: int = 0) -> tuple[str, list[MentionExample]]:
    """(the split used, its examples): ``split``'s, or ``fallback``'s when ``split`` has none (a
    small dump whose validation pages hold no hyperlink)."""
    for name in (split, fallback):
        try:
            examples = list(iter_examples(corpus_dir, name, sources, limit=limit))
        except FileNotFoundError:
            examples = []
        if examples or name == fallback:
            return name, examples
    return fallback, []
