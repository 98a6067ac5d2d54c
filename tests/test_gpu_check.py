"""benchmarks/gpu_check.sh: its syntax, its one JSON (benchmarks/gpu_check_report.py) from what the parts leave
(including a part that timed out mid-line and parts that never ran), the memory-read decision, the synthetic
corpus it trains on, and the script itself at CPU size (--cpu-smoke): every part runs and leaves its JSON and
whole log under $OUT, and a part that runs out of time loses only itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_check_report import assemble, main, memory_read_decision  # noqa: E402


def test_script_parses_and_documents_itself():
    subprocess.run(["bash", "-n", str(REPO / "benchmarks" / "gpu_check.sh")], check=True)
    out = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    assert "--cpu-smoke" in out and "gpu_check.json" in out
    bad = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--nonsense"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def _status(work: Path, name: str, status: str, rc: int = 0) -> None:
    (work / "status").mkdir(exist_ok=True)
    (work / "status" / f"{name}.json").write_text(json.dumps({"status": status, "rc": rc, "seconds": 3}))


def test_report_from_the_parts_outputs(tmp_path):
    work = tmp_path
    (work / "run").mkdir()
    rows = [{"step": 2, "split": "train", "mfu": 0.01, "tokens_per_s": 100.0, "peak_memory_gb": 30.0, "loss": 9.0},
            {"step": 4, "split": "train", "mfu": 0.40, "tokens_per_s": 5000.0, "peak_memory_gb": 31.0, "loss": 8.0},
            {"step": 4, "split": "validation", "loss": 8.5},
            {"step": 6, "split": "train", "mfu": 0.42, "tokens_per_s": 5200.0, "peak_memory_gb": 31.5, "loss": 7.5},
            {"step": 8, "split": "train", "mfu": 0.44, "tokens_per_s": 5400.0, "peak_memory_gb": 31.5, "loss": 7.0}]
    (work / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 10, "spl')
    (work / "run" / "stdout.log").write_text("[pretrain] train.micro_batch_size auto: 128\nnoise\n")
    (work / "trainer.json").write_text(json.dumps({
        "device": "NVIDIA H100 80GB HBM3", "weights": "bf16", "compile": True,
        "model": {"batch": 128, "entities": 1000000, "bart": {"step_s": 1.0, "mfu": 0.5},
                  "edmem": {"step_s": 1.3, "mfu": 0.45, "step_time_ratio": 1.3, "peak_bytes": 2**31,
                                                       "step_peak_above_resident_bytes": 2**30}},
        "lm_loss": {"peak_memory_ratio_dense_over_chunked": 6.0}}))
    (work / "pytest.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="4" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.trainer.test_gpu" name="a"/><testcase classname="t" name="b"><failure/></testcase>'
        '</testsuite></testsuites>')
    (work / "data.json").write_text(json.dumps({"median": {"reference": {"passages_per_s": 900.0},
                                                           "vectorised": {"passages_per_s": 12000.0}}}))
    for name, status in (("install", "ok"), ("train", "timeout"), ("bench", "ok"), ("tests", "failed"),
                         ("data", "ok")):
        _status(work, name, status, rc=124 if status == "timeout" else 0)

    report = assemble(work, "NVIDIA H100 80GB HBM3")
    assert report["device"] == "NVIDIA H100 80GB HBM3"
    assert report["mfu"] == 0.42 and report["tokens_per_s"] == 5200.0  # medians after the first (compiling) row
    assert report["peak_memory_gb"] == 31.5
    assert report["train"]["logged_steps"] == [2, 4, 6, 8]  # the torn line of the timed-out part is skipped
    assert report["train"]["log"] == ["[pretrain] train.micro_batch_size auto: 128"]
    assert report["edmem_over_bart"] == 1.3 and report["bench"]["bart_mfu"] == 0.5
    assert report["bench"]["edmem_peak_memory_gb"] == 2.0 and report["bench"]["bart_peak_memory_gb"] is None
    assert report["bench"]["edmem_step_peak_above_resident_gb"] == 1.0
    assert report["passages_per_s"] == 12000.0
    assert report["tests"]["passed"] == 2 and report["tests"]["failed_tests"] == ["t::b"]
    assert report["parts"]["train"]["status"] == "timeout" and report["parts"]["memread"] == {"status": "not run"}
    assert report["memory_read"] is None and report["memory_read_decision"]["cuda_path"] is None


def test_report_of_nothing_keeps_every_key(tmp_path, capsys):
    out, copy = tmp_path / "results" / "gpu_check.json", tmp_path / "OUT" / "gpu_check.json"
    main(["--work", str(tmp_path), "--out", str(out), "--copy", str(copy), "--device", "CPU"])
    report = json.loads(out.read_text())
    assert copy.read_text() == out.read_text()
    for key in ("device", "mfu", "tokens_per_s", "edmem_over_bart", "peak_memory_gb", "passages_per_s",
                "memory_read_decision", "bart_mfu"):
        assert key in report
    assert report["mfu"] is None and set(report["parts"]) == {"install", "corpus", "memread", "bench", "tests",
                                                              "train", "data"}
    assert '"mfu": null' in capsys.readouterr().out


def test_the_gpu_overfit_run_needs_no_matplotlib():
    """tests/trainer/test_gpu.py's bf16 run must not end in plot_losses, which imports matplotlib (the GPU
    machine may lack it): its extra arguments turn the plot off, and the run is made with them."""
    import inspect

    from tests.trainer import test_gpu
    from trainer.config import load_config

    assert load_config(str(REPO / "configs/pretrain/tiny.yaml"), list(test_gpu.GPU_RUN_ARGS)).train.plot is False
    assert "*GPU_RUN_ARGS" in inspect.getsource(test_gpu.test_bf16_compiled_trainer_links_entities)


def _variant(ms, ok=True, status="ok"):
    return {"status": status, "ms": ms, "within_tolerance": ok}


def test_memory_read_decision_keeps_the_kernels_only_at_1_25x():
    def decide(**variants):
        return memory_read_decision({"variants": variants})

    base = dict(blocked_fp32=_variant(60.0))
    won = decide(**base, triton_tile0=_variant(10.0), triton_tile1=_variant(8.0), flex_chunk8192=_variant(10.0))
    assert won["cuda_path"] == "triton" and won["best_triton"] == "triton_tile1" and won["complete"]
    assert won["kernels_speedup_over_flex"] == 1.25 and won["blocked_fp32_ms"] == 60.0
    lost = decide(**base, triton_tile0=_variant(10.0), flex_chunk8192=_variant(12.0))
    assert lost["cuda_path"] == "flex" and abs(lost["kernels_speedup_over_flex"] - 1.2) < 1e-12
    # a fast variant outside the tolerances, or one that fell back to the blocked path, does not count
    wrong = decide(triton_tile0=_variant(1.0, ok=False), flex_chunk8192=_variant(12.0),
                   triton_tile1=_variant(1.0, status="fell back"))
    assert wrong["cuda_path"] == "flex" and wrong["kernels_speedup_over_flex"] is None
    alone = decide(triton_tile0=_variant(5.0))
    assert alone["cuda_path"] == "triton" and not alone["complete"]
    assert decide(blocked_fp32=_variant(60.0))["cuda_path"] is None


def test_report_falls_back_to_the_bench_mfu_and_the_test_log(tmp_path):
    """Without part train the headline MFU and peak memory are the benchmark's EDMem at base geometry; a tests
    part stopped by its limit (no junit XML) is counted from pytest -v's lines."""
    (tmp_path / "trainer.json").write_text(json.dumps({"model": {
        "bart": {"step_s": 1.0, "mfu": 0.5}, "edmem": {"step_s": 1.3, "mfu": 0.4, "step_time_ratio": 1.3,
                                                      "step_peak_bytes": 3 * 2**30}}}))
    (tmp_path / "tests.log").write_text(
        "tests/trainer/test_entity_kernels.py::test_gpu_kernel_at_a_realistic_shape[True-dtype0] PASSED [ 10%]\n"
        "tests/trainer/test_entity_flex.py::test_gpu_flex_at_a_realistic_shape[True-dtype0] FAILED [ 20%]\n"
        "tests/trainer/test_gpu.py::test_bf16_compiled_trainer_links_entities ")
    report = assemble(tmp_path, "GPU")
    assert report["mfu"] == 0.4 and report["mfu_source"] == "bench" and report["bart_mfu"] == 0.5
    assert report["peak_memory_gb"] == 3.0 and report["edmem_over_bart"] == 1.3
    assert report["tests"]["passed"] == 1 and report["tests"]["from_log"]
    assert report["tests"]["failed_tests"] == ["tests/trainer/test_entity_flex.py::test_gpu_flex_at_a_realistic_shape"
                                               "[True-dtype0]"]


def test_synthetic_corpus_opens_as_a_corpus(tmp_path):
    """benchmarks/synth_corpus.py writes what trainer.data.open_corpus checks (manifest, sha256, schemas, id
    range) and a tokenizer the trainer loads; each entity is written with its own surface tokens."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import synth_corpus
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    import pyarrow.parquet as pq

    from trainer.data import load_tokenizer, open_corpus

    root = synth_corpus.write_corpus(tmp_path / "c", n_entities=50, n_passages=40, vocab=1000)
    corpus = open_corpus(root)
    assert corpus.n_entities == 50 and len(corpus.train_shards) == len(corpus.validation_shards) == 1
    _, ids = load_tokenizer(corpus.tokenizer_dir)
    assert ids.vocab_size == 1000 + 5 + 2 and ids.pad == 1000
    rows = pq.read_table(corpus.train_shards[0]).to_pylist()
    surfaces = {}
    for row in rows:
        assert len(row["token_ids"]) == 120 and max(row["token_ids"]) < 1000
        for m in row["mentions"]:
            assert 3 <= m["entity_id"] < 50
            words = tuple(row["token_ids"][m["token_start"]:m["token_end"]])
            assert surfaces.setdefault(m["entity_id"], words) == words
    assert json.loads((root / "manifest.json").read_text())["synthetic"] is True


def _smoke(tmp_path, parts: str, *args: str, **limits) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path / "OUT"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           **{f"GPU_CHECK_T_{k.upper()}": str(v) for k, v in limits.items()}}
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--cpu-smoke", "--parts", parts,
                           "--out", str(tmp_path / "gpu_check.json"), *args], env=env, capture_output=True, text=True,
                          timeout=7200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    return proc, report, (out / "gpu_check.log").read_text()


def test_a_part_that_times_out_loses_only_itself(tmp_path):
    """memread limited to 1 s: it is recorded as a timeout with its log; the data part after it still runs and
    reports; the JSON under $OUT holds every key. (A corpus given with --corpus: part corpus is skipped.)"""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import synth_corpus
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    corpus = synth_corpus.write_corpus(tmp_path / "corpus", n_entities=200, n_passages=100, vocab=1000)
    proc, report, log = _smoke(tmp_path, "corpus,memread,data", "--corpus", str(corpus), memread=1)
    parts = report["parts"]
    assert parts["corpus"]["status"] == "skipped" and parts["data"]["status"] == "ok", proc.stdout
    assert parts["memread"]["status"] == "timeout" and parts["memread"]["limit_s"] == 1
    assert parts["bench"]["status"] == "skipped" and parts["train"]["status"] == "skipped"
    assert report["passages_per_s"] > 0 and report["memory_read"] is None
    assert "==== memread: timeout" in log and "==== data: ok" in log and "bench_data" in log
    for key in ("device", "mfu", "edmem_over_bart", "passages_per_s", "peak_memory_gb", "memory_read_decision"):
        assert key in report


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GPU_CHECK_SMOKE") != "1", reason="minutes on 2 cores (the bench and train parts "
                    "start several torch processes and the DeepSpeed launcher): GPU_CHECK_SMOKE=1 runs it")
def test_every_part_runs_at_cpu_size(tmp_path):
    """The whole script at CPU size, train included: each part ok (tests: the gpu tests skip here), the JSON
    and the whole logs under $OUT after the run."""
    # generous limits: this checks the script, not the speed of a shared CPU (under a load of 15 on 2 cores the
    # bench part once took over 400 s)
    limits = dict(corpus=600, memread=900, bench=1500, tests=900, data=900, train=1500)
    proc, report, log = _smoke(tmp_path, "install,corpus,memread,bench,tests,data,train", **limits)
    for name, part in report["parts"].items():
        assert part["status"] in (("ok", "skipped") if name == "install" else ("ok",)), (name, part)
    assert report["memory_read"]["variants"]["blocked_fp32"]["status"] == "ok"
    assert report["memory_read"]["variants"]["triton_tile0"]["status"] == "ok"  # under the interpreter
    assert report["memory_read"]["variants"]["flex_chunk128"]["status"] == "failed"  # no CUDA
    assert report["edmem_over_bart"] > 0 and report["tokens_per_s"] > 0
    assert report["mfu"] is None and report["mfu_source"] is None  # no MFU on CPU: no peak rate to divide by
    assert report["train"]["logged_steps"] == [1, 2] and report["passages_per_s"] > 0
    assert all(f"==== {name}:" in log for name in report["parts"])
