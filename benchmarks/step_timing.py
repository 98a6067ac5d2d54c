"""Timing one call on the device it runs on, shared by bench_entity_softmax.py and bench_memory_read.py.

On a GPU a call is timed with CUDA events recorded around it on the current stream and read after a
synchronize (the GPU time of the work it queued, not of the Python call); on CPU with the wall clock.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    """Wait for the work queued on a CUDA device (nothing to wait for on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one fn() call: CUDA events on a GPU, the wall clock on CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def times_ms(fn: Callable[[], object], repeat: int, device: torch.device) -> list[float]:
    """``repeat`` calls of fn(), each timed by time_ms."""
    return [time_ms(fn, device) for _ in range(repeat)]
