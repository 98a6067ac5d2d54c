"""benchmarks/step_timing.py: the one timing of a call that bench_entity_softmax and bench_memory_read share."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import step_timing  # noqa: E402

CPU = torch.device("cpu")


def test_time_ms_is_the_wall_clock_of_one_call_on_cpu():
    calls = []
    ms = step_timing.time_ms(lambda: (calls.append(1), time.sleep(0.05)), CPU)
    assert calls == [1]
    assert 50 <= ms < 5000  # a loaded machine may add, never take away


def test_times_ms_times_each_call_separately():
    sleeps = iter([0.0, 0.06, 0.0])
    times = step_timing.times_ms(lambda: time.sleep(next(sleeps)), 3, CPU)
    assert len(times) == 3 and times[1] >= 60 and times[1] > times[0] and times[1] > times[2]
    step_timing.sync(CPU)  # nothing to wait for, and no CUDA call made


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA events need a GPU")
def test_time_ms_times_the_queued_gpu_work_on_cuda():
    cuda = torch.device("cuda")
    a = torch.randn(4096, 4096, device=cuda)
    step_timing.sync(cuda)
    one = step_timing.time_ms(lambda: a @ a, cuda)
    four = step_timing.time_ms(lambda: [a @ a for _ in range(4)], cuda)
    assert 0 < one < four  # the kernels' time, read after they finished, not the launch's


def test_both_benchmarks_time_with_it(tmp_path):
    import bench_entity_softmax
    import bench_memory_read

    assert bench_entity_softmax.time_ms is step_timing.time_ms and bench_memory_read.times_ms is step_timing.times_ms
    out = tmp_path / "memory_read.json"
    bench_memory_read.main(["--mentions", "8", "--entities", "300", "--dim", "32", "--block", "128", "--repeat", "3",
                            "--budget_s", "5", "--chunks", "128", "--json", str(out)])
    blocked = json.loads(out.read_text())["variants"]["blocked_fp32"]
    assert blocked["status"] == "ok" and len(blocked["times_ms"]) == 3 and all(t > 0 for t in blocked["times_ms"])
