"""The entity table split by rows against the replicated table under ZeRO-2 and ZeRO-3, on real ranks.

    python benchmarks/bench_memory.py                       # N = 1M x 256 on 2 CPU ranks (and 1 rank)
    python benchmarks/bench_memory.py --entities 200000     # smaller, faster
    python benchmarks/bench_memory.py --json benchmarks/results/memory.json

Each configuration (layout, ZeRO stage, ranks) is one `deepspeed --num_gpus K` launch of this
file in worker mode: EDMem (tiny transformer, the given N x D table) on synthetic batches,
AdamW, the trainer's own DeepSpeed config and row-shard stepping. Per rank it reports

- step time: median over --steps optimizer steps after one warm-up step;
- bytes moved: every collective through torch.distributed (DeepSpeed's and the memory's),
  counted by a wrapper around torch.distributed (the size of each collective's result on the
  rank: all-gather output, all-reduce tensor, reduce-scatter input), per step;
- peak memory: the process's peak resident set above its resident set before the model was built.
  The table's share is the difference with the same configuration run with a tiny table
  (--small_entities), so that the rest of the model, DeepSpeed and Python cancel out.

Ratios (rows / replicated) are printed and written to --json.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# ----------------------------------------------------------------------------- byte counting

_BYTES = {"total": 0}
_DEPTH = threading.local()


def _nbytes(x) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


def install_byte_counter() -> None:
    """Wrap torch.distributed's collectives (before DeepSpeed caches them) to add up the bytes they move."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    def counted(fn, position):
        signature = inspect.signature(fn)  # follows the logging decorators' __wrapped__
        which = list(signature.parameters)[position]

        def wrapper(*args, **kwargs):
            depth = getattr(_DEPTH, "n", 0)
            if depth == 0:  # count the outermost call only (some collectives call others)
                bound = signature.bind_partial(*args, **kwargs).arguments
                _BYTES["total"] += _nbytes(bound.get(which))
            _DEPTH.n = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                _DEPTH.n = depth
        wrapper._bench_counted = True
        return wrapper

    # the position of the argument whose size is counted: the result on this rank (the input of a reduce-scatter)
    table = {"all_reduce": 0, "all_reduce_coalesced": 0, "broadcast": 0, "reduce": 0, "all_gather": 0,
             "all_gather_into_tensor": 0, "all_gather_single": 0, "_all_gather_base": 0, "reduce_scatter": 1,
             "reduce_scatter_tensor": 1, "reduce_scatter_single": 1, "_reduce_scatter_base": 1,
             "all_to_all_single": 1}
    for name, which in table.items():
        for mod in (dist, c10d):
            fn = getattr(mod, name, None)
            if fn is not None and not getattr(fn, "_bench_counted", False):
                setattr(mod, name, counted(fn, which))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ----------------------------------------------------------------------------- worker (one rank)


def worker(a) -> None:
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ.get("BENCH_HANG_S", "1800")), exit=True)
    install_byte_counter()
    import deepspeed
    import torch
    import torch.distributed as dist

    from trainer.config import Config
    from trainer.jit_ops import init_distributed
    from trainer.model import EDMem, EDMemSpec
    from trainer.pretrain import deepspeed_config, lr_lambda, param_groups

    torch.set_num_threads(1)
    init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = Config()
    m = cfg.model
    m.d_model, m.attention_heads, m.ffn_dim, m.lower_layers, m.upper_layers = 64, 2, 128, 1, 1
    m.entity_dim, m.max_positions, m.dropout = a.entity_dim, 64, 0.0
    m.entity_block_size = a.block
    t = cfg.train
    t.micro_batch_size, t.global_batch_size, t.bf16 = a.micro, a.micro * world, "false"
    t.deepspeed_config = str(REPO / f"configs/deepspeed/zero{a.stage}.json")
    ds_config = deepspeed_config(cfg, world, universal=False)
    vocab, pad, es, ee, eos = 8192, 1, 8190, 8191, 2
    spec = EDMemSpec(m, vocab, a.entities, pad, es, eos)
    base_rss = _rss()
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=ds_config, enabled=a.stage == 3):
        model = EDMem(spec, memory_partition=a.partition, init_seed=0)
    rows = None
    if a.partition == "rows":
        group = dist.new_group(list(range(world))) if world > 1 else None
        rows = model.make_rows(rank, world, group)
    if a.stage == 3:
        model.register_for_zero3()
    schedule = lr_lambda(1000, 0.1)
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=param_groups(model, 0.01),
        optimizer=lambda groups: torch.optim.AdamW(groups, lr=1e-4),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule), config=ds_config)
    if rows is not None:
        rows.make_optimizer(1e-4, (0.9, 0.999), 1e-8, 0.01, schedule)

    g = torch.Generator().manual_seed(1000 + rank)
    B, S, M = a.micro, 64, a.mentions
    ids = torch.randint(3, 8000, (B, S), generator=g)
    for j in range(M):
        pos = 2 + j * (S - 4) // M
        ids[:, pos], ids[:, pos + 2] = es, ee
    entity_ids = torch.zeros(B, S, dtype=torch.long)
    entity_ids[ids == es] = torch.randint(3, a.entities, (int((ids == es).sum()),), generator=g)
    shift = lambda x: torch.cat([torch.full_like(x[:, :1], 0), x[:, :-1]], 1)  # noqa: E731
    batch = dict(input_ids=ids, attention_mask=torch.ones(B, S, dtype=torch.bool), decoder_input_ids=shift(ids),
                 labels=ids.clone(), entity_ids=entity_ids, decoder_entity_ids=shift(entity_ids))

    def step():
        out = engine(**batch)
        engine.backward(out["loss"])
        engine.step()
        if rows is not None:
            rows.step(1.0)
        return float(out["loss"])

    step()  # warm-up: allocates gradients and optimizer states
    dist.barrier()
    times, start_bytes = [], _BYTES["total"]
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    moved = (_BYTES["total"] - start_bytes) / a.steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_rss
    result = {"rank": rank, "step_s": statistics.median(times), "step_s_all": times, "bytes_per_step": moved,
              "memory_bytes_per_step": (rows.comm.take() / (a.steps + 1)) if rows is not None else None,
              "peak_rss_bytes": peak}
    gathered = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == 0:
        Path(a.out).write_text(json.dumps(gathered))


# ----------------------------------------------------------------------------- driver


def run_config(partition: str, stage: int, ranks: int, entities: int, a, port: int) -> dict:
    out = Path(a.tmp) / f"{partition}-z{stage}-k{ranks}-n{entities}.json"
    args = [str(Path(__file__)), "--worker", "--partition", partition, "--stage", str(stage), "--entities",
            str(entities), "--entity_dim", str(a.entity_dim), "--micro", str(a.micro), "--mentions",
            str(a.mentions), "--block", str(a.block), "--steps", str(a.steps), "--out", str(out)]
    cmd = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", str(ranks), "--master_port", str(port), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{' '.join(cmd)} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    ranks_out = json.loads(out.read_text())
    print(f"  {partition:<10} ZeRO-{stage} {ranks} rank(s) N={entities:>9,}: "
          f"step {max(r['step_s'] for r in ranks_out):.2f} s, {ranks_out[0]['bytes_per_step'] / 2**20:9.1f} MiB moved "
          f"per rank per step, peak {max(r['peak_rss_bytes'] for r in ranks_out) / 2**30:.2f} GiB "
          f"({time.time() - t0:.0f} s)", flush=True)
    return {"partition": partition, "stage": stage, "ranks": ranks, "entities": entities, "per_rank": ranks_out,
            "step_s": max(r["step_s"] for r in ranks_out),
            "bytes_per_step": max(r["bytes_per_step"] for r in ranks_out),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ranks_out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", type=int, default=1_000_000)
    ap.add_argument("--small_entities", type=int, default=1000, help="the tiny table whose peak is subtracted")
    ap.add_argument("--entity_dim", type=int, default=256)
    ap.add_argument("--micro", type=int, default=2, help="sequences per rank per step (64 tokens each)")
    ap.add_argument("--mentions", type=int, default=4, help="mentions per sequence")
    ap.add_argument("--block", type=int, default=65536)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--stages", default="2,3")
    ap.add_argument("--configs", default=None, help="only these, e.g. rows-3-2,replicated-3-2 (layout-stage-ranks); "
                                                   "no table-share subtraction, no summary")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tmp", default="/tmp/bench_memory")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--partition", default="rows", help=argparse.SUPPRESS)
    ap.add_argument("--stage", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--local_rank", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    Path(a.tmp).mkdir(parents=True, exist_ok=True)
    stages = [int(s) for s in a.stages.split(",")]
    port = 29900
    print(f"N = {a.entities:,} x {a.entity_dim}, {a.micro} x 64-token sequences with {a.mentions} mentions per rank "
          f"per step, medians of {a.steps} steps; peak memory above the tiny-table run ({a.small_entities} rows)")
    if a.configs:
        for i, c in enumerate(a.configs.split(",")):
            partition, stage, ranks = c.split("-")
            run_config(partition, int(stage), int(ranks), a.entities, a, port + i)
        return
    results = {}
    configs = [("rows", s, a.ranks) for s in stages] + [("replicated", s, a.ranks) for s in stages] + \
              [("rows", stages[0], 1), ("replicated", stages[0], 1)]
    for partition, stage, ranks in configs:
        key = f"{partition}-zero{stage}-{ranks}rank"
        big = run_config(partition, stage, ranks, a.entities, a, port)
        small = run_config(partition, stage, ranks, a.small_entities, a, port + 1)
        port += 2
        big["table_peak_bytes"] = big["peak_rss_bytes"] - small["peak_rss_bytes"]
        big["small_table"] = small
        results[key] = big
    summary = {}
    for s in stages:
        r, p = results[f"rows-zero{s}-{a.ranks}rank"], results[f"replicated-zero{s}-{a.ranks}rank"]
        summary[f"zero{s}"] = {
            "step_time_ratio_rows_over_replicated": r["step_s"] / p["step_s"],
            "bytes_ratio_rows_over_replicated": r["bytes_per_step"] / max(p["bytes_per_step"], 1),
            "table_peak_ratio_rows_over_replicated": r["table_peak_bytes"] / max(p["table_peak_bytes"], 1),
            "rows_bytes_per_step": r["bytes_per_step"], "replicated_bytes_per_step": p["bytes_per_step"],
            "rows_table_peak_bytes": r["table_peak_bytes"], "replicated_table_peak_bytes": p["table_peak_bytes"],
        }
    # The trainer's memory_comm_bytes for the replicated layout is a model of ZeRO's traffic for the table:
    # check it against what was counted (the N-row run minus the tiny-table run: the table's share).
    from trainer.memory import zero_table_traffic_bytes
    for s in stages:
        p = results[f"replicated-zero{s}-{a.ranks}rank"]
        counted = p["bytes_per_step"] - p["small_table"]["bytes_per_step"]
        model = zero_table_traffic_bytes(s, a.entities, a.entity_dim, 4, 4, 1, a.ranks) - \
            zero_table_traffic_bytes(s, a.small_entities, a.entity_dim, 4, 4, 1, a.ranks)
        summary[f"zero{s}"]["replicated_table_bytes_counted"] = counted
        summary[f"zero{s}"]["replicated_table_bytes_model"] = model
    one = results[f"rows-zero{stages[0]}-1rank"]["table_peak_bytes"]
    k = results[f"rows-zero{stages[0]}-{a.ranks}rank"]["table_peak_bytes"]
    one_r = results[f"replicated-zero{stages[0]}-1rank"]["table_peak_bytes"]
    k_r = results[f"replicated-zero{stages[0]}-{a.ranks}rank"]["table_peak_bytes"]
    summary["table_peak_per_rank_k_over_1"] = {"rows": k / max(one, 1), "replicated": k_r / max(one_r, 1),
                                               "ideal_rows": 1 / a.ranks}
    print("\nrows / replicated on", a.ranks, "ranks:")
    for s in stages:
        x = summary[f"zero{s}"]
        print(f"  ZeRO-{s}: step time x{x['step_time_ratio_rows_over_replicated']:.2f}, bytes moved "
              f"x{x['bytes_ratio_rows_over_replicated']:.4f} ({x['rows_bytes_per_step'] / 2**20:.1f} vs "
              f"{x['replicated_bytes_per_step'] / 2**20:.1f} MiB per rank per step), table's peak memory per rank "
              f"x{x['table_peak_ratio_rows_over_replicated']:.2f} ({x['rows_table_peak_bytes'] / 2**30:.2f} vs "
              f"{x['replicated_table_peak_bytes'] / 2**30:.2f} GiB)")
    for s in stages:
        x = summary[f"zero{s}"]
        print(f"  ZeRO-{s} replicated, the table's traffic: counted {x['replicated_table_bytes_counted'] / 2**20:.1f} "
              f"MiB, the trainer's memory_comm_bytes model {x['replicated_table_bytes_model'] / 2**20:.1f} MiB")
    t = summary["table_peak_per_rank_k_over_1"]
    print(f"  table's peak memory per rank, {a.ranks} ranks / 1 rank: rows x{t['rows']:.2f} (ideal "
          f"x{t['ideal_rows']:.2f}), replicated x{t['replicated']:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"entities": a.entities, "entity_dim": a.entity_dim, "ranks": a.ranks,
                                            "micro": a.micro, "mentions": a.mentions, "steps": a.steps,
                                            "device": f"CPU ({os.cpu_count()} cores)", "results": results,
                                            "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
