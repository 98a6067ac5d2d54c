"""EDMem pre-training: joint masked-LM + entity linking, on DeepSpeed, with the entity memory split by rows.

    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT --output RUN [--num_gpus N]
    python -m trainer.pretrain ... / deepspeed trainer/pretrain.py ...     (the same command line)

``--num_gpus N`` starts N ranks through DeepSpeed's launcher (trainer/launch.py); without it this
process trains alone, or as one of the ranks a launcher started. Any config key can be overridden:
``--model.entity_dim=64``, ``--optim.lr 3e-4``, ``--max_steps 100``,
``--deepspeed_config configs/deepspeed/zero3.json``; ``--help-config`` lists them. The phases below
run top to bottom.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (deepspeed trainer/pretrain.py): make `trainer` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import torch
import torch.distributed as dist

from trainer import checkpoint
from trainer.config import Config, config_json, config_parser, dump_config, validate
from trainer.data import (
    MODEL_INPUTS,
    Collator,
    CorpusError,
    GlobalSampleOrder,
    TrainBatches,
    load_tokenizer,
    open_corpus,
    prefetch,
    validation_batches,
)
from trainer.jit_ops import init_distributed
from trainer.launch import launcher_command, run_launcher
from trainer.memory import zero_table_traffic_bytes
from trainer.metrics import (
    MetricsLog,
    StepAccumulator,
    Timer,
    flops_per_step,
    loss_grad_norms,
    peak_flops,
    plot_losses,
    report_sinks,
    summarize,
)
from trainer.model import EDMem, EDMemSpec
from trainer.run_guard import (
    OutputInUseError,
    check_run_folder,
    guard_run_folder,
    remove_run_files,
    run_identity,
    write_run_record,
)
from trainer.speed import (
    compile_layers,
    cpu_micro_batch,
    enable_tf32,
    pad_batch,
    probe_batch,
    resolve_micro_batch,
    use_compile,
)
from wikiedm.config import ConfigError


def parse_args(argv: list[str]) -> Config:
    """The command line (wikiedm.config's shared parser; ``--help-config`` lists every key)."""
    try:
        cfg, _ = config_parser(description=__doc__.split("\n\n")[0]).parse(argv)
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    validate(cfg)
    report_sinks(cfg.train.report_to)  # an unknown sink, or wandb asked for and not installed, fails here
    return cfg


def overwrite_requested(argv: list[str]) -> bool:
    """``--overwrite true``: replace another run's files in --output (trainer.run_guard)."""
    return bool(config_parser().parse_with_extras(argv)[1].overwrite)


def deepspeed_config(cfg: Config, world_size: int, universal: bool) -> dict:
    """The DeepSpeed JSON with batch, precision, clipping and stage taken from our config (one source of truth)."""
    ds = json.loads(Path(cfg.train.deepspeed_config).read_text())
    t = cfg.train
    if t.global_batch_size % (t.micro_batch_size * world_size):
        raise SystemExit(f"train.global_batch_size {t.global_batch_size} must be a multiple of micro batch "
                         f"{t.micro_batch_size} x {world_size} ranks")
    bf16 = {"auto": torch.cuda.is_available() and torch.cuda.is_bf16_supported(), "true": True,
            "false": False}[str(t.bf16).lower()]
    ds.update({
        "train_batch_size": t.global_batch_size,
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.global_batch_size // (t.micro_batch_size * world_size),
        "gradient_clipping": cfg.optim.grad_clip,
        "bf16": {"enabled": bool(bf16)},
        "fp16": {"enabled": False},
        "zero_allow_untested_optimizer": True,  # our torch AdamW (fused on GPU) with its own param groups
        "steps_per_print": 10**9,  # we log ourselves
        "wall_clock_breakdown": False,
    })
    ds.pop("optimizer", None), ds.pop("scheduler", None)
    if t.zero_stage is not None:
        ds.setdefault("zero_optimization", {})["stage"] = t.zero_stage
    if bf16 and ds.get("zero_optimization", {}).get("stage", 0) == 2:
        # ZeRO-2 otherwise sums the micro-batches' gradients in bf16 (its default is the weights' dtype)
        ds.setdefault("data_types", {}).setdefault("grad_accum_dtype", "fp32")
    ds.setdefault("checkpoint", {})["load_universal"] = universal
    return ds


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices (incl. embeddings and the entity table), not on biases and LayerNorms."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_lambda(max_steps: int, warmup_fraction: float):
    warmup = max(1, int(round(warmup_fraction * max_steps)))

    def schedule(step: int) -> float:  # step = optimizer steps taken so far
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (max_steps - step) / max(1, max_steps - warmup))

    return schedule


def to_device(batch: dict, device, pad_to: int | None = None, pad_id: int = 0) -> dict:
    """The model inputs on the device; with ``pad_to`` right-padded to that length first (static shapes)."""
    if pad_to is not None:
        batch = pad_batch(batch, pad_to, pad_id)
    if device.type == "cuda":  # pinned host memory: the copies overlap the previous micro-batch's compute
        return {k: batch[k].pin_memory().to(device, non_blocking=True) for k in MODEL_INPUTS}
    return {k: batch[k] for k in MODEL_INPUTS}


def resolve_partition(requested: str, world_size: int, resume) -> str:
    """'auto': the resumed checkpoint's layout, else rows above one rank. An explicit choice must match it."""
    saved = checkpoint.saved_partition(*resume) if resume is not None else None
    if requested == "auto":
        return saved or ("rows" if world_size > 1 else "replicated")
    if saved is not None and saved != requested:
        raise SystemExit(f"checkpoint {resume[0] / resume[1]} keeps the entity table {saved}; this run asks for "
                         f"model.memory_partition={requested}: resume with {saved} (or auto)")
    return requested


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = launcher_command(argv)
    try:
        if command is not None:  # --num_gpus N: the launcher starts the ranks, each of which runs train()
            cfg = parse_args(argv)  # a bad flag or --help: once, here, not once per rank
            if not cfg.data.path:
                raise SystemExit("no corpus: pass --corpus OUT (the corpus job's output folder)")
            # once, here: the ranks then find this run's record (another run's files already removed)
            if guard_run_folder(cfg.train.output_dir, run_identity(cfg), overwrite_requested(argv)) == "overwrite":
                print(f"[pretrain] --overwrite true: removed another run's checkpoints and metrics from "
                      f"{cfg.train.output_dir}", flush=True)
            raise SystemExit(run_launcher(command))
        train(argv)
    except (CorpusError, OutputInUseError) as exc:  # bad input: one line naming the problem, no traceback
        print(f"[pretrain] error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def train(argv: list[str] | None = None) -> None:
    # ---- phase 1: configuration, the corpus's checks (bad input fails here, in seconds), processes ----
    argv = sys.argv[1:] if argv is None else argv
    cfg = parse_args(argv)
    if not cfg.data.path:
        raise SystemExit("no corpus: pass --corpus OUT (the corpus job's output folder)")
    corpus = open_corpus(cfg.data.path, verify_sha256=cfg.data.verify_sha256)
    import deepspeed

    if "RANK" not in os.environ:  # plain `python -m trainer.pretrain`: a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    init_distributed()  # DeepSpeed's, without waiting on a dead build's lock or leaving its buffers in /dev/shm
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    enable_tf32(device)
    run_dir = Path(cfg.train.output_dir)
    is_main = rank == 0
    # Another run's checkpoints in run_dir: refused (every rank finds the same, so a refusal ends them all), or
    # with --overwrite removed. Rank 0 changes the folder only once every rank has looked, and before any reads it.
    identity = run_identity(cfg)
    found = check_run_folder(run_dir, identity, overwrite_requested(argv))
    dist.barrier()
    if is_main:
        if found == "overwrite":
            remove_run_files(run_dir)
            print(f"[pretrain] --overwrite true: removed another run's checkpoints and metrics from {run_dir}",
                  flush=True)
        write_run_record(run_dir, identity)
        dump_config(cfg, run_dir / "config.yaml")
    dist.barrier()
    log = MetricsLog(run_dir, enabled=is_main, report_to=cfg.train.report_to, config=cfg.to_dict())

    def say(msg: str) -> None:
        if is_main:
            print(f"[pretrain] {msg}", flush=True)

    # ---- phase 2: tokenizer, entity vocabulary ---------------------------------------------------
    tokenizer, ids = load_tokenizer(corpus.tokenizer_dir)
    say(f"corpus {corpus.root}: {len(corpus.train_shards)} train / {len(corpus.validation_shards)} validation "
        f"shards, {corpus.n_entities} entities, vocabulary {ids.vocab_size}")

    # ---- phase 3: model (same seed on every rank: identical initial weights) -------------------
    torch.manual_seed(cfg.train.seed)
    spec = EDMemSpec(model=cfg.model, vocab_size=ids.vocab_size, n_entities=corpus.n_entities,
                     pad_token_id=ids.pad, entity_start_token_id=ids.entity_start, decoder_start_token_id=ids.eos)
    resume = checkpoint.find_resume(run_dir, cfg.train.resume)
    if resume is not None:
        saved_spec = json.loads((resume[0] / resume[1] / "edmem_spec.json").read_text())
        if saved_spec["n_entities"] != corpus.n_entities:
            raise SystemExit(f"checkpoint {resume[0] / resume[1]} has an entity table of {saved_spec['n_entities']} "
                             f"rows; the corpus {corpus.root} has {corpus.n_entities} entities: another vocabulary")
    # model.memory none (the BART baseline) has no table to lay out
    partition = "replicated" if cfg.model.memory == "none" else resolve_partition(cfg.model.memory_partition,
                                                                                   world_size, resume)
    universal = resume is not None and checkpoint.saved_world_size(*resume) != world_size
    per_rank = cfg.train.global_batch_size // world_size
    probe_micro = cfg.train.micro_batch_size == "auto"
    if probe_micro:  # provisional (CPU's choice) until the probe below
        cfg.train.micro_batch_size = cpu_micro_batch(per_rank)
    ds_config = deepspeed_config(cfg, world_size, universal)
    stage = ds_config.get("zero_optimization", {}).get("stage", 0)
    bf16 = ds_config["bf16"]["enabled"]
    compiled = use_compile(cfg.train.compile, device, stage)
    with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=stage == 3):
        model = EDMem(spec, el_weight=cfg.optim.el_weight, memory_partition=partition, init_seed=cfg.train.seed)
    rows = None
    if partition == "rows":  # this rank's rows, outside DeepSpeed: never partitioned, gathered or broadcast by ZeRO
        group = dist.new_group(list(range(world_size))) if world_size > 1 else None
        rows = model.make_rows(rank, world_size, group, device)
    if cfg.model.init_from:
        from trainer.export import load_bart_weights
        load_bart_weights(model, cfg.model.init_from)
    if stage == 3:
        model.register_for_zero3()
    if probe_micro and device.type == "cuda":
        if stage == 3 or (rows is not None and world_size > 1):  # partitioned weights or collective reads: no probe
            say(f"train.micro_batch_size auto: no probe under ZeRO-3 or rows over several ranks; using "
                f"{cfg.train.micro_batch_size}")
        else:
            for p in model.parameters():  # the dtype and device DeepSpeed gives them (it casts bf16 the same way)
                p.data = p.data.to(device, torch.bfloat16 if bf16 else p.dtype)

            def try_step(b: int) -> None:
                batch = probe_batch(b, cfg.data.max_seq_len, ids, corpus.n_entities, 15, device)
                model(**batch)["loss"].backward()
                model.zero_grad(set_to_none=True)

            chosen = resolve_micro_batch(per_rank, device, try_step, model.num_parameters(), bf16, say=say)
            if rows is not None and rows.weight.grad is not None:  # the probe's reads added into the rows' gradient
                rows.weight.grad.zero_()
                rows.comm.take()
            if world_size > 1:  # every rank runs the same micro-batch: the smallest choice
                t = torch.tensor([chosen], device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MIN)
                chosen = int(t)
            model.zero_grad(set_to_none=True)
            cfg.train.micro_batch_size = chosen
            ds_config = deepspeed_config(cfg, world_size, universal)
    if probe_micro:
        say(f"train.micro_batch_size auto: {cfg.train.micro_batch_size}")
    if compiled:
        say(f"torch.compile: {compile_layers(model)} transformer layers (micro-batches padded to "
            f"{cfg.data.max_seq_len} positions)")
    say(f"EDMem: {model.num_parameters() / 1e6:.2f}M parameters, "
        + ("no entity memory (model.memory none: BART, LM loss only)" if not model.has_memory else
           f"entity table {corpus.n_entities} x {cfg.model.entity_dim} "
           + (f"split by rows over {world_size} ranks (rows {rows.row_start}..{rows.row_end - 1} here)"
              if rows is not None else "replicated (a DeepSpeed parameter)"))
        + f"; ZeRO stage {stage}, bf16 {bf16}, compile {compiled}, "
        f"{world_size} ranks x {ds_config['gradient_accumulation_steps']} accumulation x "
        f"{cfg.train.micro_batch_size} = {cfg.train.global_batch_size} sequences per step")

    # ---- phase 4: DeepSpeed engine: AdamW, warm-up then linear decay, clipping -------------------
    # The table's rows (partition rows) get their own AdamW with the same settings and schedule,
    # stepped right after the engine's; DeepSpeed clips its gradients by their global norm, the
    # rows are clipped by theirs (over all ranks) at the same threshold.
    fused = device.type == "cuda"  # one kernel for all of AdamW's tensors
    schedule = lr_lambda(cfg.train.max_steps, cfg.optim.warmup_fraction)
    engine, _, _, scheduler = deepspeed.initialize(
        model=model,
        model_parameters=param_groups(model, cfg.optim.weight_decay),
        optimizer=lambda groups: torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=tuple(cfg.optim.betas),
                                                   eps=cfg.optim.eps, fused=fused),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
        config=ds_config,
    )
    if stage == 3 and rows is None and model.has_memory:  # whether ZeRO-3 really splits the table
        table = model.entity_memory.table
        say(f"ZeRO-3 keeps {table.ds_tensor.numel()} of the table's {table.ds_numel} elements on this rank"
            + (" (below stage3_param_persistence_threshold: whole on every rank)"
               if getattr(table, "ds_persist", False) else ""))
    accumulation = getattr(engine.optimizer, "gradient_accumulation_dtype", None)
    say(f"weights in {next(engine.module.parameters()).dtype} for the forward"
        + (f"; gradients summed over micro-batches in {accumulation}" if accumulation is not None else ""))
    if rows is not None:  # fused on CPU too: ~9x faster than the for-loop AdamW over a large table here
        rows.make_optimizer(cfg.optim.lr, cfg.optim.betas, cfg.optim.eps, cfg.optim.weight_decay, schedule,
                            fused=device.type in ("cuda", "cpu"))
        comm_per_step = None  # counted: the bytes of the memory's own collectives
    elif not model.has_memory:
        comm_per_step = 0
    else:  # what ZeRO moves for the replicated table (see trainer.memory.zero_table_traffic_bytes)
        comm_per_step = zero_table_traffic_bytes(stage, corpus.n_entities, cfg.model.entity_dim, 2 if bf16 else 4,
                                                 2 if bf16 else 4, ds_config["gradient_accumulation_steps"],
                                                 world_size)

    # ---- phase 5: resume (weights, optimizer, scheduler, data position, RNG) --------------------
    step, samples_seen = 0, 0
    if resume is not None:
        ckpt_dir, tag = resume
        if rows is not None:
            same = checkpoint.load_rows(rows, ckpt_dir / tag)
            say(f"entity rows {'restored' if same else 're-cut from the saved shards'} "
                f"({checkpoint.saved_world_size(ckpt_dir, tag)} ranks then, {world_size} now)")
        if universal:
            say(f"checkpoint {tag} was written by {checkpoint.saved_world_size(ckpt_dir, tag)} ranks, "
                f"resuming on {world_size}: converting to a universal checkpoint")
            tag = checkpoint.convert_to_universal(ckpt_dir, tag)
        state = checkpoint.load(engine, ckpt_dir, tag, world_size)
        step, samples_seen = state["step"], state["samples_seen"]
        log.forget_after(step)  # rows of steps after the checkpoint were lost work: they are redone
        say(f"resumed from {ckpt_dir / tag}: step {step}, {samples_seen} samples seen, "
            f"RNG {'restored' if state['rng_restored'] else 'reseeded (rank layout changed)'}")
    if resume is None or not state["rng_restored"]:
        # Dropout differs across ranks; a reseed after a layout change depends on the step, not the history.
        seed = cfg.train.seed + 1000 * rank + 7919 * step
        random.seed(seed), np.random.seed(seed % 2**32), torch.manual_seed(seed)

    # ---- phase 6: data ----------------------------------------------------------------------------
    collator = Collator(ids, cfg.data.max_seq_len, cfg.data.random_token_mask_prob,
                        cfg.data.salient_span_mask_prob, cfg.train.seed, corpus.n_entities, str(corpus.root))
    order = GlobalSampleOrder(corpus.train_shards, cfg.train.seed, cfg.data.shuffle_window_row_groups,
                              cfg.data.overfit_passages)
    train_batches = prefetch(TrainBatches(order, collator, cfg.train.global_batch_size, cfg.train.micro_batch_size,
                                          rank, world_size, start_sample=samples_seen), cfg.data.num_workers)
    val_batches = validation_batches(corpus.validation_shards, collator, cfg.train.micro_batch_size, rank,
                                     world_size, cfg.data.validation_batches) if cfg.train.eval_every else []
    say(f"train: {order.epoch_size} passages per epoch in {len(order.row_groups)} row groups; "
        f"validation: {len(val_batches)} micro-batches per rank")

    flop_peak = peak_flops(cfg.train.peak_tflops)
    pad_to = cfg.data.max_seq_len if compiled else None  # one shape for the compiled layers

    def inputs(batch: dict) -> dict:
        return to_device(batch, device, pad_to, ids.pad)

    non_embedding = model.num_parameters(exclude_entity_table=True) - ids.vocab_size * cfg.model.d_model

    def validate() -> None:
        if not val_batches:
            return
        engine.eval()
        acc = StepAccumulator()
        with torch.no_grad():
            for batch in val_batches:
                acc.add(engine(**inputs(batch)), batch)
        engine.train()
        record = {"step": step, "split": "validation", **summarize(acc.reduce(device), cfg.optim.el_weight)}
        log.write(record)

    def save() -> None:
        client = {"step": step, "samples_seen": samples_seen, "world_size": world_size,
                  "global_batch_size": cfg.train.global_batch_size, "config": config_json(cfg)}
        tag = checkpoint.save(engine, run_dir / "checkpoints", step, client, spec.to_dict(),
                              cfg.train.keep_checkpoints, rows)
        say(f"saved checkpoint {run_dir / 'checkpoints' / tag}")

    # ---- phase 7: training loop -------------------------------------------------------------------
    engine.train()
    acc, timer = StepAccumulator(), Timer()
    steps_this_run = 0
    memory_grad_norm = None
    # Per-loss gradient norms (train.log_loss_grad_norms): a forward of their own on copies of the parameters. Not
    # with split rows (their reads add into rows.weight.grad in any backward) nor ZeRO-3 (partitioned parameters).
    split_norms = cfg.train.log_loss_grad_norms and rows is None and stage < 3 and world_size == 1
    while step < cfg.train.max_steps:
        waiting = time.perf_counter()  # host time blocked on the prefetcher: the data path not keeping up
        micro_batches = next(train_batches)
        data_wait_s = time.perf_counter() - waiting
        samples_seen += cfg.train.global_batch_size  # the resume position (the prefetcher runs ahead)
        logging_step = (step + 1) % cfg.train.log_every == 0 or step + 1 == cfg.train.max_steps
        grad_norms = {}
        for batch in micro_batches:
            if split_norms and logging_step and not grad_norms:  # the step's first micro-batch
                grad_norms = loss_grad_norms(engine.module, inputs(batch))
            out = engine(**inputs(batch))
            engine.backward(out["loss"])
            engine.step()  # DeepSpeed steps the optimizer and scheduler at the accumulation boundary
            acc.add(out, batch)  # device-side sums: no host synchronisation per micro-batch
        if rows is not None:  # the accumulation boundary: step this rank's rows
            memory_grad_norm = rows.step(cfg.optim.grad_clip)
        acc.add_step(rows.comm.take() if rows is not None else comm_per_step, data_wait_s)
        step += 1
        steps_this_run += 1
        if cfg.train.log_sample_ids:
            gathered = [None] * world_size
            dist.all_gather_object(gathered, [(i, p) for b in micro_batches
                                              for i, p in zip(b["sample_indices"], b["passage_ids"])])
            flat = [x for part in gathered for x in part]
            log.write_samples(step, [i for i, _ in flat], [p for _, p in flat])

        if step % cfg.train.log_every == 0 or step == cfg.train.max_steps:
            sums = acc.reduce(device)
            elapsed = timer.lap()
            record = {"step": step, "split": "train", **summarize(sums, cfg.optim.el_weight),
                      "lr": scheduler.get_last_lr()[0], "grad_norm": engine.get_global_grad_norm(),
                      "tokens_per_s": sums["input_tokens"] / elapsed, "samples": int(sums["samples"]),
                      "samples_seen": samples_seen,
                      "step_time_s": elapsed * sums["world_size"] / max(sums["steps"], 1)}
            record["data_wait_frac"] = record["data_wait_s"] / record["step_time_s"]  # of the loop's time, rank mean
            if isinstance(record["grad_norm"], torch.Tensor):
                record["grad_norm"] = record["grad_norm"].item()
            record.update(grad_norms)
            if record["grad_norm"] is not None and cfg.optim.grad_clip > 0:  # the factor clipping scaled the step by
                record["clip_factor"] = min(1.0, cfg.optim.grad_clip / max(record["grad_norm"], 1e-12))
            if memory_grad_norm is not None:
                record["memory_grad_norm"] = memory_grad_norm.item()
            if device.type == "cuda":  # the run's high-water mark of allocated device memory so far
                record["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
            if flop_peak:
                flops = flops_per_step(non_embedding, cfg.model.d_model, ids.vocab_size, cfg.model.entity_dim,
                                       corpus.n_entities, sums["input_tokens"], sums["lm_tokens"],
                                       sums["el_head_count"])
                record["mfu"] = flops / elapsed / (flop_peak * world_size)
            log.write(record)
            acc.reset()
        if cfg.train.eval_every and step % cfg.train.eval_every == 0:
            validate()
            if rows is not None:
                rows.comm.take()  # validation reads are not training traffic
        if (cfg.train.save_every and step % cfg.train.save_every == 0) or step == cfg.train.max_steps:
            save()
        if cfg.train.stop_after_steps and steps_this_run >= cfg.train.stop_after_steps:
            say(f"stopping after {steps_this_run} steps (train.stop_after_steps)")
            break

    # ---- phase 8: wrap up -------------------------------------------------------------------------
    train_batches.close()
    log.close()
    if is_main and cfg.train.plot and step == cfg.train.max_steps:
        png = plot_losses(run_dir)
        say(f"done: {step} steps; loss curve {png}")
    dist.barrier()
    # the process group is released here, while the run is still whole, rather than in the interpreter's teardown
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
