"""Accuracy@1 and recall@k of the bi-encoder on a corpus split, beside the alias-prior baseline.

    python -m linker.evaluate --model DIR --corpus OUT [--split validation] [--limit 5000] [--json out.json]

The baseline ranks the alias table's entities for the anchor text by hyperlink
count (the most frequent entity first: p(entity | alias)). The alias table is
built from every hyperlink of the corpus, validation pages included, so the
baseline has seen the validation anchors: an optimistic reference. Mentions
whose gold entity is outside the vocabulary are not counted (they cannot be
linked by either).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence


from linker.catalogue import AliasIndex, EntityCatalogue
from linker.corpus_data import HYPERLINK, MentionExample
from linker.index import ExactIndex, IndexConfig

DEFAULT_KS = (1, 5, 10, 100)


def rank_metrics(ranked: Sequence[Sequence[int]], gold: Sequence[int], ks: Sequence[int]) -> dict:
    """accuracy@1 and recall@k of ranked entity-id lists against gold ids."""
    n = len(gold)
    out = {"mentions": n}
    if not n:
        return out
    positions = [next((i for i, e in enumerate(r) if e == g), None) for r, g in zip(ranked, gold)]
    out["accuracy@1"] = sum(p == 0 for p in positions) / n
    for k in ks:
        out[f"recall@{k}"] = sum(p is not None and p < k for p in positions) / n
    return out


def alias_prior_ranking(aliases: AliasIndex, surface: str) -> list[int]:
    """The alias table's entities for a surface form, most frequent first."""
    return [c.entity_id for c in aliases.lookup(surface)]


def evaluate_biencoder(loaded, catalogue: EntityCatalogue, aliases: AliasIndex, examples: Sequence[MentionExample],
                       ks: Sequence[int] = DEFAULT_KS, index=None, batch_size: int = 64) -> dict:
    """Retrieval metrics of a loaded bi-encoder (``index``: over ``catalogue``; built exactly when None)."""
    from linker.biencoder import encode_in_batches, model_device
    from linker.link import encode_catalogue

    model, inputs = loaded.model, loaded.inputs
    model.eval()
    examples = [ex for ex in examples if catalogue.row_of_id(ex.entity_id) is not None]
    ks = sorted({k for k in ks if k <= len(catalogue)} | {1})
    if index is None:
        index = ExactIndex(encode_catalogue(loaded, catalogue, batch_size))
    gold = [ex.entity_id for ex in examples]
    if examples:
        queries = encode_in_batches(model.encode_context, inputs.contexts([ex.context for ex in examples]),
                                    batch_size, inputs.special.pad, model_device(model))
        _, rows = index.search(queries, max(ks))
        ranked = [[int(catalogue.entity_ids[r]) for r in row if r >= 0] for row in rows]
    else:
        ranked = []
    alias_ranked = [alias_prior_ranking(aliases, ex.surface) for ex in examples]
    return {
        "entities": len(catalogue),
        "chance@1": 1.0 / max(1, len(catalogue)),
        "biencoder": rank_metrics(ranked, gold, ks),
        "alias_prior": {**rank_metrics(alias_ranked, gold, ks),
                        "no_candidates": sum(not r for r in alias_ranked) / max(1, len(examples))},
    }


def main(argv: list[str] | None = None) -> int:
    from linker.biencoder import load_biencoder
    from linker.catalogue import read_alias_index, read_catalogue
    from linker.corpus_data import iter_examples
    from linker.index import load_encodings, open_index
    from linker.link import LinkerConfig, prepare_encodings

    parser = argparse.ArgumentParser(prog="linker.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model folder (biencoder*.bin, vocab.txt)")
    parser.add_argument("--corpus", required=True, help="corpus output folder")
    parser.add_argument("--vocab", default="", help="vocab.txt when not in the model folder")
    parser.add_argument("--encodings", default="", help="saved entity encodings folder (default: MODEL/entity_encodings/<corpus>)")
    parser.add_argument("--split", default="validation", help="passages split: validation or train")
    parser.add_argument("--sources", default=HYPERLINK, help="comma-separated mention sources counted as gold")
    parser.add_argument("--limit", type=int, default=0, help="mentions evaluated (0: all)")
    parser.add_argument("--index", default="exact", help="exact, hnsw or auto")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="recall@k cut-offs")
    parser.add_argument("--json", default="", help="also write the metrics to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    loaded = load_biencoder(args.model, args.vocab or None)
    catalogue = read_catalogue(args.corpus)
    aliases = read_alias_index(args.corpus, catalogue.id_of_title())
    config = LinkerConfig(model=args.model, corpus=args.corpus, vocab=args.vocab, encodings=args.encodings,
                          index=IndexConfig(kind=args.index))
    folder = prepare_encodings(config, loaded, catalogue)
    encodings, _ = load_encodings(folder)
    index = open_index(folder, encodings, config.index)
    examples = list(iter_examples(args.corpus, args.split, tuple(args.sources.split(",")), limit=args.limit))
    metrics = evaluate_biencoder(loaded, catalogue, aliases, examples, [int(k) for k in args.ks.split(",")], index)
    metrics.update(split=args.split, index=index.kind, model=args.model, corpus=args.corpus)
    text = json.dumps(metrics, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
