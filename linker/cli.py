"""The linker's command line.

    python -m linker.cli vocab    --corpus OUT --output vocab.txt [--size 8000]
    python -m linker.cli index    --model DIR --corpus OUT [--index.kind hnsw] [--rebuild true]
    python -m linker.cli link     --model DIR --corpus OUT --text "Who founded the Halmar Guild?"
    python -m linker.cli link     --model DIR --corpus OUT --input data.jsonl [--text_field text] > linked.jsonl
    python -m linker.cli train    --corpus OUT --output DIR [--config configs/linker/train_tiny.yaml]   (linker.train)
    python -m linker.cli evaluate --model DIR --corpus OUT [--split validation]                         (linker.evaluate)

``index`` encodes every vocabulary entity once and saves the encodings (and the
HNSW graph) for ``link`` and the Beam jobs; ``link`` here is for a handful of
texts, ``beam run pipelines/link_mentions.py`` for data sets. Every LinkerConfig
option (``--top_k``, ``--crossencoder``, ``--detector.language``, ``--index.kind``,
...) is accepted; ``--config FILE.yaml`` sets many at once.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from pipelines.config import parse_config


def _split_extra(argv: list[str], extra: argparse.ArgumentParser):
    known, rest = extra.parse_known_args(argv)
    return known, rest


def linker_config(argv: list[str], prog: str):
    from linker.link import LinkerConfig

    config, rest = parse_config(LinkerConfig, argv, prog=prog, description="BLINK entity linker")
    config.validate()
    return config, rest


def cmd_vocab(argv: list[str]) -> int:
    from linker.corpus_data import iter_examples
    from linker.catalogue import read_catalogue
    from linker.wordpiece import build_vocab

    parser = argparse.ArgumentParser(prog="linker.cli vocab", description="build a WordPiece vocab.txt from a corpus")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--output", required=True, help="vocab.txt to write")
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--max_mentions", type=int, default=200_000, help="training contexts read for the vocabulary")
    args = parser.parse_args(argv)
    catalogue = read_catalogue(args.corpus)
    texts = [*catalogue.titles, *catalogue.descriptions,
             *(f"{e.context.left} {e.context.mention} {e.context.right}"
               for e in iter_examples(args.corpus, "train", limit=args.max_mentions))]
    print(build_vocab(texts, args.output, args.size))
    return 0


def cmd_index(argv: list[str]) -> int:
    from linker.index import choose_kind, load_encodings, open_index
    from linker.link import prepare_encodings

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--rebuild", default="false", help="recompute the encodings even when up to date")
    known, rest = _split_extra(argv, extra)
    config, rest = linker_config(rest, "linker.cli index")
    if rest:
        raise ValueError(f"unknown option(s): {' '.join(rest)}")
    folder = prepare_encodings(config, rebuild=known.rebuild.lower() in ("1", "true", "yes"))
    encodings, _ = load_encodings(folder)
    index = open_index(folder, encodings, config.index)  # builds and saves the HNSW graph when chosen
    print(json.dumps({"encodings": folder, "entities": int(encodings.shape[0]), "dim": int(encodings.shape[1]),
                      "index": index.kind, "auto_would_pick": choose_kind(config.index, len(encodings))}))
    return 0


def linked_record(text: str, mentions) -> list[dict]:
    return [{"char_start": m.start, "char_end": m.end, "surface": m.surface, "entity_id": m.entity_id,
             "entity": m.entity, "score": round(m.score, 6), "source": "blink"} for m in mentions]


def cmd_link(argv: list[str]) -> int:
    from linker.link import Linker

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--text", action="append", default=[], help="a text to link (repeatable)")
    extra.add_argument("--input", default="", help="JSONL file of records")
    extra.add_argument("--text_field", default="text", help="field of a record holding its text")
    known, rest = _split_extra(argv, extra)
    config, rest = linker_config(rest, "linker.cli link")
    if rest:
        raise ValueError(f"unknown option(s): {' '.join(rest)}")
    if not known.text and not known.input:
        raise ValueError("give --text or --input")
    linker = Linker(config)
    records = [{known.text_field: t} for t in known.text]
    if known.input:
        with open(known.input, encoding="utf-8") as fh:
            records += [json.loads(line) for line in fh if line.strip()]
    for record in records:
        text = record.get(known.text_field) or ""
        record["mentions"] = linked_record(text, linker.link_text(text))
        print(json.dumps(record, ensure_ascii=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    commands = {"vocab": cmd_vocab, "index": cmd_index, "link": cmd_link}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in (*commands, "train", "evaluate"):
        print(__doc__, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] == "train":
        from linker.train import main as train_main

        return train_main(argv[1:])
    if argv[0] == "evaluate":
        from linker.evaluate import main as evaluate_main

        return evaluate_main(argv[1:])
    try:
        return commands[argv[0]](argv[1:])
    except (ValueError, FileNotFoundError) as exc:
        print(f"linker.cli {argv[0]}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
