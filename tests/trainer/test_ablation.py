"""The ablation's switches and measurement: model.memory none (the same BART, no memory) and trainer.evaluate."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F

from schemas import UNK_ENTITY_ID
from schemas.corpus import MentionSource
from tests.trainer.runs import run
from trainer.config import load_config
from trainer.data import Collator, GlobalSampleOrder, TrainBatches, open_corpus
from trainer.evaluate import evaluate, gold_passages, load_checkpoint, t_interval
from trainer.metrics import read_metrics
from trainer.model import EDMem, EDMemSpec
from trainer.pretrain import MODEL_INPUTS

MEMORY_PARTS = ("entity_memory", "memory_access", "el_head")


def _spec(corpus_dir, ids, memory: str) -> EDMemSpec:
    cfg = load_config("configs/pretrain/tiny.yaml", ["--model.dropout=0.0", "--model.memory", memory])
    return EDMemSpec(cfg.model, ids.vocab_size, open_corpus(corpus_dir).n_entities, ids.pad, ids.entity_start, ids.eos)


@pytest.fixture(scope="module")
def batch(corpus_dir, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    order = GlobalSampleOrder(open_corpus(corpus_dir).train_shards, 0, 2)
    b = next(TrainBatches(order, Collator(ids, 160, 0.3, 0.5, 0), 4, 4, 0, 1))[0]
    return {k: b[k] for k in MODEL_INPUTS}


def test_unknown_memory_kind_is_refused():
    with pytest.raises(SystemExit, match="model.memory"):
        load_config("configs/pretrain/tiny.yaml", ["--model.memory", "entities"])


def test_memory_none_is_the_same_bart_without_memory_parameters(corpus_dir, tokenizer_and_ids, batch):
    _, ids = tokenizer_and_ids
    torch.manual_seed(0)
    edmem = EDMem(_spec(corpus_dir, ids, "entity"))
    bart = EDMem(_spec(corpus_dir, ids, "none"))
    names = [n for n, _ in bart.named_parameters()]
    assert not [n for n in names if n.split(".")[0] in MEMORY_PARTS or ".memory_access." in n]
    shared = {n: p for n, p in edmem.state_dict().items() if n in set(bart.state_dict())}
    assert set(shared) == set(bart.state_dict())  # every BART parameter is one of EDMem's
    bart.load_state_dict(shared, strict=True)
    memory_params = sum(p.numel() for n, p in edmem.named_parameters() if n not in shared)
    assert memory_params >= edmem.spec.n_entities * edmem.spec.model.entity_dim
    assert bart.num_parameters() == edmem.num_parameters() - memory_params

    out = bart(**batch)
    # The plain BART path of EDMem (use_memory=False) with the same weights gives the same LM loss.
    logits = edmem.lm_logits(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"], use_memory=False)
    target = batch["labels"].ne(-100)
    reference = F.cross_entropy(logits[target].float(), batch["labels"][target])
    torch.testing.assert_close(out["lm_loss"], reference)
    torch.testing.assert_close(out["loss"], out["lm_loss"])
    assert out["el_loss"] == 0 and out["el_head_count"] == 0
    # EDMem's reads change the LM (the check bites): its logits, with the memory, differ from the BART path's. (Its
    # batch-mean LM loss can round to the same float32 when few targets follow a mention in this batch.)
    with_memory = edmem.lm_logits(batch["input_ids"], batch["attention_mask"], batch["decoder_input_ids"],
                                  entity_ids=batch["entity_ids"], decoder_entity_ids=batch["decoder_entity_ids"])
    assert (with_memory - logits).abs().max() > 1e-4
    out["loss"].backward()
    assert all(p.grad is not None for p in bart.parameters())  # none unused: DeepSpeed's reductions need them all


def test_gold_is_hyperlinks_mapped_by_title(tmp_path: Path):
    """Labels are never gold; entity ids move to the model's vocabulary by title; unknown titles are counted."""
    import pyarrow as pa

    mention = lambda eid, title, source: {"token_start": 0, "token_end": 1, "entity_id": eid, "entity": title,  # noqa: E731
                                          "source": source, "surface": "x", "char_start": 0, "char_end": 1}
    rows = [{"passage_id": "1:0", "token_ids": [5, 6], "mentions": [
        mention(3, "A", MentionSource.HYPERLINK), mention(4, "B", MentionSource.HYPERLINK),
        mention(3, "A", MentionSource.TITLE_ALIAS), mention(UNK_ENTITY_ID, "Z", MentionSource.HYPERLINK)]}]
    shard = tmp_path / "validation-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), shard)
    gold, counts = gold_passages(tmp_path, [shard], {"A": 7})
    assert [(m["entity"], m["entity_id"]) for m in gold[0]["mentions"]] == [("A", 7), ("B", UNK_ENTITY_ID),
                                                                            ("Z", UNK_ENTITY_ID)]
    assert counts == {"passages": 1, "hyperlinks": 3, "labels_ignored": 1, "outside_vocabulary": 1, "unmappable": 1}


def test_t_interval():
    r = t_interval([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and r["n"] == 3
    assert math.isclose(r["ci"], 4.303 * 1.0 / math.sqrt(3), rel_tol=1e-9)
    assert t_interval([1.0])["ci"] is None


@pytest.fixture(scope="module")
def short_runs(corpus_dir, tmp_path_factory):
    """EDMem and the memory-less BART, 1 rank, DeepSpeed ZeRO-2 on CPU, 6 steps each, checkpointed at the end."""
    root = tmp_path_factory.mktemp("ablation_runs")
    short = ("--train.stop_after_steps", "6", "--max_steps", "6", "--train.save_every", "6", "--train.eval_every", "3",
             "--data.max_seq_len", "256", "--model.max_positions", "256",  # whole validation passages
             "--train.log_loss_grad_norms", "true")
    return {memory: run(corpus_dir, root / memory, 1, "--model.memory", memory, *short) for memory in ("entity", "none")}


def _val_hyperlinks(corpus_dir: Path) -> tuple[int, int]:
    """Hyperlink mentions with a known entity and hyperlink tokens in the validation split, from the Parquet alone."""
    known = tokens = 0
    for shard in open_corpus(corpus_dir).validation_shards:
        for row in pq.read_table(shard, columns=["mentions"]).to_pylist():
            for m in row["mentions"]:
                if m["source"] == MentionSource.HYPERLINK:
                    known += m["entity_id"] >= 3
                    tokens += m["token_end"] - m["token_start"]
    return known, tokens


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested metrics -> {"a.b.c": value}; lists (intervals) by index."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, list):
            out.update({f"{prefix}{k}.{i}": x for i, x in enumerate(v)})
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_memory_none_trains_under_deepspeed_and_both_evaluate(short_runs, corpus_dir):
    none_rows = [r for r in read_metrics(short_runs["none"] / "metrics.jsonl") if r["split"] == "train"]
    assert len(none_rows) == 6 and all(r["el_loss"] == 0 and r["mentions"] == 0 for r in none_rows)
    # the two terms' gradient norms, logged apart (BART has no EL term), and the clipping factor
    entity_rows = [r for r in read_metrics(short_runs["entity"] / "metrics.jsonl") if r["split"] == "train"]
    assert all(r["lm_grad_norm"] > 0 and r["el_grad_norm"] > 0 and 0 < r["clip_factor"] <= 1 for r in entity_rows)
    assert all(r["lm_grad_norm"] > 0 and "el_grad_norm" not in r for r in none_rows)
    assert none_rows[-1]["lm_loss"] < none_rows[0]["lm_loss"]
    config = (short_runs["none"] / "config.yaml").read_text()
    assert "memory: none" in config

    bart, run_config = load_checkpoint(short_runs["none"])
    assert not bart.has_memory and run_config["model"]["memory"] == "none"
    edmem, _ = load_checkpoint(short_runs["entity"])
    assert edmem.has_memory
    known, tokens = _val_hyperlinks(corpus_dir)
    results = {}
    for name, model in (("none", bart), ("entity", edmem)):
        a = evaluate(model, corpus_dir, batch_size=32)
        subset = evaluate(model, corpus_dir, batch_size=8, max_passages=20)
        again = evaluate(model, corpus_dir, batch_size=5, max_passages=20)  # fixed masks and subset
        flat_subset, flat_again = _flat(subset), _flat(again)
        assert flat_subset.keys() == flat_again.keys()
        for key, value in flat_subset.items():  # counts exactly; float32 sums up to rounding (the special mass, 1 - exp
            # of a difference of two near-equal losses, to 1e-6 absolute)
            assert flat_again[key] == (pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True)
                                       if isinstance(value, float) else value), key
        assert subset["passages"] == 20 and subset["validation_passages"] == a["passages"]
        assert a["dropped_mentions"] == 0 and a["truncated_tokens"] == 0
        assert a["mention_tokens"] == tokens > 0 and a["other_tokens"] > 0
        assert all(math.isfinite(a[k]) for k in ("mention_lm_loss", "other_lm_loss"))
        results[name] = a
    assert results["none"]["el_acc"] is None and results["none"]["el_targets"] == 0
    assert results["entity"]["el_targets"] == known > 0 and 0 <= results["entity"]["el_acc"] <= 1
    # Only the masked mention tokens are hard: the visible tokens are copied better.
    assert results["entity"]["other_lm_loss"] < results["entity"]["mention_lm_loss"]
    for r in results.values():  # word metrics: the special ids' mass is out of the scored softmax
        assert r["other_lm_loss"] <= r["other_lm_loss_full_vocab"] and 0 <= r["other_special_mass"] < 1
        assert math.isfinite(r["baselines"]["unigram_other_loss"]) and set(r["el_acc_by_band"]) == {"0", "1-4", "5-19",
                                                                                                   ">=20"}
        assert sum(b["targets"] for b in r["el_acc_by_band"].values()) == known  # every known target, in one band


def test_evaluate_command_writes_json(short_runs, corpus_dir, tmp_path):
    from trainer.evaluate import main

    out = tmp_path / "eval.json"
    main(["--checkpoint", str(short_runs["none"]), "--corpus", str(corpus_dir), "--output", str(out)])
    metrics = json.loads(out.read_text())
    assert metrics["memory"] == "none" and metrics["mention_tokens"] > 0


def test_evaluate_names_a_recorded_corpus_it_cannot_find(short_runs, corpus_dir, tmp_path, capsys):
    """RUN/config.yaml keeps data.path as pretrain was given it: relative to where the run ran. Evaluated from
    elsewhere, that corpus is not found: one line saying so and what to pass, not a FileNotFoundError."""
    import shutil

    import yaml

    from trainer.evaluate import main

    run_dir = tmp_path / "run"
    shutil.copytree(short_runs["none"], run_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["data"]["path"] = "out/not-here"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["--checkpoint", str(run_dir), "--corpus", str(corpus_dir)]) == 2
    assert "the run was trained on the corpus 'out/not-here'" in capsys.readouterr().err
    out = tmp_path / "eval.json"
    main(["--checkpoint", str(run_dir), "--corpus", str(corpus_dir), "--model_corpus", str(corpus_dir),
          "--output", str(out)])
    assert json.loads(out.read_text())["model_corpus"] == str(corpus_dir)
