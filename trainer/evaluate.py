"""A fixed evaluation of a pre-trained checkpoint (EDMem or the memory-less BART) on a corpus's validation passages.

    wikiedm evaluate --checkpoint RUN --corpus HYPERLINK_CORPUS [--output eval.json]
    python -m trainer.evaluate ...                               (the same)

Every model is scored on the same passages with the same input, whatever corpus it was trained on:

- gold mentions are the editors' hyperlinks only (mentions whose ``source`` is ``hyperlink``; a label
  of the labelled corpus is never gold), so evaluate on the hyperlinks-only corpus of the dump;
- the masking is deterministic: every gold mention is salient-span masked (all its tokens become
  <mask>), no other token is masked (P_ssm = 1, P_rtm = 0: no random draw is left);
- entity ids are mapped from the evaluation corpus to the model's entity vocabulary by title; a gold
  entity the model's vocabulary lacks is counted (``unmappable``) and is no linking target.

Metrics (sums first, ratios at the end):

- ``mention_lm_loss`` / ``mention_token_acc``: cross-entropy and top-1 accuracy of the decoder on the
  tokens of the (masked) hyperlink mentions: the entity knowledge the LM must supply;
- ``other_lm_loss`` / ``other_token_acc``: the same on every other token that is not special (<s>, </s>,
  [Es], [Ee]); those tokens are visible in the input, so this measures reconstruction;
- ``el_acc``: acc@1 of the linking head (memory models only) at the hyperlinks with an entity in the
  model's vocabulary.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from schemas import SPECIAL_ENTITIES, UNK_ENTITY_ID
from schemas.corpus import MentionSource
from trainer.data import Collator, CorpusError, load_tokenizer, open_corpus
from trainer.model import FIRST_REAL_ENTITY_ID, EDMem, EDMemSpec

EVAL_SEED = 0  # the masking has no random draw left (P_ssm 1, P_rtm 0); the seed is fixed anyway


def load_checkpoint(checkpoint: str | Path) -> tuple[EDMem, dict]:
    """(the model in eval mode, the run's config as a dict) from RUN, RUN/checkpoints or a tag directory."""
    import yaml

    from trainer.export import checkpoint_state

    tag_dir, spec, state = checkpoint_state(checkpoint)
    model = EDMem(EDMemSpec.from_dict(spec))
    model.load_state_dict(state, strict=True)
    config_path = tag_dir.parent.parent / "config.yaml"
    run_config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    return model.eval(), run_config


def entity_titles(corpus_root: Path) -> list[str]:
    """Entity id -> title of a corpus's entity vocabulary."""
    table = pq.read_table(Path(corpus_root) / "entity_vocab" / "entity_vocab.parquet", columns=["entity_id", "entity"])
    titles = [""] * table.num_rows
    for eid, title in zip(table.column("entity_id").to_pylist(), table.column("entity").to_pylist()):
        titles[eid] = title
    return titles


def gold_passages(corpus_root: Path, shards: list[Path], model_vocab: dict[str, int] | None) -> tuple[list, dict]:
    """The validation passages with their hyperlinks alone, entity ids in the model's vocabulary; and counts."""
    counts = dict.fromkeys(("passages", "hyperlinks", "labels_ignored", "outside_vocabulary", "unmappable"), 0)
    rows = []
    for shard in shards:
        for row in pq.read_table(shard, columns=["passage_id", "token_ids", "mentions"]).to_pylist():
            gold = []
            for m in row["mentions"]:
                if m["source"] != MentionSource.HYPERLINK:
                    counts["labels_ignored"] += 1
                    continue
                m = dict(m)
                if m["entity_id"] < FIRST_REAL_ENTITY_ID:
                    counts["outside_vocabulary"] += 1  # masked and scored as LM, no linking target
                elif model_vocab is not None:
                    mapped = model_vocab.get(m["entity"])
                    if mapped is None:
                        counts["unmappable"] += 1
                        mapped = UNK_ENTITY_ID
                    m["entity_id"] = mapped
                gold.append(m)
            counts["hyperlinks"] += len(gold)
            counts["passages"] += 1
            rows.append({**row, "mentions": gold})
    rows.sort(key=lambda r: r["passage_id"])
    return rows, counts


def select_passages(rows: list, max_passages: int) -> list:
    """``max_passages`` of the rows, evenly spaced in their (passage-id) order; all when there are no more."""
    if not 0 < max_passages < len(rows):
        return rows
    return [rows[i] for i in np.unique(np.linspace(0, len(rows) - 1, max_passages).round().astype(int))]


@torch.no_grad()
def evaluate(model: EDMem, corpus: str | Path, model_corpus: str | Path | None = None, batch_size: int = 32,
             max_seq_len: int | None = None, max_passages: int = 0) -> dict:
    """The fixed evaluation (module docstring) of ``model`` on ``corpus``'s validation split, on the model's device.

    ``model_corpus``: the corpus the model was trained on (its entity vocabulary); None: ``corpus``'s own.
    ``max_seq_len``: as in training (mentions whose markers do not fit are dropped, and counted); None: the
    model's max_positions. ``max_passages`` > 0: that many passages, evenly spaced in passage-id order (the
    same ones for every model; a cheaper, fixed subset), else all.
    """
    eval_corpus = open_corpus(corpus, verify_sha256=False)
    if not eval_corpus.validation_shards:
        raise CorpusError(f"{eval_corpus.root}: no validation passages to evaluate on")
    tokenizer_dir = eval_corpus.tokenizer_dir
    _, ids = load_tokenizer(tokenizer_dir)
    spec = model.spec
    if ids.vocab_size != spec.vocab_size:
        raise CorpusError(f"{eval_corpus.root}: a tokenizer of {ids.vocab_size} ids; the model has {spec.vocab_size}")
    model_vocab = None
    if model_corpus is not None and Path(model_corpus).resolve() != eval_corpus.root.resolve():
        titles = entity_titles(Path(model_corpus))
        if len(titles) != spec.n_entities:
            raise CorpusError(f"{model_corpus}: {len(titles)} entities; the model's table has {spec.n_entities}")
        model_vocab = {t: i for i, t in enumerate(titles) if i >= len(SPECIAL_ENTITIES)}
    elif eval_corpus.n_entities != spec.n_entities:
        raise CorpusError(f"{eval_corpus.root}: {eval_corpus.n_entities} entities, the model's table has "
                          f"{spec.n_entities}: pass the corpus the model was trained on (--model_corpus)")
    rows, counts = gold_passages(eval_corpus.root, eval_corpus.validation_shards, model_vocab)
    if 0 < max_passages < len(rows):
        rows = select_passages(rows, max_passages)
        counts = {**counts, "passages": len(rows), "hyperlinks": sum(len(r["mentions"]) for r in rows),
                  "validation_passages": counts["passages"]}
    max_len = max_seq_len or spec.model.max_positions
    collator = Collator(ids, max_len, p_rtm=0.0, p_ssm=1.0, seed=EVAL_SEED)
    device = next(model.parameters()).device
    special = torch.tensor(ids.special, device=device)
    model.eval()
    sums = dict.fromkeys(("mention_nll", "mention_correct", "mention_tokens", "other_nll", "other_correct",
                          "other_tokens", "el_correct", "el_targets", "dropped_mentions", "truncated_tokens"), 0.0)
    for first in range(0, len(rows), batch_size):
        chunk = rows[first:first + batch_size]
        batch = collator(chunk, list(range(first, first + len(chunk))))
        sums["dropped_mentions"] += batch["dropped_mentions"]
        sums["truncated_tokens"] += batch["truncated_tokens"]
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        _, dec_h, _, (dec_pos, dec_targets, _) = model.encode_decode(
            batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"], batch["entity_ids"],
            batch["decoder_entity_ids"])
        labels = batch["labels"]
        # P_rtm = 0: the masked input positions are exactly the gold mentions' tokens (labels align with inputs).
        mention = batch["input_ids"].eq(ids.mask) & labels.ne(-100)
        other = labels.ne(-100) & ~mention & ~torch.isin(labels, special)
        for name, where in (("mention", mention), ("other", other)):
            logits = F.linear(dec_h[where], model.shared.weight).float()
            target = labels[where]
            sums[f"{name}_nll"] += F.cross_entropy(logits, target, reduction="sum").item()
            sums[f"{name}_correct"] += logits.argmax(-1).eq(target).sum().item()
            sums[f"{name}_tokens"] += int(where.sum())
        if model.has_memory:
            _, _, _, top1 = model.entity_memory(model.el_head(dec_h[dec_pos]), dec_targets, need_read=False)
            known = dec_targets >= FIRST_REAL_ENTITY_ID
            sums["el_correct"] += int(((top1 == dec_targets) & known).sum())
            sums["el_targets"] += int(known.sum())
    ratio = lambda a, b: sums[a] / sums[b] if sums[b] else math.nan  # noqa: E731
    return {
        "mention_lm_loss": ratio("mention_nll", "mention_tokens"),
        "mention_token_acc": ratio("mention_correct", "mention_tokens"),
        "other_lm_loss": ratio("other_nll", "other_tokens"),
        "other_token_acc": ratio("other_correct", "other_tokens"),
        "el_acc": ratio("el_correct", "el_targets") if model.has_memory else None,
        "memory": spec.model.memory,
        "max_seq_len": max_len,
        **{k: int(v) for k, v in sums.items() if k.endswith(("tokens", "targets", "mentions"))},
        **counts,
    }


# Student's t 0.975 quantiles by degrees of freedom (two-sided 95%), for the few seeds of an ablation.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         15: 2.131, 20: 2.086, 30: 2.042}


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}; between tabulated values the next smaller df's (a wider, conservative interval)."""
    return T_975[max(k for k in T_975 if k <= df)] if df <= 30 else 1.96


def t_interval(values: list[float]) -> dict:
    """Mean and the half-width of the two-sided 95% Student's t interval of the mean (n >= 2), over seeds."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if len(x) == 0:
        return {"mean": None, "ci": None, "n": 0}
    if len(x) == 1:
        return {"mean": float(x[0]), "ci": None, "n": 1}
    half = t_quantile_975(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return {"mean": float(x.mean()), "ci": float(half), "n": int(len(x)), "std": float(x.std(ddof=1))}


def main(argv: list[str] | None = None) -> int:
    from trainer.config import evaluate_parser
    from wikiedm.config import ConfigError, command_error

    try:
        args, _, _ = evaluate_parser().check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm evaluate", str(exc))
    torch.manual_seed(EVAL_SEED)
    model, run_config = load_checkpoint(args.checkpoint)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    model.to(device)
    model_corpus = args.model_corpus or run_config.get("data", {}).get("path") or None
    max_seq_len = args.max_seq_len or run_config.get("data", {}).get("max_seq_len") or None
    try:
        metrics = evaluate(model, args.corpus, model_corpus, args.batch_size, max_seq_len, args.max_passages)
    except CorpusError as exc:
        print(f"[evaluate] error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    metrics.update(checkpoint=str(args.checkpoint), corpus=str(args.corpus), model_corpus=model_corpus)
    text = json.dumps(metrics, indent=2)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
