#!/usr/bin/env bash
# The trainer's GPU figures in one call, on a bare GPU machine, in at most ~8 minutes.
#
#   bash benchmarks/gpu_check.sh [--wheels DIR] [--corpus DIR] [--out FILE] [--parts LIST] [--cpu-smoke]
#
# The machine needs torch (CUDA), transformers, pyarrow, tiktoken, triton and pytest. DeepSpeed and its
# missing requirements come as wheels (--wheels, default gpu/wheels or $GPU_WHEELS; see the shared
# gpu-wheels README) installed into a temporary site folder beside the image's torch. The corpus
# (--corpus, default gpu/corpus or $GPU_CORPUS) is a finished corpus job output, e.g. `make demo`'s out/demo:
# such machines have no Apache Beam. Parts, each under its own time limit; one that fails or runs out
# of time is recorded and the next one runs:
#
#   train    trainer/pretrain.py on configs/pretrain/base.yaml through the deepspeed launcher, TRAIN_STEPS
#            steps (default 12) logged every 2: MFU, tokens/s, peak memory (medians after the first row)
#   bench    benchmarks/bench_trainer.py at base geometry, batch 128 x 160, 1M entities, bf16, compiled:
#            EDMem/BART step ratio and the MFU of both; the LM loss dense vs chunked
#   tests    pytest -m gpu over the test files that hold gpu tests (incl. a bf16 + compiled overfit run)
#   kernels  benchmarks/bench_entity_softmax.py, when it exists
#   data     benchmarks/bench_data.py on the corpus, when it exists: passages/s of the data path
#
# Each part's time limit can be raised with GPU_CHECK_T_<PART> (seconds), e.g. GPU_CHECK_T_TRAIN=300.
#
# Output: ONE JSON, --out (default benchmarks/results/gpu_check.json), and a copy as $OUT/gpu_check.json
# when $OUT is set (benchmarks/gpu_check_report.py assembles it). --cpu-smoke runs every part at a tiny
# size on CPU (DeepSpeed already installed; tests/test_gpu_check.py), to check the script itself.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-gpu/wheels}
CORPUS=${GPU_CORPUS:-gpu/corpus}
REPORT=benchmarks/results/gpu_check.json
PARTS_WANTED=train,bench,tests,kernels,data
SMOKE=0
TRAIN_STEPS=${TRAIN_STEPS:-12}

while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=$2; shift 2 ;;
    --corpus) CORPUS=$2; shift 2 ;;
    --out) REPORT=$2; shift 2 ;;
    --parts) PARTS_WANTED=$2; shift 2 ;;
    --cpu-smoke|--dry-run) SMOKE=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
mkdir -p "$WORK/status"
echo "gpu_check: work folder $WORK"

# Per-part limits in seconds (the sum stays under 8 minutes with the install).
if [ "$SMOKE" = 1 ]; then
  T_INSTALL=60 T_TRAIN=400 T_BENCH=400 T_TESTS=300 T_KERNELS=200 T_DATA=200
else
  # the kernels' first call compiles Triton code (~1 min); the data part starts a worker process
  T_INSTALL=30 T_TRAIN=150 T_BENCH=100 T_TESTS=110 T_KERNELS=60 T_DATA=30
fi
# any of them can be set from the environment, e.g. GPU_CHECK_T_TRAIN=300 for a longer base.yaml run
for part in INSTALL TRAIN BENCH TESTS KERNELS DATA; do
  var="GPU_CHECK_T_$part"
  if [ -n "${!var:-}" ]; then printf -v "T_$part" '%s' "${!var}"; fi
done

wanted() { case ",$PARTS_WANTED," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# run_part NAME SECONDS CMD...: the command under `timeout` (which signals its whole process group, the
# launcher's ranks too), its log in WORK/NAME.log, its status in WORK/status/NAME.json.
run_part() {
  local name=$1 limit=$2; shift 2
  local log="$WORK/$name.log" start rc status
  if ! wanted "$name"; then
    "$PY" -c 'import json,sys; json.dump({"status": "skipped", "why": "not in --parts"}, open(sys.argv[1], "w"))' \
      "$WORK/status/$name.json"
    return 0
  fi
  echo "gpu_check: $name (limit ${limit}s)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status=timeout ;;
    *) status=failed ;;
  esac
  "$PY" - "$WORK/status/$name.json" "$status" "$rc" "$(( $(date +%s) - start ))" "$log" "$*" <<'EOF'
import json, sys
path, status, rc, seconds, log, cmd = sys.argv[1:]
tail = open(log, errors="replace").read()[-3000:]
json.dump({"status": status, "rc": int(rc), "seconds": int(seconds), "command": cmd, "log_tail": tail},
          open(path, "w"), indent=1)
EOF
  echo "gpu_check: $name $status (rc $rc, $(( $(date +%s) - start ))s)"
}

skip_part() {  # skip_part NAME WHY
  "$PY" -c 'import json,sys; json.dump({"status": "skipped", "why": sys.argv[2]}, open(sys.argv[1], "w"))' \
    "$WORK/status/$1.json" "$2"
  echo "gpu_check: $1 skipped: $2"
}

# ---- DeepSpeed beside the image's torch --------------------------------------------------------------------
SITE="$WORK/site"
if "$PY" -c 'import deepspeed' >/dev/null 2>&1; then
  skip_part install "deepspeed already importable"
elif ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  mkdir -p "$SITE"
  run_part install "$T_INSTALL" bash -c '"$0" -m pip install -q --no-index --no-deps --target "$1" "${@:2}"' \
    "$PY" "$SITE" "$WHEELS"/*.whl
else
  skip_part install "no wheels in $WHEELS and no deepspeed"
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ "$SMOKE" = 0 ]; then
  export DS_ACCELERATOR=cuda
fi
"$PY" -c 'import json, sys, torch, platform
json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "node": platform.node(), "smoke": sys.argv[2] == "1"}, open(sys.argv[1], "w"))' "$WORK/meta.json" "$SMOKE"

CORPUS_ABS=$(cd "$CORPUS" 2>/dev/null && pwd || echo "$CORPUS")
if [ ! -f "$CORPUS/manifest.json" ]; then
  echo "gpu_check: no corpus at $CORPUS (manifest.json missing): the train and data parts are skipped" >&2
fi

# ---- train: base.yaml through the launcher ----------------------------------------------------------------
if [ -f "$CORPUS/manifest.json" ]; then
  if [ "$SMOKE" = 1 ]; then
    TRAIN_ARGS=(--config configs/pretrain/tiny.yaml --train.micro_batch_size auto --train.global_batch_size 16
                --data.max_seq_len 64 --model.max_positions 64)
    TRAIN_STEPS=2
  else
    TRAIN_ARGS=(--config configs/pretrain/base.yaml)
  fi
  # stop_after_steps (not max_steps): base.yaml's schedule, and no checkpoint at the end
  run_part train "$T_TRAIN" "$PY" -m deepspeed.launcher.runner --num_gpus 1 --master_port "${MASTER_PORT:-29533}" \
    trainer/pretrain.py "${TRAIN_ARGS[@]}" --data "$CORPUS" --output_dir "$WORK/run" \
    --train.stop_after_steps "$TRAIN_STEPS" --train.log_every 2 --train.eval_every 0 --train.save_every 0 \
    --train.plot false --train.resume none
  mkdir -p "$WORK/run" && cp "$WORK/train.log" "$WORK/run/stdout.log" 2>/dev/null
else
  skip_part train "no corpus at $CORPUS"
fi

# ---- bench: EDMem vs BART, MFU -----------------------------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
  BENCH_ARGS=(--preset small --entities 5000 --batch 2 --seq_len 32 --mentions 2 --repeats 1 --lm_tokens 512
              --bf16 false --compile false)
else
  BENCH_ARGS=(--preset base --entities 1000000 --batch 128 --seq_len 160 --repeats 3 --bf16 true --compile true)
fi
run_part bench "$T_BENCH" "$PY" benchmarks/bench_trainer.py "${BENCH_ARGS[@]}" --variants bart,edmem \
  --profile_steps 0 --skip el --peak_memory false --json --out "$WORK/trainer.json"

# ---- tests: every gpu-marked test ------------------------------------------------------------------------
GPU_TESTS=$(grep -rl --include='test_*.py' -E 'pytest\.mark\.gpu|mark\.gpu\b' tests | sort | tr '\n' ' ')
if [ -n "$GPU_TESTS" ]; then
  export WIKIEDM_TRAINER_CORPUS=$CORPUS_ABS  # no Beam here: the trainer tests read this corpus
  # shellcheck disable=SC2086
  run_part tests "$T_TESTS" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
    --junitxml="$WORK/pytest.xml" $GPU_TESTS
else
  skip_part tests "no gpu-marked tests"
fi

# ---- kernels: the entity-memory kernels' own benchmark ------------------------------------------------------
if [ -f benchmarks/bench_entity_softmax.py ]; then
  run_part kernels "$T_KERNELS" "$PY" benchmarks/bench_entity_softmax.py --json "$WORK/entity_softmax_gpu.json"
else
  skip_part kernels "benchmarks/bench_entity_softmax.py not in this checkout"
fi

# ---- data: the data path's throughput ------------------------------------------------------------------------
if [ -f benchmarks/bench_data.py ] && [ -f "$CORPUS/manifest.json" ]; then
  if [ "$SMOKE" = 1 ]; then
    DATA_ARGS=(--batches 3 --repeat 1 --micro_batch 4)
  else
    DATA_ARGS=(--batches 40 --repeat 3 --micro_batch 128)
  fi
  run_part data "$T_DATA" "$PY" benchmarks/bench_data.py --corpus "$CORPUS" "${DATA_ARGS[@]}" --json "$WORK/data.json"
else
  skip_part data "benchmarks/bench_data.py or the corpus missing"
fi

# ---- one JSON ------------------------------------------------------------------------------------------------
COPY=()
if [ -n "${OUT:-}" ]; then COPY=(--copy "$OUT/gpu_check.json"); fi
"$PY" benchmarks/gpu_check_report.py --work "$WORK" --out "$REPORT" "${COPY[@]}"
echo "gpu_check: wrote $REPORT${OUT:+ and $OUT/gpu_check.json}; logs in $WORK"
