"""The linker's command line.

    wikiedm linker-vocab    --corpus OUT --output vocab.txt [--size 8000]
    wikiedm index-linker    --model DIR --corpus OUT [--kb blink:KB_DIR] [--index.kind hnsw] [--rebuild true]
    wikiedm link-text       --model DIR --corpus OUT --text "Who founded the Halmar Guild?"
    wikiedm link-text       --model DIR --corpus OUT --input data.jsonl [--text_field text] --output linked.jsonl
    wikiedm link-text       --model MODELS --kb blink:MODELS --mentions test.jsonl [--fast true] [--metrics m.json]
    wikiedm interactive     --model DIR --corpus OUT                   (= wikiedm link-text ... --interactive true)
    wikiedm train-linker    --corpus OUT --output DIR [--config configs/linker/train_tiny.yaml]   (linker.train)
    wikiedm evaluate-linker --model DIR --corpus OUT [--split validation]                         (linker.evaluate)

``python -m linker.cli vocab|index|link|interactive|train|evaluate ...`` runs the same commands.
``index-linker`` prepares, once, everything ``link-text`` and the Beam jobs read: the
knowledge base (the corpus's entities, or BLINK's ``entity.jsonl`` +
``all_entities_large.t7`` with ``--kb blink:DIR``), the entity encodings and
search index, the alias candidate index and the combination of model and
alias prior fitted on the corpus's validation hyperlinks. ``link-text`` is for a
handful of texts or a file of BLINK mention records (``--mentions``, BLINK's
``--test_mentions``: ``context_left``, ``mention``, ``context_right``,
optional ``label_id``/``label_title``): it writes each mention's bi-encoder
top-k (and cross-encoder re-ranking; not with ``--fast true``) with raw scores, as
BLINK's ``main_dense`` reports them, plus the linker's choice, and BLINK's
accuracy and recall@k when labels are given. ``--interactive true`` reads lines of
text from the terminal and prints the linked mentions. ``wikiedm link`` (a Beam
job) links data sets. Every LinkerConfig option (``--top_k``, ``--crossencoder``,
``--threshold``, ``--detector.language``, ``--index.kind``, ...) is accepted;
``--config FILE.yaml`` sets many at once; ``--help-config`` lists them all.
"""
from __future__ import annotations

import json
import logging
import os
import sys

from linker.options import (  # noqa: F401 - expand_bare_flags, linker_config, linker_parser re-exported
    expand_bare_flags,
    index_parser,
    link_parser,
    linker_config,
    linker_parser,
    vocab_parser,
)
from wikiedm.config import command_error, parse_bool


def _true(text: str) -> bool:
    return parse_bool(text)  # the one boolean rule (wikiedm.config)


def cmd_vocab(argv: list[str]) -> int:
    from linker.catalogue import read_catalogue
    from linker.corpus_data import iter_examples
    from linker.wordpiece import build_vocab

    args, _, _ = vocab_parser().check(argv)
    catalogue = read_catalogue(args.corpus)
    texts = [*catalogue.titles, *catalogue.descriptions,
             *(f"{e.context.left} {e.context.mention} {e.context.right}"
               for e in iter_examples(args.corpus, "train", limit=args.max_mentions))]
    print(build_vocab(texts, args.output, args.size))
    return 0


def cmd_index(argv: list[str]) -> int:
    from linker.index import choose_kind
    from linker.link import Linker

    parser = index_parser()
    config, known = linker_config(parser, argv)
    linker = Linker(config, build_encodings=True, rebuild=known.rebuild)
    kb = linker.kb
    print(json.dumps({
        "encodings": linker.folder, "kb": kb.kind, "entities": len(kb), "dim": int(linker.encodings.shape[1]),
        "index": linker.index.kind, "auto_would_pick": choose_kind(config.index, len(kb),
                                                                   kb.meta.get("faiss") if kb.kind == "blink" else None),
        "mapping": kb.meta.get("mapping"),
        "aliases": linker.aliases.meta["report"] if linker.aliases is not None else None,
        "combiner": {"mode": linker.combiner.mode, "fitted": linker.combiner.fitted,
                     "weights": linker.combiner.weights, **linker.combiner.report},
    }))
    return 0


def linked_record(linker, mentions) -> list[dict]:
    return [{"char_start": m.start, "char_end": m.end, "surface": m.surface, "entity_id": m.entity_id,
             "entity": m.entity, "score": round(m.score, 6), "source": "blink",
             **({"wikipedia_id": m.wikipedia_id, "url": linker.kb.url(m.kb_row)} if m.wikipedia_id >= 0 else {})}
            for m in mentions if linker.accepted(m)]


def link_mention_records(linker, path: str, out, metrics_path: str = "") -> dict:
    """BLINK's test-mention mode: one output line per mention record, then the metrics."""
    from linker.blink_io import blink_metrics, gold_row, read_mention_records, result_record, spans_of

    records, bad = read_mention_records(path)
    for problem in bad:
        print(f"linker.cli link: {path}:{problem['line']}: skipped ({problem['reason']})", file=sys.stderr)
    results = linker.rank_contexts([r.context for r in records], spans_of(records, linker))
    golds = [gold_row(r.record, linker.kb) for r in records]
    for record, result, gold in zip(records, results, golds):
        out.write(json.dumps(result_record(record, result, linker, gold), ensure_ascii=False) + "\n")
    metrics = {**blink_metrics(results, golds, linker.config.top_k, linker.config.rerank_top_k),
               "skipped_lines": len(bad)}
    print(json.dumps(metrics), file=sys.stderr)
    if metrics_path:
        with open(metrics_path, "w", encoding="utf-8") as fh:
            json.dump(metrics, fh, indent=2)
    return metrics


def show_linked(text: str, mentions, linker) -> str:
    """The text with each linked mention marked, then one line per mention (interactive mode)."""
    accepted = [m for m in mentions if linker.accepted(m)]
    marked, at = [], 0
    for m in accepted:
        marked += [text[at:m.start], f"[{text[m.start:m.end]}]"]
        at = m.end
    lines = ["".join(marked + [text[at:]])]
    for m in mentions:
        url = linker.kb.url(m.kb_row)
        status = "" if linker.accepted(m) else f"   (below --threshold {linker.config.threshold})"
        lines.append(f"  {m.surface} -> {m.entity}   id={m.entity_id}  score={m.score:.3f}"
                     f"{'  ' + url if url else ''}{status}")
    if not mentions:
        lines.append("  (no mention found)")
    return "\n".join(lines)


def interactive(linker, stdin=None, out=None) -> int:
    stdin, out = stdin or sys.stdin, out or sys.stdout
    if linker.aliases is None and not linker.detector.has_ner:
        raise ValueError("interactive mode needs a mention detector: give --corpus (its alias table) "
                         "or install a trained spaCy pipeline (see the README)")
    prompt = stdin.isatty()
    while True:
        if prompt:
            out.write("insert text: ")
            out.flush()
        line = stdin.readline()
        if not line:
            return 0
        text = line.rstrip("\n")
        if text.strip():
            out.write(show_linked(text, linker.link_text(text), linker) + "\n")
            out.flush()


def cmd_link(argv: list[str], prog: str = "wikiedm link-text") -> int:
    from linker.link import Linker

    parser = link_parser(prog)
    config, known = linker_config(parser, argv)
    if not (known.text or known.input or known.mentions or known.interactive):
        raise ValueError("give --text, --input, --mentions or --interactive true")
    linker = Linker(config)
    if known.interactive:
        return interactive(linker)
    out = open(known.output, "w", encoding="utf-8") if known.output else sys.stdout
    try:
        if known.mentions:
            link_mention_records(linker, known.mentions, out, known.metrics)
        records = [{known.text_field: t} for t in known.text]
        if known.input:
            with open(known.input, encoding="utf-8") as fh:
                records += [json.loads(line) for line in fh if line.strip()]
        for record in records:
            text = record.get(known.text_field) or ""
            record["mentions"] = linked_record(linker, linker.link_text(text))
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_interactive(argv: list[str]) -> int:
    return cmd_link([*argv, "--interactive", "true"], prog="wikiedm interactive")


SUBCOMMAND_NAMES = {"vocab": "linker-vocab", "index": "index-linker", "link": "link-text", "interactive": "interactive"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    commands = {"vocab": cmd_vocab, "index": cmd_index, "link": cmd_link, "interactive": cmd_interactive}
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in (*commands, "train", "evaluate"):
        print(__doc__, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] == "train":
        from linker.train import main as train_main

        return train_main(argv[1:])
    if argv[0] == "evaluate":
        from linker.evaluate import main as evaluate_main

        return evaluate_main(expand_bare_flags(argv[1:]))
    try:
        return commands[argv[0]](argv[1:])
    except (ValueError, FileNotFoundError) as exc:
        return command_error(f"wikiedm {SUBCOMMAND_NAMES[argv[0]]}", str(exc))


if __name__ == "__main__":
    sys.exit(main())
