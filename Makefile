# Two commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv in the repository root with pinned dependencies.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-installed
DEMO_DUMP := data/sample/samplewiki-pages-articles.xml.bz2
DEMO_OUT  := out/demo
DEMO_RUN  := runs/demo

.PHONY: venv demo demo-pipeline demo-train test bench docs clean

venv: $(STAMP)

# torch first and pinned: this machine has its CPU build as a local file, and an
# unpinned torch pulled in by another package would fetch gigabytes of CUDA wheels.
$(STAMP): requirements.txt requirements-airflow.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	# Airflow 3 + the Beam provider for dags/ and tests/test_dag.py (adds packages only, ~45 s)
	$(PY) -m pip install --quiet -r requirements-airflow.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps -e .
	# DeepSpeed's CPU comm op, compiled once here (about a minute) rather than inside a timed run
	$(PY) -m trainer.jit_ops
	touch $(STAMP)

$(DEMO_DUMP): pipelines/sample_dump.py | $(STAMP)
	$(VENV)/bin/wikiedm sample --output $(DEMO_DUMP)

demo: demo-pipeline demo-train

demo-pipeline: $(STAMP) $(DEMO_DUMP)
	$(VENV)/bin/wikiedm corpus --input $(DEMO_DUMP) --output $(DEMO_OUT) \
		--validation_fraction 0.05 --runner Direct
	$(VENV)/bin/wikiedm report --corpus $(DEMO_OUT)

# A short run of the tiny config on 2 CPU ranks (DeepSpeed's CPU accelerator, gloo); one log line per step.
# It trains on the first 64 passages, repeated, so that both losses visibly fall within the demo's minute
# (one pass over the whole sample is too little for entity linking: docs/pretraining.md).
demo-train: $(STAMP)
	rm -rf $(DEMO_RUN)
	OMP_NUM_THREADS=1 $(VENV)/bin/wikiedm pretrain --num_gpus 2 --config configs/pretrain/tiny.yaml \
		--corpus $(DEMO_OUT) --output $(DEMO_RUN) --max_steps 40 --data.overfit_passages 64 --train.log_every 2
	@echo "losses: $(DEMO_RUN)/metrics.jsonl  plot: $(DEMO_RUN)/loss.png  TensorBoard: $(DEMO_RUN)/tensorboard." \
		"The demo overfits 64 passages on purpose, to show the losses falling: validation EL accuracy stays 0" \
		"(learning on held-out pages: docs/ablation.md)"

# The suite on TEST_WORKERS processes (pytest-xdist): tests sharing a corpus job or the training runs stay on one
# worker (work units: tests/conftest.py). `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -n $(TEST_WORKERS)

bench: $(STAMP)
	$(PY) benchmarks/bench_extract.py --json benchmarks/results/extract.json
	$(PY) benchmarks/bench_read.py --json benchmarks/results/read.json
	$(PY) benchmarks/bench_tokenize_label.py --json benchmarks/results/tokenize_label.json
	$(PY) benchmarks/bench_pipeline.py --json benchmarks/results/pipeline.json
	$(PY) benchmarks/bench_graph_build.py --json benchmarks/results/graph_build.json
	$(PY) benchmarks/bench_parallel.py --json benchmarks/results/parallel.json
	$(PY) benchmarks/bench_trainer.py --out benchmarks/results/trainer.json
	$(PY) benchmarks/bench_memory.py --json benchmarks/results/memory.json
	$(PY) benchmarks/bench_linker.py --sizes tiny,base --json benchmarks/results/linker.json
	$(PY) benchmarks/bench_linker_memory.py --json benchmarks/results/linker_memory.json
	$(PY) benchmarks/bench_linker_quality.py --json benchmarks/results/linker_quality.json
	$(PY) benchmarks/bench_labels.py --label latest --json benchmarks/results/labels-latest.json
	$(PY) benchmarks/make_docs.py

# docs/benchmarks.md from benchmarks/results/*.json (make bench ends with it)
docs:
	$(PYTHON) benchmarks/make_docs.py

clean:
	rm -rf out runs data/sample .pytest_cache
