"""Benchmark: passages per second of the trainer's data path on one rank, the reference path vs the one training uses.

The whole path is timed: global sample order -> Parquet row groups -> collation into the tensors
``EDMem.forward`` takes (micro-batches of ``--micro_batch`` at ``--max_seq_len``). Two variants, in one
process, alternating in every repeat (the order rotating), so the load of a shared machine falls on both:

* ``reference``: the path as it was, example by example: row groups read with ``to_pylist`` (a Python
  object per token), the window's shuffle rebuilt for every micro-batch, ``trainer.data.ReferenceCollator``
  (``build_example`` + ``mask_example`` per passage, a tensor per passage);
* ``vectorised``: ``trainer.data.TrainBatches`` + ``Collator``: three of the eight mention fields read,
  rows kept as flat arrays (``Passages``), a batch collated with numpy;
* ``vectorised_workers``: the same made by ``--workers`` processes (``trainer.data.WorkerBatches``,
  ``data.num_workers``), taken in turn by this process.

Each is also timed beside a busy main thread (``*_beside_busy_thread``): made in the trainer's ``Prefetcher``
thread (the workers: in their processes) and taken by another thread while the main thread runs Python without
pause, the worst case of sharing the GIL with a training loop. Every run makes one micro-batch before the clock
starts (the workers' start-up, seconds, is not counted).
Figures: medians over ``--repeat`` repeats of passages per wall second and per CPU second of this process,
and the medians of the per-repeat ratios vectorised / reference. Before timing, the two variants' batches are
compared tensor by tensor (``identical``). ``gpu_demand_estimate`` is an estimate (issue 24): an H100 at 40%
MFU consumes about 1,000 base-model passages of 160 tokens per second.

Usage: ``flock /work/bench.lock python benchmarks/bench_data.py --corpus OUT [--micro_batch 16]
[--max_seq_len 160] [--repeat 5] [--json benchmarks/results/data.json]``. Needs only torch, pyarrow, numpy and
the trainer package (runs on a bare GPU machine); OUT is a corpus the corpus job wrote.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402

from trainer.data import (  # noqa: E402
    _COLUMNS,
    Collator,
    GlobalSampleOrder,
    Prefetcher,
    ReferenceCollator,
    TokenIds,
    TrainBatches,
    WorkerBatches,
    open_corpus,
)

GPU_DEMAND_ESTIMATE = 1000  # passages/s of an H100 at 40% MFU, base model, max_seq_len 160 (issue 24): an estimate
TARGET = 2 * GPU_DEMAND_ESTIMATE


class ReferenceBatches:
    """The data path as it was, kept here verbatim as the baseline: rows as Python dicts (``to_pylist``), the
    window's (row group, row) pairs rebuilt for every micro-batch, collated example by example."""

    def __init__(self, order: GlobalSampleOrder, collator: ReferenceCollator, micro_batch: int):
        self.order, self.collator, self.micro_batch = order, collator, micro_batch
        self.samples_seen = 0
        self._files: dict[int, pq.ParquetFile] = {}
        self._cache: dict[int, list[dict]] = {}
        self._cache_key = None

    def rows(self, key, needed: list[tuple[int, int]]) -> list[dict]:
        if self._cache_key != key:
            self._cache, self._cache_key = {}, key
        out = []
        for g, r in needed:
            if g not in self._cache:
                s, rg, _ = self.order.row_groups[g]
                if s not in self._files:
                    self._files[s] = pq.ParquetFile(self.order.shards[s])
                self._cache[g] = self._files[s].read_row_group(rg, columns=_COLUMNS).to_pylist()
            out.append(self._cache[g][r])
        return out

    def _samples(self, first: int, count: int) -> tuple[list[dict], list[int]]:
        rows, indices = [], list(range(first, first + count))
        by_window: dict[tuple[int, int], list[int]] = {}
        for k in indices:
            epoch, window, pos = self.order.locate(k)
            by_window.setdefault((epoch, window), []).append(pos)
        for (epoch, window), positions in by_window.items():
            pairs = self.order.window_rows(epoch, window)
            rows += self.rows((epoch, window), [pairs[p] for p in positions])
        return rows, indices

    def __iter__(self):
        return self

    def __next__(self) -> list[dict]:
        rows, indices = self._samples(self.samples_seen, self.micro_batch)
        self.samples_seen += self.micro_batch
        return [self.collator(rows, indices)]


def token_ids(corpus) -> TokenIds:
    """The corpus tokenizer's special ids (trainer.data.load_tokenizer; from tokenizer.json without transformers)."""
    try:
        from trainer.data import load_tokenizer
        return load_tokenizer(corpus.tokenizer_dir)[1]
    except ImportError:  # a machine without transformers: the same ids, [Es] and [Ee] appended to the vocabulary
        spec = json.loads((corpus.tokenizer_dir / "tokenizer.json").read_text())
        added = {t["content"]: t["id"] for t in spec["added_tokens"]}
        size = max(len(spec["model"]["vocab"]), max(added.values(), default=-1) + 1)
        return TokenIds(pad=added["<pad>"], bos=added["<s>"], eos=added["</s>"], mask=added["<mask>"],
                        entity_start=size, entity_end=size + 1, vocab_size=size + 2)


def make(variant: str, order: GlobalSampleOrder, ids: TokenIds, args, n_entities: int):
    collator_args = (ids, args.max_seq_len, 0.3, 0.5, args.seed, n_entities, str(args.corpus))
    if variant == "reference":
        return ReferenceBatches(order, ReferenceCollator(*collator_args), args.micro_batch)
    batches = TrainBatches(order, Collator(*collator_args), args.micro_batch, args.micro_batch, 0, 1)
    return WorkerBatches(batches, args.workers) if variant == "vectorised_workers" else batches


def time_alone(batches, n: int) -> tuple[float, float, int]:
    """(wall s, CPU s of this process, passages) for n micro-batches taken in this thread."""
    next(batches)
    wall, cpu, passages = time.perf_counter(), time.process_time(), 0
    for _ in range(n):
        passages += sum(len(b["passage_ids"]) for b in next(batches))
    return time.perf_counter() - wall, time.process_time() - cpu, passages


def time_beside_busy_thread(batches, n: int) -> tuple[float, float, int]:
    """The same, made in the Prefetcher's thread (or the workers) while this thread runs Python without pause (a
    consumer thread takes the batches): what a training loop whose Python never releases the GIL leaves to them."""
    fetched = batches if isinstance(batches, WorkerBatches) else Prefetcher(batches, depth=2)
    done, count = threading.Event(), [0]
    next(fetched)

    def consume():
        for _ in range(n):
            count[0] += sum(len(b["passage_ids"]) for b in next(fetched))
        done.set()

    wall, cpu = time.perf_counter(), time.process_time()
    consumer = threading.Thread(target=consume)
    consumer.start()
    spin = 0
    while not done.is_set():
        spin += sum(range(2000))  # pure Python: holds the GIL up to the switch interval
    elapsed = time.perf_counter() - wall, time.process_time() - cpu
    consumer.join()
    if fetched is not batches:
        fetched.close()  # the thread joined before the interpreter exits, never torn down mid-call
    return *elapsed, count[0]


def identical(order, ids, args, n_entities: int, n: int) -> bool:
    ref, vec = make("reference", order, ids, args, n_entities), make("vectorised", order, ids, args, n_entities)
    for _ in range(n):
        a, b = next(ref)[0], next(vec)[0]
        if a.keys() != b.keys():
            return False
        for key in a:
            same = (a[key].dtype == b[key].dtype and torch.equal(a[key], b[key])) if isinstance(a[key], torch.Tensor) \
                else a[key] == b[key]
            if not same:
                print(f"batches differ in {key!r}", file=sys.stderr)
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a corpus folder written by the corpus job")
    parser.add_argument("--micro_batch", type=int, default=16, help="passages per micro-batch (train.micro_batch_size)")
    parser.add_argument("--max_seq_len", type=int, default=160, help="data.max_seq_len")
    parser.add_argument("--window", type=int, default=8, help="data.shuffle_window_row_groups")
    parser.add_argument("--batches", type=int, default=150, help="micro-batches per variant per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="repeats (medians are reported)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--workers", type=int, default=1, help="processes of the vectorised_workers variant")
    parser.add_argument("--json", type=Path, help="write the figures here (e.g. benchmarks/results/data.json)")
    args = parser.parse_args()

    corpus = open_corpus(args.corpus, verify_sha256=False)  # the contract is checked; the hashes are not the point
    ids = token_ids(corpus)
    order = GlobalSampleOrder(corpus.train_shards, args.seed, args.window)
    n_entities = corpus.n_entities
    checked = args.batches
    same = identical(order, ids, args, n_entities, checked)
    print(f"batches identical over {checked} micro-batches: {same}")

    variants = ("reference", "vectorised", "vectorised_workers")
    modes = {"": time_alone, "_beside_busy_thread": time_beside_busy_thread}
    runs: dict[str, list[dict]] = {v + m: [] for m in modes for v in variants}
    load_before = os.getloadavg()
    for r in range(args.repeat):
        for mode, timer in modes.items():
            for variant in variants[r % 3:] + variants[:r % 3]:
                batches = make(variant, order, ids, args, n_entities)
                try:
                    wall, cpu, passages = timer(batches, args.batches)
                finally:
                    if hasattr(batches, "close"):
                        batches.close()
                runs[variant + mode].append({"wall_s": wall, "cpu_s": cpu, "passages": passages,
                                             "passages_per_s": passages / wall, "passages_per_cpu_s": passages / cpu})
        print(f"repeat {r + 1}/{args.repeat}: " + ", ".join(f"{k} {v[-1]['passages_per_s']:.0f}/s"
                                                            for k, v in runs.items()), flush=True)

    def median(name: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[name])

    def ratio(variant: str, mode: str, key: str) -> float:
        return statistics.median(v[key] / b[key] for v, b in zip(runs[variant + mode], runs["reference" + mode]))

    summary = {name: {"passages_per_s": median(name, "passages_per_s"),
                      "passages_per_cpu_s": median(name, "passages_per_cpu_s")} for name in runs}
    ratios = {f"{variant}, {'alone' if not mode else mode.lstrip('_')}": {
        "wall": ratio(variant, mode, "passages_per_s"), "cpu": ratio(variant, mode, "passages_per_cpu_s")}
        for mode in modes for variant in variants[1:]}
    md = [pq.ParquetFile(p).metadata for p in corpus.train_shards]
    headline = {f"{name}_passages_per_s": round(s["passages_per_s"]) for name, s in summary.items()}
    headline.update({f"{name}_passages_per_cpu_s": round(s["passages_per_cpu_s"]) for name, s in summary.items()})
    results = {
        "what": __doc__.splitlines()[0],
        "input": corpus.manifest.get("config", {}).get("input", ""),  # the dump the corpus was made from
        **headline,
        "vectorised_over_reference_wall": ratios["vectorised, alone"]["wall"],
        "vectorised_over_reference_cpu": ratios["vectorised, alone"]["cpu"],
        "machine": {"node": platform.node(), "platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
                    "load_average_before": load_before, "load_average_after": os.getloadavg(),
                    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                    "python": platform.python_version(), "numpy": np.__version__, "pyarrow": pa.__version__,
                    "torch": torch.__version__},
        "corpus": {"path": str(args.corpus), "train_passages": order.epoch_size, "row_groups": len(order.row_groups),
                   "rows_per_row_group_max": max(m.row_group(g).num_rows for m in md for g in range(m.num_row_groups))},
        "settings": {"workers": args.workers, "micro_batch": args.micro_batch, "max_seq_len": args.max_seq_len, "window_row_groups": args.window,
                     "batches_per_repeat": args.batches, "repeat": args.repeat, "seed": args.seed},
        "notes": ["passages_per_cpu_s counts the CPU of this process only: for vectorised_workers, what making the "
                  "batches costs the training process (taking them from the workers), not the workers' own CPU",
                  "beside_busy_thread: the main thread spins in Python (holds the GIL) for the whole run; on a "
                  "machine with fewer free cores than threads and processes, it also takes CPU from the workers"],
        "identical": same, "identical_checked_micro_batches": checked,
        "median": summary,
        "ratio_over_reference": ratios,
        "gpu_demand_estimate_passages_per_s": GPU_DEMAND_ESTIMATE,
        "target_passages_per_s": TARGET,
        "meets_target": {name: s["passages_per_s"] >= TARGET for name, s in summary.items()},
        "runs": runs,
    }
    print(f"\n{'variant':36s} {'passages/s':>11s} {'passages/CPU-s':>15s}   (medians of {args.repeat}; "
          f"{os.cpu_count()} CPUs, {platform.node()})")
    for name, s in summary.items():
        print(f"{name:36s} {s['passages_per_s']:11.0f} {s['passages_per_cpu_s']:15.0f}")
    for name, r in ratios.items():
        print(f"{name} / reference: x{r['wall']:.2f} wall, x{r['cpu']:.2f} CPU")
    print(f"target {TARGET}/s per rank (2x the estimated {GPU_DEMAND_ESTIMATE}/s an H100 consumes at 40% MFU)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")
    if not same:
        raise SystemExit("the vectorised batches differ from the reference's")


if __name__ == "__main__":
    main()
