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

Metrics (sums first, ratios at the end). Token metrics are word metrics: the special ids (<s>, </s>,
<pad>, <mask>, [Es], [Ee]) are left out of the softmax and of the argmax (a model that puts its mass on the
markers, ~12% of the decoder's targets, does not score 0 for it); the full-vocabulary losses and the mass
the model puts on the special ids are reported apart (``*_full_vocab``, ``*_special_mass``).

- ``mention_lm_loss`` / ``mention_token_acc`` / ``mention_first_token_acc``: cross-entropy, top-1 accuracy
  on the tokens of the (masked) hyperlink mentions, and top-1 accuracy on each mention's first token: the
  entity knowledge the LM must supply;
- ``other_lm_loss`` / ``other_token_acc``: the same on every other word token; those tokens are visible in
  the input, so this measures reconstruction;
- ``el_acc``: acc@1 of the linking head (memory models only) at the hyperlinks with an entity in the
  model's vocabulary; ``el_acc_by_band``: the same by the target's training frequency (hyperlinks to it
  in the training split: 0, 1-4, 5-19, >= 20).

Baselines (``baselines``), fitted on the training split of the evaluation corpus (trainer.eval_stats): the
unigram floor (add-0.5 token frequencies, over the word vocabulary), the constant prediction (the most
frequent word token), EL's most frequent entity, and the alias prior (the entity the mention's surface
links to most often in training: what a linker reaches when the mention is visible; here it is masked).

Intervals (``intervals``): 95% percentile bootstrap intervals, 1000 resamples, of each headline figure and
of its paired difference to its baseline on the same units: mentions for the mention and EL metrics,
passages for the other-token metrics. Every validation passage is scored unless ``max_passages`` is set.
"""
from __future__ import annotations

import functools
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
from trainer.eval_stats import BANDS, FREQUENT_BAND, bootstrap_ratio, training_stats
from trainer.model import FIRST_REAL_ENTITY_ID, EDMem, EDMemSpec
from wikiedm import storage

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
                m = dict(m, eval_entity_id=m["entity_id"])  # the evaluation corpus's id (training statistics)
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
             max_seq_len: int | None = None, max_passages: int = 0, return_records: bool = False):
    """The fixed evaluation (module docstring) of ``model`` on ``corpus``'s validation split, on the model's device.

    ``model_corpus``: the corpus the model was trained on (its entity vocabulary); None: ``corpus``'s own.
    ``max_seq_len``: as in training (mentions whose markers do not fit are dropped, and counted); None: the
    model's max_positions. ``max_passages`` > 0: that many passages, evenly spaced in passage-id order (the
    same ones for every model; a cheaper, fixed subset), else all. ``return_records``: also return the
    per-mention and per-passage arrays (for paired comparisons of two models on the same units).
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
    stats = _training_stats(tuple(eval_corpus.train_shards), ids.vocab_size, eval_corpus.n_entities, ids.special)
    max_len = max_seq_len or spec.model.max_positions
    collator = Collator(ids, max_len, p_rtm=0.0, p_ssm=1.0, seed=EVAL_SEED)
    device = next(model.parameters()).device
    special = torch.tensor(ids.special, device=device)
    unigram = torch.from_numpy(stats.unigram_logprob()).to(device)
    constant = stats.constant_token
    model.eval()
    mentions = {k: [] for k in MENTION_FIELDS}
    passages = {k: np.zeros(len(rows)) for k in PASSAGE_FIELDS}
    dropped = truncated = 0
    for first in range(0, len(rows), batch_size):
        chunk = rows[first:first + batch_size]
        batch = collator(chunk, list(range(first, first + len(chunk))))
        dropped += batch["dropped_mentions"]
        truncated += batch["truncated_tokens"]
        # the same sequences with the evaluation corpus's entity ids at [Es] (the masking has no random draw)
        eval_ids = collator([{**r, "mentions": [{**m, "entity_id": m["eval_entity_id"]} for m in r["mentions"]]}
                             for r in chunk], list(range(first, first + len(chunk))))["decoder_entity_ids"]
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        _, dec_h, _, _ = model.encode_decode(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"],
                                             batch["entity_ids"], batch["decoder_entity_ids"])
        labels = batch["labels"]
        scored = labels.ne(-100) & ~torch.isin(labels, special)  # word targets
        target = labels[scored]
        logits = F.linear(dec_h[scored], model.shared.weight).float()
        full_nll = F.cross_entropy(logits, target, reduction="none")
        logits[:, special] = -math.inf  # word metrics: the special ids leave the softmax and the argmax
        nll = F.cross_entropy(logits, target, reduction="none")
        per_token = {"nll": nll, "full_nll": full_nll, "correct": logits.argmax(-1).eq(target).double(),
                     "unigram_nll": -unigram[target], "constant_correct": target.eq(constant).double()}
        grid = {k: torch.zeros(labels.shape, dtype=torch.float64, device=device).index_put_(
            torch.nonzero(scored, as_tuple=True), v.double()).cpu().numpy() for k, v in per_token.items()}
        # mentions: a decoder-input [Es] at t predicts the mention's first token, labels[t]; its tokens run to [Ee]
        dec_pos = torch.nonzero(batch["decoder_input_ids"] == ids.entity_start, as_tuple=True)
        labels_np, scored_np = labels.cpu().numpy(), scored.cpu().numpy()
        in_mention = np.zeros(labels_np.shape, dtype=bool)
        model_targets = batch["decoder_entity_ids"][dec_pos].cpu().numpy()
        eval_targets = eval_ids[dec_pos[0].cpu(), dec_pos[1].cpu()].numpy()
        el_top1 = None
        if model.has_memory:
            top1 = model.entity_memory(model.el_head(dec_h[dec_pos]), batch["decoder_entity_ids"][dec_pos],
                                       need_read=False)[3]
            el_top1 = top1.cpu().numpy()
        for i, (b, t) in enumerate(zip(dec_pos[0].tolist(), dec_pos[1].tolist())):
            end = t + int(np.argmax(labels_np[b, t:] == ids.entity_end))  # the mention's [Ee] label
            span = slice(t, end)
            in_mention[b, span] = True
            eval_target, model_target = int(eval_targets[i]), int(model_targets[i])
            links = int(stats.entity_links[eval_target]) if eval_target >= FIRST_REAL_ENTITY_ID else 0
            record = {"passage": first + b, "tokens": float(scored_np[b, span].sum()),
                      "first_correct": grid["correct"][b, t], "first_constant_correct": grid["constant_correct"][b, t],
                      "known": float(model_target >= FIRST_REAL_ENTITY_ID), "links": links,
                      "el_correct": float(el_top1 is not None and int(el_top1[i]) == model_target),
                      "most_frequent_correct": float(eval_target == stats.most_frequent_entity),
                      "alias_correct": float(stats.alias_prediction(labels_np[b, span].tolist()) == eval_target)}
            for k in ("nll", "full_nll", "correct", "unigram_nll", "constant_correct"):
                record[k] = float(grid[k][b, span].sum())
            for k, v in record.items():
                mentions[k].append(v)
        other = scored_np & ~in_mention
        for k in ("nll", "full_nll", "correct", "unigram_nll", "constant_correct"):
            passages[k][first:first + len(chunk)] = (grid[k] * other).sum(axis=1)
        passages["tokens"][first:first + len(chunk)] = other.sum(axis=1)
    mentions = {k: np.asarray(v, dtype=np.float64) for k, v in mentions.items()}
    metrics = summarize_records(mentions, passages, model.has_memory)
    metrics.update(memory=spec.model.memory, max_seq_len=max_len, dropped_mentions=int(dropped),
                   truncated_tokens=int(truncated), **counts)
    metrics["baselines"]["most_frequent_entity"] = stats.most_frequent_entity
    return (metrics, {"mentions": mentions, "passages": passages}) if return_records else metrics


@functools.lru_cache(maxsize=2)
def _training_stats(shards: tuple, vocab_size: int, n_entities: int, special: tuple):
    """training_stats, once per corpus in a process that evaluates several checkpoints."""
    return training_stats(list(shards), vocab_size, n_entities, special)


MENTION_FIELDS = ("passage", "tokens", "nll", "full_nll", "correct", "unigram_nll", "constant_correct", "first_correct",
                  "first_constant_correct", "known", "links", "el_correct", "most_frequent_correct", "alias_correct")
PASSAGE_FIELDS = ("tokens", "nll", "full_nll", "correct", "unigram_nll", "constant_correct")


def summarize_records(m: dict, p: dict, has_memory: bool) -> dict:
    """Per-mention and per-passage sums -> the metrics, baselines and intervals of the module docstring."""
    ratio = lambda num, den: float(num.sum() / den.sum()) if den.sum() else math.nan  # noqa: E731
    has_tokens = (m["tokens"] > 0).astype(np.float64)  # a mention all of whose tokens were cut has no first token
    known = m["known"]
    special_mass = lambda src: 1.0 - math.exp(ratio(src["nll"] - src["full_nll"], src["tokens"]))  # noqa: E731
    metrics = {
        "mention_lm_loss": ratio(m["nll"], m["tokens"]),
        "mention_token_acc": ratio(m["correct"], m["tokens"]),
        "mention_first_token_acc": ratio(m["first_correct"] * has_tokens, has_tokens),
        "other_lm_loss": ratio(p["nll"], p["tokens"]),
        "other_token_acc": ratio(p["correct"], p["tokens"]),
        "mention_lm_loss_full_vocab": ratio(m["full_nll"], m["tokens"]),
        "other_lm_loss_full_vocab": ratio(p["full_nll"], p["tokens"]),
        # geometric-mean probability mass on the special ids (from the word and full-vocabulary losses)
        "mention_special_mass": special_mass(m) if m["tokens"].sum() else math.nan,
        "other_special_mass": special_mass(p) if p["tokens"].sum() else math.nan,
        "el_acc": ratio(m["el_correct"] * known, known) if has_memory else None,
        "mention_tokens": int(m["tokens"].sum()), "other_tokens": int(p["tokens"].sum()),
        "mentions_scored": int(len(known)), "el_targets": int(known.sum()) if has_memory else 0,
    }
    baselines = {
        "unigram_mention_loss": ratio(m["unigram_nll"], m["tokens"]),
        "unigram_other_loss": ratio(p["unigram_nll"], p["tokens"]),
        "constant_mention_token_acc": ratio(m["constant_correct"], m["tokens"]),
        "constant_first_token_acc": ratio(m["first_constant_correct"] * has_tokens, has_tokens),
        "constant_other_token_acc": ratio(p["constant_correct"], p["tokens"]),
        "el_most_frequent": ratio(m["most_frequent_correct"] * known, known),
        "el_alias_prior": ratio(m["alias_correct"] * known, known),
    }
    by_band = {}
    for name, (low, high) in BANDS.items():
        inside = known * ((m["links"] >= low) & (m["links"] < high))
        by_band[name] = {"targets": int(inside.sum()),
                         "el_acc": ratio(m["el_correct"] * inside, inside) if has_memory else None,
                         "most_frequent": ratio(m["most_frequent_correct"] * inside, inside),
                         "alias_prior": ratio(m["alias_correct"] * inside, inside)}
    frequent = known * (m["links"] >= BANDS[FREQUENT_BAND][0])
    baselines["el_most_frequent_frequent"] = by_band[FREQUENT_BAND]["most_frequent"]
    metrics["el_acc_by_band"] = by_band
    metrics["el_acc_frequent"] = by_band[FREQUENT_BAND]["el_acc"]
    intervals = {
        # passages: other tokens; loss vs the unigram floor (negative: below it)
        "other_lm_loss": bootstrap_ratio(p["nll"], p["tokens"], p["unigram_nll"]),
        "other_token_acc": bootstrap_ratio(p["correct"], p["tokens"], p["constant_correct"]),
        # mentions: the mention metrics against their baselines on the same mentions
        "mention_lm_loss": bootstrap_ratio(m["nll"], m["tokens"], m["unigram_nll"]),
        "mention_first_token_acc": bootstrap_ratio(m["first_correct"] * has_tokens, has_tokens,
                                                   m["first_constant_correct"] * has_tokens),
    }
    if has_memory:
        intervals["el_acc"] = bootstrap_ratio(m["el_correct"] * known, known, m["most_frequent_correct"] * known)
        intervals["el_acc_frequent"] = bootstrap_ratio(m["el_correct"] * frequent, frequent,
                                                       m["most_frequent_correct"] * frequent)
    metrics["el_acc_frequent_ci"] = intervals.get("el_acc_frequent", {}).get("ci")
    metrics["baselines"], metrics["intervals"] = baselines, intervals
    return metrics


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
    recorded = run_config.get("data", {}).get("path")
    model_corpus = args.model_corpus or recorded or None
    if not args.model_corpus and recorded and not storage.exists(recorded):
        # RUN/config.yaml keeps data.path as pretrain was given it: a relative path is relative to where it ran.
        return command_error("wikiedm evaluate", f"the run was trained on the corpus {recorded!r} (its config.yaml), "
                                                 "which is not found from here: pass it as --model_corpus")
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
