"""benchmarks/gpu_check.sh's one JSON: every part's status and the headline figures, from the files the parts left.

    python benchmarks/gpu_check_report.py --work WORK --out benchmarks/results/gpu_check.json [--copy $OUT/...]

WORK holds, per part NAME, ``status/NAME.json`` (written by the script: status ok / failed / timeout /
skipped, exit code, seconds, the log's tail) and what the part wrote:

    corpus    corpus/, corpus1m/         benchmarks/synth_corpus.py (nothing to report but its status)
    memread   memory_read.json           benchmarks/bench_memory_read.py, kept whole, and the decision below
    bench     trainer.json               benchmarks/bench_trainer.py: EDMem/BART step ratio, MFU of both
    tests     pytest.xml, tests.log      pytest -m gpu: passed / failed / skipped (from the log's -v lines
                                         when a timeout left no XML)
    train     run/metrics.jsonl          trainer/pretrain.py on base.yaml: MFU, tokens/s, peak memory
    data      data.json                  benchmarks/bench_data.py: passages/s of the data path

The headline ``mfu`` and ``peak_memory_gb`` are the trainer's (part train) when it ran, else the benchmark's
EDMem at base geometry with 1M entities (part bench); ``mfu_source`` says which. A part that failed or is
missing leaves its figures null; the others are still reported.

The memory-read decision (``memory_read_decision``): among the variants within the tolerances, the Triton
kernels stay the CUDA path only if their best tile is at least KEEP_KERNELS_SPEEDUP (1.25x) faster than the
best FlexAttention, forward + backward at M=768, N=1M, D=256; otherwise FlexAttention becomes it
(trainer.entity_softmax.CUDA_DEFAULT follows this by hand, and only when ``complete``: both were measured).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

PARTS = ("install", "corpus", "memread", "bench", "tests", "train", "data")
KEEP_KERNELS_SPEEDUP = 1.25  # the kernels must beat FlexAttention by this much to stay the CUDA path


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def part_status(work: Path, name: str) -> dict:
    return _load_json(work / "status" / f"{name}.json") or {"status": "not run"}


def train_figures(run_dir: Path) -> dict:
    """Medians over the logged train rows after the first (which holds start-up and compilation)."""
    path = run_dir / "metrics.jsonl"
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by the part's timeout
            if row.get("split") == "train":
                rows.append(row)
    steady = rows[1:] or rows

    def median(key):
        values = [r[key] for r in steady if r.get(key) is not None]
        return statistics.median(values) if values else None

    config = {}
    log = run_dir / "stdout.log"
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if "[pretrain] EDMem:" in line or "micro_batch_size auto:" in line or "torch.compile:" in line:
                config.setdefault("log", []).append(line.strip())
    peaks = [r["peak_memory_gb"] for r in rows if r.get("peak_memory_gb") is not None]
    return {"logged_steps": [r["step"] for r in rows], "mfu": median("mfu"), "tokens_per_s": median("tokens_per_s"),
            "step_time_s": median("step_time_s"), "peak_memory_gb": max(peaks) if peaks else None,
            "loss_first": rows[0]["loss"] if rows else None, "loss_last": rows[-1]["loss"] if rows else None, **config}


def bench_figures(result: dict | None) -> dict:
    if not result or "model" not in result:
        return {}
    model = result["model"]
    out = {"bench_device": result.get("device"), "bench_batch": model.get("batch"),
           "bench_entities": model.get("entities"), "weights": result.get("weights"), "compile": result.get("compile")}
    for name in ("bart", "edmem", "edmem_rows"):
        if name in model:
            out[f"{name}_step_s"] = model[name].get("step_s")
            out[f"{name}_mfu"] = model[name].get("mfu")
            out[f"{name}_peak_memory_gb"] = (model[name]["peak_bytes"] / 2**30
                                             if model[name].get("peak_bytes") is not None else None)
            step_peak = model[name].get("step_peak_above_resident_bytes")  # activations and transients of a step
            out[f"{name}_step_peak_above_resident_gb"] = step_peak / 2**30 if step_peak is not None else None
            whole = model[name].get("step_peak_bytes")  # the device's peak during its step, both models resident
            out[f"{name}_step_peak_gb"] = whole / 2**30 if whole is not None else None
    out["edmem_over_bart"] = model.get("edmem", {}).get("step_time_ratio")
    if "lm_loss" in result:
        out["lm_loss_peak_memory_dense_over_chunked"] = result["lm_loss"]["peak_memory_ratio_dense_over_chunked"]
    return out


_RESULT_LINE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.M)


def pytest_counts_from_log(log: Path) -> dict:
    """Counts from pytest -v's per-test lines: what a run stopped by its time limit had finished."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return {}
    results = dict(_RESULT_LINE.findall(text))
    if not results:
        return {}
    count = lambda *names: sum(1 for r in results.values() if r in names)  # noqa: E731
    return {"tests": len(results), "failures": count("FAILED"), "errors": count("ERROR"),
            "skipped": count("SKIPPED", "XFAIL"), "passed": count("PASSED", "XPASS"),
            "failed_tests": sorted(t for t, r in results.items() if r in ("FAILED", "ERROR")), "from_log": True}


def pytest_counts(xml_path: Path, log: Path | None = None) -> dict:
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return pytest_counts_from_log(log) if log else {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed_tests"] = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
                              if case.find("failure") is not None or case.find("error") is not None]
    return counts


def data_figures(result: dict | None) -> dict:
    if not result:
        return {}
    median = result.get("median", {})
    best = median.get("vectorised") or next(iter(median.values()), {})
    return {"passages_per_s": best.get("passages_per_s"), "data_settings": result.get("settings")}


def _best(variants: dict, prefix: str) -> tuple[str, dict] | None:
    ok = [(name, v) for name, v in variants.items()
          if name.startswith(prefix) and v.get("status") == "ok" and v.get("within_tolerance")]
    return min(ok, key=lambda item: item[1]["ms"], default=None)


def memory_read_decision(result: dict | None) -> dict:
    """The CUDA path of the memory read from benchmarks/bench_memory_read.py's JSON (module docstring)."""
    variants = (result or {}).get("variants", {})
    triton, flex = _best(variants, "triton"), _best(variants, "flex_chunk")
    blocked = variants.get("blocked_fp32", {})
    out = {"rule": f"triton if its best tile is >= {KEEP_KERNELS_SPEEDUP}x faster than flex (both within the "
                   "tolerances), else flex",
           "best_triton": triton[0] if triton else None, "triton_ms": triton[1]["ms"] if triton else None,
           "best_flex": flex[0] if flex else None, "flex_ms": flex[1]["ms"] if flex else None,
           "blocked_fp32_ms": blocked.get("ms"), "kernels_speedup_over_flex": None,
           # FlexAttention's own forward + backward alone: a lower bound for a leaner flex path, not a candidate
           "flex_attention_only_ms": variants.get("flex_attention_only", {}).get("ms")}
    out["complete"] = bool(triton and flex)  # only then may CUDA_DEFAULT change
    if triton and flex:
        out["kernels_speedup_over_flex"] = flex[1]["ms"] / triton[1]["ms"]
        out["cuda_path"] = "triton" if out["kernels_speedup_over_flex"] >= KEEP_KERNELS_SPEEDUP else "flex"
        out["why"] = f"kernels {out['kernels_speedup_over_flex']:.2f}x FlexAttention's speed"
    elif triton or flex:
        out["cuda_path"] = "triton" if triton else "flex"
        out["why"] = (f"only {out['cuda_path']} ran within the tolerances: not a comparison (rerun --parts memread "
                      "with a longer GPU_CHECK_T_MEMREAD before changing CUDA_DEFAULT)")
    else:
        out["cuda_path"] = None
        out["why"] = "undecided: neither the kernels nor FlexAttention ran within the tolerances"
    return out


def assemble(work: Path, device: str) -> dict:
    train = train_figures(work / "run")
    bench = bench_figures(_load_json(work / "trainer.json"))
    data = data_figures(_load_json(work / "data.json"))
    memory_read = _load_json(work / "memory_read.json")
    from_train = train["mfu"] is not None
    report = {
        "device": device,
        # base.yaml through trainer/pretrain.py as its metrics.jsonl counts it, else bench_trainer's EDMem
        "mfu": train["mfu"] if from_train else bench.get("edmem_mfu"),
        "mfu_source": "train" if from_train else ("bench" if bench.get("edmem_mfu") is not None else None),
        "bart_mfu": bench.get("bart_mfu"),
        "tokens_per_s": train["tokens_per_s"],
        "peak_memory_gb": train["peak_memory_gb"] if from_train else bench.get("edmem_step_peak_gb"),
        "edmem_over_bart": bench.get("edmem_over_bart"),
        "passages_per_s": data.get("passages_per_s"),
        "memory_read_decision": memory_read_decision(memory_read),
        "parts": {name: part_status(work, name) for name in PARTS},
        "train": train,
        "bench": bench,
        "tests": pytest_counts(work / "pytest.xml", work / "tests.log"),
        "data": data,
        "memory_read": memory_read,
    }
    meta = _load_json(work / "meta.json")
    if meta:
        report["meta"] = meta
    return report


def _device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    import os
    return f"CPU ({os.cpu_count()} cores)"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="the folder the parts wrote into")
    ap.add_argument("--out", type=Path, required=True, help="the JSON to write")
    ap.add_argument("--copy", type=Path, action="append", default=[], help="also write it here")
    ap.add_argument("--device", default=None, help="the device's name (default: torch's)")
    a = ap.parse_args(argv)
    report = assemble(a.work, a.device or _device_name())
    text = json.dumps(report, indent=2) + "\n"
    for path in [a.out, *a.copy]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    headline = {k: report[k] for k in ("device", "mfu", "mfu_source", "bart_mfu", "tokens_per_s", "peak_memory_gb",
                                       "edmem_over_bart", "passages_per_s")}
    print(json.dumps(headline))
    print("memory read:", json.dumps(report["memory_read_decision"]))
    print(" ".join(f"{name}={p.get('status')}" for name, p in report["parts"].items()))


if __name__ == "__main__":
    main()
