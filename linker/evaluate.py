"""Accuracy@1 and recall@k of the linker on a corpus split, system by system, beside the alias prior.

    wikiedm evaluate-linker --model DIR --corpus OUT [--split validation] [--limit 5000] [--output metrics.json]
    python -m linker.evaluate ... / python -m linker.cli evaluate ...   (the same; every linker option is accepted)

On the split's hyperlinks (the anchor text is the mention, its target the
gold entity), four rankings are measured:

* ``biencoder``: BLINK's bi-encoder top-k from the knowledge base;
* ``crossencoder``: that top-k re-ranked by the cross-encoder (when the model
  folder has one and ``--fast`` is not given);
* ``linker``: the linker's final ranking, the model's scores combined with the
  alias prior (:mod:`linker.combine`; fitted on the validation hyperlinks);
* ``alias_prior``: the alias table's entities for the anchor text, most linked
  first (p(entity | alias)), the prior-only baseline.

The alias table is built from every hyperlink of the corpus, validation pages
included, so the baseline has seen the validation anchors (an optimistic
reference), and the combination is fitted on the validation hyperlinks: the
report also gives the combination's 2-fold cross-fitted accuracy (fitted on
one half, measured on the other). Mentions whose gold entity is outside the
knowledge base are not counted (none of the systems can link them). A corpus
whose validation pages hold no hyperlink (a dump of a few pages) is measured,
and the combination fitted, on its train split instead; ``split`` says which.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Sequence

from linker.catalogue import AliasIndex, EntityCatalogue
from linker.corpus_data import MentionExample
from linker.index import ExactIndex
from linker.options import DEFAULT_KS


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


def evaluate_linker(linker, examples: Sequence[MentionExample], ks: Sequence[int] = DEFAULT_KS,
                    aliases: AliasIndex | None = None) -> dict:
    """The four systems of the module doc on ``examples`` (gold spans); ``aliases``: the prior-only
    baseline's table (default: the corpus's whole alias table)."""
    from linker.catalogue import read_alias_index, read_catalogue

    kb = linker.kb
    examples = [ex for ex in examples if kb.row_of_entity_id(ex.entity_id) >= 0]
    ks = sorted(set(ks) | {1})
    if aliases is None:
        aliases = read_alias_index(linker.config.corpus, read_catalogue(linker.config.corpus).id_of_title())
    results = linker.rank_examples(examples)
    gold = [ex.entity_id for ex in examples]
    entity_ids = kb.entity_ids

    def ids(rows):
        return [int(entity_ids[r]) for r in rows]

    out = {
        "entities": len(kb), "mentions": len(examples), "chance@1": 1.0 / max(1, len(kb)),
        "biencoder": rank_metrics([ids(r.retrieved_rows) for r in results], gold, ks),
    }
    if linker.crossencoder is not None:
        reranked = [r.crossencoder_ranking(linker.config.rerank_top_k) for r in results]
        out["crossencoder"] = rank_metrics([ids(x[0]) for x in reranked], gold, ks)
    out["linker"] = {**rank_metrics([[int(r.candidates.entity_ids[i]) for i in r.order] for r in results], gold, ks),
                     "combiner": linker.combiner.mode, "fitted": linker.combiner.fitted}
    alias_ranked = [alias_prior_ranking(aliases, ex.surface) for ex in examples]
    out["alias_prior"] = {**rank_metrics(alias_ranked, gold, ks),
                          "no_candidates": sum(not r for r in alias_ranked) / max(1, len(examples))}
    out["combiner"] = linker.combiner.report
    return out


def main(argv: list[str] | None = None) -> int:
    from linker.corpus_data import examples_with_fallback
    from linker.link import Linker
    from linker.options import evaluate_parser, linker_config
    from wikiedm.config import command_error

    parser = evaluate_parser()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config, args = linker_config(parser, list(sys.argv[1:] if argv is None else argv))
        if not config.corpus:
            raise ValueError("--corpus is required: the mentions are its hyperlinks")
    except ValueError as exc:
        return command_error("wikiedm evaluate-linker", str(exc))
    linker = Linker(config)
    split, examples = examples_with_fallback(config.corpus, args.split, "train", tuple(args.sources.split(",")),
                                             limit=args.limit)
    metrics = evaluate_linker(linker, examples, [int(k) for k in args.ks.split(",")])
    metrics.update(split=split, index=linker.index.kind, model=config.model, corpus=config.corpus, kb=config.kb or "corpus")
    text = json.dumps(metrics, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
