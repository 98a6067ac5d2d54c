"""benchmarks/gpu_check.sh: its syntax and its one JSON (benchmarks/gpu_check_report.py) from what the parts
leave, including a part that timed out mid-line and parts that never ran. The whole script at CPU size is
`bash benchmarks/gpu_check.sh --cpu-smoke --corpus OUT` (minutes: not part of the suite)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_check_report import assemble, main  # noqa: E402


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
    assert report["parts"]["train"]["status"] == "timeout" and report["parts"]["kernels"] == {"status": "not run"}
    assert report["entity_softmax"] is None


def test_report_of_nothing_keeps_every_key(tmp_path, capsys):
    out, copy = tmp_path / "results" / "gpu_check.json", tmp_path / "OUT" / "gpu_check.json"
    main(["--work", str(tmp_path), "--out", str(out), "--copy", str(copy), "--device", "CPU"])
    report = json.loads(out.read_text())
    assert copy.read_text() == out.read_text()
    for key in ("device", "mfu", "tokens_per_s", "edmem_over_bart", "peak_memory_gb", "passages_per_s"):
        assert key in report
    assert report["mfu"] is None and set(report["parts"]) == {"install", "train", "bench", "tests", "kernels", "data"}
    assert '"mfu": null' in capsys.readouterr().out


def test_the_gpu_overfit_run_needs_no_matplotlib():
    """tests/trainer/test_gpu.py's bf16 run must not end in plot_losses, which imports matplotlib (the GPU
    machine may lack it): its extra arguments turn the plot off, and the run is made with them."""
    import inspect

    from tests.trainer import test_gpu
    from trainer.config import load_config

    assert load_config(str(REPO / "configs/pretrain/tiny.yaml"), list(test_gpu.GPU_RUN_ARGS)).train.plot is False
    assert "*GPU_RUN_ARGS" in inspect.getsource(test_gpu.test_bf16_compiled_trainer_links_entities)
