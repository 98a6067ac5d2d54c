"""A synthetic corpus in the trainer's on-disk format, for machines without Apache Beam (benchmarks/gpu_check.sh).

    python benchmarks/synth_corpus.py --out DIR [--entities 5000] [--passages 2000] [--vocab 50265] [--seed 0]

Writes what ``trainer.data.open_corpus`` reads and checks: ``passages/{train,validation}-00000-of-00001.parquet``
(the passages schema without text), ``entity_vocab/entity_vocab.parquet`` (ids 0..N-1, the 3 specials first),
``tokenizer/`` (a word-level fast tokenizer of ``--vocab`` words plus <pad> <s> </s> <mask> <unk>: BART's
vocabulary size, so the LM head costs what it does on the real corpus) and ``manifest.json`` last (sizes,
sha256, rows, schema fingerprints), marked ``"synthetic": true``.

Passages are ``--tokens`` random word ids with ``--mentions`` non-overlapping mentions each. Entity popularity
is Zipfian (exponent 1, as Wikipedia's links roughly are), and every entity is always written with the same
1-3 surface tokens, a function of its id: linking is learnable, as the overfit test needs. Seconds for 1M
entities; nothing is read from the network.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas import ENTITY_VOCAB_SCHEMA, PASSAGE_SCHEMA_NO_TEXT, SPECIAL_ENTITIES  # noqa: E402
from wikiedm.storage import sha256_hex  # noqa: E402
from wikiedm.validate import schema_fingerprint  # noqa: E402

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<mask>", "<unk>")


def write_tokenizer(folder: Path, vocab: int) -> None:
    """A word-level fast tokenizer: words w0..w{vocab-1}, then the special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab)}
    words.update({tok: vocab + i for i, tok in enumerate(SPECIAL_TOKENS)})
    core = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  mask_token="<mask>", unk_token="<unk>")
    tok.save_pretrained(str(folder))


def entity_vocab(n: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int32)
    names = [SPECIAL_ENTITIES[i] if i < len(SPECIAL_ENTITIES) else f"Entity {i}" for i in range(n)]
    counts = np.maximum(1, (1_000_000 // (ids.astype(np.int64) + 1))).astype(np.int64)
    return pa.Table.from_arrays([pa.array(ids), pa.array(names), pa.array(counts)], schema=ENTITY_VOCAB_SCHEMA)


def _zipf_ids(rng: np.random.Generator, n_entities: int, size: int) -> np.ndarray:
    """Entity ids 3..N-1 with p(rank r) ~ 1/r, by inverting the harmonic CDF approximately (log-uniform)."""
    first = len(SPECIAL_ENTITIES)
    ranks = np.exp(rng.uniform(0, np.log(n_entities - first), size)).astype(np.int64)
    return np.clip(first + ranks - 1, first, n_entities - 1)


def passages(rng: np.random.Generator, count: int, first_page: int, n_entities: int, vocab: int, tokens: int,
             mentions: int) -> pa.Table:
    rows = []
    for p in range(count):
        ids = rng.integers(0, vocab, tokens).astype(np.int32)
        slots = np.sort(rng.choice(tokens // 4, size=min(mentions, tokens // 4), replace=False)) * 4
        ents = _zipf_ids(rng, n_entities, len(slots))
        ments = []
        for start, ent in zip(slots.tolist(), ents.tolist()):
            width = 1 + ent % 3
            surface = [(ent * 7919 + k * 104729) % vocab for k in range(width)]  # the entity's own words
            ids[start:start + width] = surface
            ments.append({"token_start": start, "token_end": start + width, "entity_id": ent,
                          "entity": f"Entity {ent}", "source": "hyperlink",
                          "surface": " ".join(f"w{w}" for w in surface), "char_start": 0, "char_end": 0})
        page = first_page + p
        rows.append({"passage_id": f"{page}:0", "page_id": page, "title": f"Page {page}", "window_index": 0, "char_offset": 0,
                     "token_ids": ids.tolist(), "mentions": ments})
    return pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA_NO_TEXT)


def _record(root: Path, path: Path, kind: str, rows: int | None) -> dict:
    data = path.read_bytes()
    return {"path": path.relative_to(root).as_posix(), "bytes": len(data), "sha256": sha256_hex(data), "rows": rows,
            "kind": kind}


def write_corpus(out: Path, n_entities: int = 5000, n_passages: int = 2000, vocab: int = 50265, tokens: int = 120,
                 mentions: int = 8, seed: int = 0) -> Path:
    if n_entities <= len(SPECIAL_ENTITIES):
        raise SystemExit(f"--entities must be > {len(SPECIAL_ENTITIES)} (the special entities)")
    out.mkdir(parents=True, exist_ok=True)
    if (out / "manifest.json").exists():
        (out / "manifest.json").unlink()  # written last: a half-rewritten corpus has none
    rng = np.random.default_rng(seed)
    files = []
    (out / "passages").mkdir(exist_ok=True)
    n_val = max(1, n_passages // 20)
    for split, count, first in (("train", n_passages - n_val, 0), ("validation", n_val, n_passages)):
        path = out / "passages" / f"{split}-00000-of-00001.parquet"
        table = passages(rng, count, first, n_entities, vocab, tokens, mentions)
        pq.write_table(table, path, row_group_size=256)
        files.append(_record(out, path, "passages", table.num_rows))
    (out / "entity_vocab").mkdir(exist_ok=True)
    vocab_path = out / "entity_vocab" / "entity_vocab.parquet"
    pq.write_table(entity_vocab(n_entities), vocab_path)
    files.append(_record(out, vocab_path, "entity_vocab", n_entities))
    write_tokenizer(out / "tokenizer", vocab)
    files += [_record(out, p, "tokenizer", None) for p in sorted((out / "tokenizer").iterdir())]
    manifest = {"format": "wikiedm-corpus", "format_version": 2, "synthetic": True,
                "config": {"entities": n_entities, "passages": n_passages, "vocab": vocab, "tokens": tokens,
                           "mentions": mentions, "seed": seed},
                "files": sorted(files, key=lambda f: f["path"]),
                "schemas": {"passages": schema_fingerprint(PASSAGE_SCHEMA_NO_TEXT),
                            "entity_vocab": schema_fingerprint(ENTITY_VOCAB_SCHEMA)}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the corpus folder to write")
    ap.add_argument("--entities", type=int, default=5000, help="rows of the entity vocabulary (3 specials included)")
    ap.add_argument("--passages", type=int, default=2000, help="passages (5%% of them validation)")
    ap.add_argument("--vocab", type=int, default=50265, help="words of the tokenizer (specials added after)")
    ap.add_argument("--tokens", type=int, default=120, help="tokens per passage")
    ap.add_argument("--mentions", type=int, default=8, help="mentions per passage")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write_corpus(a.out, a.entities, a.passages, a.vocab, a.tokens, a.mentions, a.seed)
    print(f"synth_corpus: {a.out}: {a.passages} passages, {a.entities} entities, vocabulary {a.vocab}")


if __name__ == "__main__":
    main()
