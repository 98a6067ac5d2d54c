"""Train BLINK's bi-encoder on a corpus's own hyperlinks, with in-batch negatives.

    wikiedm train-linker --corpus OUT --output MODEL_DIR [--config configs/linker/train_tiny.yaml]
    wikiedm train-linker --corpus OUT --output MODEL_DIR --init_model BLINK_DIR   # fine-tune BLINK's release
    python -m linker.train ...                                                     (the same command line)

Every hyperlink mention of the train split is a (context, entity) pair; the
entity's candidate text is its title and description. A batch of B mentions
is scored against the distinct entities of the batch (B x E dot products) and
trained with cross-entropy on the gold entity; a mention's gold entity
appearing twice in the batch is one column, so it is never its own negative.
The result is a model folder in BLINK's layout (``biencoder.bin`` +
``biencoder.json`` + ``vocab.txt``) that ``wikiedm link-text`` and the Beam jobs
load like BLINK's release. Validation metrics (see :mod:`linker.evaluate`)
are logged every ``eval_every`` steps and written to ``OUTPUT/metrics.json``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
import time
from itertools import islice
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from linker.biencoder import BiEncoder, BlinkParams, LoadedBiEncoder, load_biencoder, new_biencoder, save_model_folder
from linker.catalogue import EntityCatalogue, read_catalogue
from linker.corpus_data import MentionExample, iter_examples, shuffled
from linker.inputs import BlinkInputs
from linker.options import BertShape, TrainConfig, train_parser  # noqa: F401 - BertShape, TrainConfig re-exported

log = logging.getLogger("linker.train")


# --------------------------------------------------------------------------- pieces


def in_batch_targets(entity_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """(distinct entity ids in first-seen order, each mention's column among them)."""
    columns: dict[int, int] = {}
    targets = [columns.setdefault(e, len(columns)) for e in entity_ids]
    return list(columns), targets


def in_batch_loss(model: BiEncoder, context_ids: torch.Tensor, cand_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each mention against the batch's distinct entities."""
    return F.cross_entropy(model(context_ids, cand_ids), targets)


def lr_at(step: int, total: int, warmup_fraction: float) -> float:
    """Linear warm-up to 1, then linear decay to 0 (as a multiplier of the peak lr)."""
    warmup = max(1, int(total * warmup_fraction))
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def optimizer_for(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


class CandidateCache:
    """Candidate token ids of catalogue rows, computed once per entity."""

    def __init__(self, inputs: BlinkInputs, catalogue: EntityCatalogue) -> None:
        self.inputs = inputs
        self.catalogue = catalogue
        self.ids: dict[int, list[int]] = {}

    def get(self, entity_ids: Sequence[int]) -> list[list[int]]:
        missing = [e for e in entity_ids if e not in self.ids]
        if missing:
            rows = [self.catalogue.row_of_id(e) for e in missing]
            encoded = self.inputs.candidates([self.catalogue.titles[r] for r in rows],
                                             [self.catalogue.descriptions[r] for r in rows])
            self.ids.update(zip(missing, encoded))
        return [self.ids[e] for e in entity_ids]


def batches(examples: Iterator[MentionExample], size: int) -> Iterator[list[MentionExample]]:
    while chunk := list(islice(examples, size)):
        yield chunk


def training_stream(config: TrainConfig, catalogue: EntityCatalogue) -> Iterator[MentionExample]:
    """Endless shuffled examples (epoch after epoch) of entities in the catalogue."""
    epoch = 0
    while True:
        stream = iter_examples(config.corpus, "train", config.sources, shuffle_files_seed=config.seed + epoch)
        count = 0
        for ex in shuffled(stream, config.shuffle_buffer, config.seed + epoch):
            if catalogue.row_of_id(ex.entity_id) is not None:
                count += 1
                yield ex
        if count == 0:
            raise ValueError(f"no {config.sources} mentions of vocabulary entities in {config.corpus}/passages/train-*")
        epoch += 1


# --------------------------------------------------------------------------- model set-up


def initial_model(config: TrainConfig, catalogue: EntityCatalogue) -> LoadedBiEncoder:
    """The init model folder's bi-encoder, or a new one (with a corpus-built vocabulary if none is given)."""
    from transformers import BertConfig

    from linker.wordpiece import build_vocab, load_wordpiece

    if config.init_model:
        loaded = load_biencoder(config.init_model, config.vocab or None)
        loaded.model.train()
        return loaded
    vocab = config.vocab
    if not vocab:
        vocab = os.path.join(config.output, "vocab.txt")
        contexts = (f"{e.context.left} {e.context.mention} {e.context.right}"
                    for e in iter_examples(config.corpus, "train", config.sources, limit=200_000))
        build_vocab([*catalogue.titles, *catalogue.descriptions, *contexts], vocab, config.vocab_size)
    params = BlinkParams(max_context_length=config.max_context_length, max_cand_length=config.max_cand_length,
                         num_attention_heads=config.bert.num_attention_heads, bert_model="from-scratch")
    tokenizer = load_wordpiece(vocab, params.lowercase)
    inputs = BlinkInputs(tokenizer, params.max_context_length, params.max_cand_length, params.max_seq_length,
                         lowercase=params.lowercase)
    shape = dataclasses.asdict(config.bert)
    dropout = shape.pop("dropout")
    bert_config = BertConfig(vocab_size=len(tokenizer), hidden_dropout_prob=dropout,
                             attention_probs_dropout_prob=dropout, **shape)
    torch.manual_seed(config.seed)
    model = new_biencoder(bert_config, pad_id=inputs.special.pad)
    return LoadedBiEncoder(model, params, inputs, weights_path="", vocab_path=vocab)


# --------------------------------------------------------------------------- the loop


def train(config: TrainConfig) -> dict:
    """Train, save the model folder, return the final metrics."""
    from linker.catalogue import read_alias_index
    from linker.evaluate import evaluate_biencoder

    config.validate()
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    os.makedirs(config.output, exist_ok=True)
    catalogue = read_catalogue(config.corpus)
    aliases = read_alias_index(config.corpus, catalogue.id_of_title())
    loaded = initial_model(config, catalogue)
    from linker.biencoder import resolve_device

    device = resolve_device(config.device)
    model, inputs = loaded.model.to(device), loaded.inputs
    model.train()
    cache = CandidateCache(inputs, catalogue)
    optimizer = optimizer_for(model, config.lr, config.weight_decay)
    validation = list(iter_examples(config.corpus, "validation", config.sources, limit=config.eval_examples))
    history = []

    def run_eval(step: int) -> dict:
        metrics = evaluate_biencoder(loaded, catalogue, aliases, validation)
        metrics["step"] = step
        history.append(metrics)
        log.info("step %d validation: biencoder %s | alias prior %s", step, json.dumps(metrics["biencoder"]),
                 json.dumps(metrics["alias_prior"]))
        model.train()
        return metrics

    started = time.monotonic()
    stream = training_stream(config, catalogue)
    for step, batch in enumerate(batches(stream, config.batch_size)):
        if step >= config.max_steps:
            break
        entity_ids, targets = in_batch_targets([ex.entity_id for ex in batch])
        context_ids = torch.tensor(inputs.contexts([ex.context for ex in batch]), dtype=torch.long, device=device)
        cand_ids = torch.tensor(cache.get(entity_ids), dtype=torch.long, device=device)
        for group in optimizer.param_groups:
            group["lr"] = config.lr * lr_at(step, config.max_steps, config.warmup_fraction)
        loss = in_batch_loss(model, context_ids, cand_ids, torch.tensor(targets, device=device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}")
        if config.log_every and step % config.log_every == 0:
            log.info("step %d loss %.4f (%d entities in batch) %.1fs", step, loss.item(), len(entity_ids),
                     time.monotonic() - started)
        if config.eval_every and step and step % config.eval_every == 0 and validation:
            run_eval(step)
    final = run_eval(config.max_steps) if validation else {"step": config.max_steps}
    model.eval()
    save_model_folder(model.state_dict(), loaded.params, config.output, "biencoder", loaded.vocab_path)
    with open(os.path.join(config.output, "metrics.json"), "w", encoding="utf-8") as fh:
        json.dump({"config": dataclasses.asdict(config), "final": final, "history": history}, fh, indent=2)
    return final


def main(argv: list[str] | None = None) -> int:
    from wikiedm.config import ConfigError, command_error

    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = train_parser()
    try:
        config, _, _ = parser.check(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        return command_error("wikiedm train-linker", str(exc))
    final = train(config)
    print(json.dumps(final, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
