#!/usr/bin/env bash
# The trainer's GPU figures in one call, on a bare GPU machine, in at most 6 minutes.
#
#   bash benchmarks/gpu_check.sh [--wheels DIR] [--corpus DIR] [--out FILE] [--parts LIST] [--cpu-smoke]
#
# From a fresh checkout the one call a GPU session makes (device tool; docs/pretraining.md, "Speed on a GPU"):
#   here, once:   mkdir -p .gpu-wheels && cp ../shared/gpu-wheels/*.whl .gpu-wheels/   (.gpu-wheels is ignored)
#   run:          command "bash benchmarks/gpu_check.sh --wheels .gpu-wheels", carry [".gpu-wheels"], timeout_s 420
# then copy $OUT/gpu_check.json to benchmarks/results/gpu_check.json.
#
# The machine needs torch (CUDA), transformers, pyarrow, triton and pytest. DeepSpeed and its missing
# requirements come as wheels (--wheels DIR, or $GPU_WHEELS; ../shared/gpu-wheels/README.md), installed into
# a temporary site folder beside the image's torch. No corpus is needed: part corpus writes synthetic ones in
# the trainer's format (benchmarks/synth_corpus.py; such machines have no Apache Beam); --corpus DIR uses a
# finished corpus instead. Parts, in this order, each under its own time limit (seconds); one that fails or
# runs out of time is recorded and the next one runs:
#
#   install  10   the wheels into a site folder (skipped when deepspeed imports)
#   corpus   15   synthetic corpora: 5,000 entities for tests and data; 1M entities when train is asked for
#   memread 140   benchmarks/bench_memory_read.py: one read, fwd+bwd, M=768 x N=1M x D=256: the Triton kernels
#                 (a tile sweep), FlexAttention over a chunked table, the float32 blocked path; errors against
#                 float64; the decision between the kernels and FlexAttention (gpu_check_report.py)
#   bench    80   benchmarks/bench_trainer.py at base geometry, batch 128 x 160, 1M entities, bf16, compiled:
#                 EDMem/BART step ratio, MFU of both, EDMem's step peak memory; the LM loss dense vs chunked
#   tests    85   pytest -m gpu -v over the test files that hold gpu tests (kernels, FlexAttention, a bf16 +
#                 compiled overfit run on the 5,000-entity corpus)
#   data     25   benchmarks/bench_data.py on the 5,000-entity corpus: passages/s of the data path
#   train   150   NOT by default (--parts ...,train): trainer/pretrain.py on base.yaml and the 1M corpus through
#                 the deepspeed launcher, TRAIN_STEPS (default 6) steps of one micro-batch each
#
# --parts picks parts (default install,corpus,memread,bench,tests,data). GPU_CHECK_T_<PART> sets a part's
# limit, e.g. GPU_CHECK_T_TESTS=200.
#
# Output: after EVERY part the one JSON is re-assembled (benchmarks/gpu_check_report.py) into --out (default
# benchmarks/results/gpu_check.json) and $OUT/gpu_check.json, and the part's whole log is appended to
# $OUT/gpu_check.log (when $OUT is set; else both beside the work folder's logs): a part that times out loses
# only itself. --cpu-smoke runs every part at a tiny size on CPU (DeepSpeed already installed;
# tests/test_gpu_check.py), to check the script itself.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-}
CORPUS=${GPU_CORPUS:-}
REPORT=benchmarks/results/gpu_check.json
PARTS_WANTED=install,corpus,memread,bench,tests,data
SMOKE=0
TRAIN_STEPS=${TRAIN_STEPS:-6}

while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=$2; shift 2 ;;
    --corpus) CORPUS=$2; shift 2 ;;
    --out) REPORT=$2; shift 2 ;;
    --parts) PARTS_WANTED=$2; shift 2 ;;
    --cpu-smoke|--dry-run) SMOKE=1; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$REPORT" in /*) ;; *) REPORT="$ROOT/$REPORT" ;; esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
mkdir -p "$WORK/status"
RESULTS=${OUT:-$WORK/out}  # what comes back from a device call: the JSON and the whole logs
mkdir -p "$RESULTS"
LOG_ALL="$RESULTS/gpu_check.log"
: >"$LOG_ALL"
echo "gpu_check: work folder $WORK, results in $RESULTS"

if [ "$SMOKE" = 1 ]; then
  T_INSTALL=60 T_CORPUS=120 T_MEMREAD=300 T_BENCH=400 T_TESTS=300 T_DATA=200 T_TRAIN=400
else
  T_INSTALL=10 T_CORPUS=15 T_MEMREAD=140 T_BENCH=80 T_TESTS=85 T_DATA=25 T_TRAIN=150
fi
for part in INSTALL CORPUS MEMREAD BENCH TESTS DATA TRAIN; do
  var="GPU_CHECK_T_$part"
  if [ -n "${!var:-}" ]; then printf -v "T_$part" '%s' "${!var}"; fi
done

wanted() { case ",$PARTS_WANTED," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

report() {  # the one JSON, from whatever the parts have left so far
  local copy=()
  if [ -n "${OUT:-}" ]; then copy=(--copy "$OUT/gpu_check.json"); else copy=(--copy "$RESULTS/gpu_check.json"); fi
  "$PY" benchmarks/gpu_check_report.py --work "$WORK" --out "$REPORT" --device "$DEVICE" "${copy[@]}" \
    >>"$WORK/report.log" 2>&1 \
    || echo "gpu_check: the report failed (see $WORK/report.log)" >&2
}

status_json() {  # status_json NAME STATUS [WHY]
  "$PY" -c 'import json,sys; json.dump({"status": sys.argv[2], "why": sys.argv[3]}, open(sys.argv[1], "w"))' \
    "$WORK/status/$1.json" "$2" "${3:-}"
}

# run_part NAME SECONDS CMD...: the command under `timeout` (its own process group: the launcher's ranks and
# pytest's subprocesses are stopped with it), its whole log in WORK/NAME.log and appended to LOG_ALL, its
# status in WORK/status/NAME.json; then the JSON is re-assembled.
run_part() {
  local name=$1 limit=$2; shift 2
  local log="$WORK/$name.log" start rc status
  if ! wanted "$name"; then
    status_json "$name" skipped "not in --parts"
    return 0
  fi
  echo "gpu_check: $name (limit ${limit}s)"
  start=$(date +%s)
  timeout --kill-after=2 "$limit" "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status=timeout ;;
    *) status=failed ;;
  esac
  local seconds=$(( $(date +%s) - start ))
  "$PY" - "$WORK/status/$name.json" "$status" "$rc" "$seconds" "$limit" "$log" "$*" <<'EOF'
import json, sys
path, status, rc, seconds, limit, log, cmd = sys.argv[1:]
tail = open(log, errors="replace").read()[-3000:]
json.dump({"status": status, "rc": int(rc), "seconds": int(seconds), "limit_s": int(limit), "command": cmd,
           "log_tail": tail}, open(path, "w"), indent=1)
EOF
  { echo "==== $name: $status (rc $rc, ${seconds}s of ${limit}s): $*"; cat "$log"; echo; } >>"$LOG_ALL"
  echo "gpu_check: $name $status (rc $rc, ${seconds}s)"
  report
}

skip_part() {  # skip_part NAME WHY
  status_json "$1" skipped "$2"
  echo "gpu_check: $1 skipped: $2"
  echo "==== $1: skipped: $2" >>"$LOG_ALL"
}

# the device's name once (the report, run after every part, then need not import torch)
DEVICE=$("$PY" -c 'import json, os, sys, torch, platform
device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "node": platform.node(), "smoke": sys.argv[2] == "1", "parts": sys.argv[3], "device": device},
          open(sys.argv[1], "w"))
print(device)' "$WORK/meta.json" "$SMOKE" "$PARTS_WANTED")
echo "gpu_check: device $DEVICE"

# ---- install: DeepSpeed beside the image's torch -------------------------------------------------------------
SITE="$WORK/site"
if "$PY" -c 'import deepspeed' >/dev/null 2>&1; then
  skip_part install "deepspeed already importable"
elif [ -n "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  mkdir -p "$SITE"
  run_part install "$T_INSTALL" bash -c '"$0" -m pip install -q --no-index --no-deps --no-compile --target "$1" "${@:2}"' \
    "$PY" "$SITE" "$WHEELS"/*.whl
else
  skip_part install "no wheels (--wheels DIR) and no deepspeed: the parts that train will fail"
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "$SMOKE" = 0 ]; then
  export DS_ACCELERATOR=cuda
fi

# ---- corpus: made here, unless one is given ------------------------------------------------------------------
SMALL="$WORK/corpus" LARGE="$WORK/corpus1m"
if [ -n "$CORPUS" ]; then
  SMALL=$(cd "$CORPUS" 2>/dev/null && pwd || echo "$CORPUS") LARGE=$SMALL
  skip_part corpus "given: $CORPUS"
else
  if [ "$SMOKE" = 1 ]; then SIZES=(--entities 500 --passages 200) LARGE_N=5000; else SIZES=() LARGE_N=1048579; fi
  CORPUS_CMD=("$PY" benchmarks/synth_corpus.py --out "$SMALL" "${SIZES[@]}")
  if wanted train; then
    run_part corpus "$T_CORPUS" bash -c '"${@:2}" && "$1" benchmarks/synth_corpus.py --out "$0" --entities '"$LARGE_N" \
      "$LARGE" "$PY" "${CORPUS_CMD[@]}"
  else
    run_part corpus "$T_CORPUS" "${CORPUS_CMD[@]}"
  fi
fi
have_corpus() { [ -f "$1/manifest.json" ]; }

# ---- memread: kernels vs FlexAttention vs blocked --------------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
  MEMREAD_ARGS=(--mentions 24 --entities 300 --dim 32 --repeat 1 --chunks 128)
  MEMREAD_ENV=(env TRITON_INTERPRET=1)  # the sweep's code under Triton's interpreter
else
  MEMREAD_ARGS=(--mentions 768 --entities 1048576 --dim 256 --repeat 5 --budget_s $(( T_MEMREAD - 40 )))
  MEMREAD_ENV=()
fi
run_part memread "$T_MEMREAD" "${MEMREAD_ENV[@]}" "$PY" benchmarks/bench_memory_read.py "${MEMREAD_ARGS[@]}" \
  --json "$WORK/memory_read.json"

# ---- bench: EDMem vs BART at base geometry, 1M entities -------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
  BENCH_ARGS=(--preset small --entities 5000 --batch 2 --seq_len 32 --mentions 2 --repeats 1 --lm_tokens 512
              --bf16 false --compile false)
else
  BENCH_ARGS=(--preset base --entities 1000000 --batch 128 --seq_len 160 --repeats 3 --bf16 true --compile true)
fi
run_part bench "$T_BENCH" "$PY" benchmarks/bench_trainer.py "${BENCH_ARGS[@]}" --variants bart,edmem \
  --profile_steps 0 --skip el --peak_memory false --json --out "$WORK/trainer.json"

# ---- tests: every gpu-marked test ----------------------------------------------------------------------------
GPU_TESTS=$(grep -rl --include='test_*.py' -E 'pytest\.mark\.gpu|mark\.gpu\b' tests | sort | tr '\n' ' ')
if [ -z "$GPU_TESTS" ]; then
  skip_part tests "no gpu-marked tests"
elif ! have_corpus "$SMALL"; then
  skip_part tests "no corpus (part corpus did not finish)"
else
  export WIKIEDM_TRAINER_CORPUS=$SMALL  # no Beam here: the trainer tests read this corpus
  # shellcheck disable=SC2086
  run_part tests "$T_TESTS" "$PY" -m pytest -m gpu -v -p no:cacheprovider \
    --junitxml="$WORK/pytest.xml" $GPU_TESTS
fi

# ---- data: the data path's throughput --------------------------------------------------------------------------
if ! have_corpus "$SMALL"; then
  skip_part data "no corpus (part corpus did not finish)"
else
  if [ "$SMOKE" = 1 ]; then DATA_ARGS=(--batches 3 --repeat 1 --micro_batch 4); else DATA_ARGS=(--batches 4 --repeat 1 --micro_batch 128); fi
  run_part data "$T_DATA" "$PY" benchmarks/bench_data.py --corpus "$SMALL" "${DATA_ARGS[@]}" --json "$WORK/data.json"
fi

# ---- train: base.yaml through the launcher (only when asked for) ---------------------------------------------
if ! wanted train; then
  status_json train skipped "not in --parts"
elif ! have_corpus "$LARGE"; then
  skip_part train "no corpus (part corpus did not finish)"
else
  if [ "$SMOKE" = 1 ]; then
    TRAIN_ARGS=(--config configs/pretrain/tiny.yaml --train.micro_batch_size 8 --train.global_batch_size 8
                --data.max_seq_len 64 --model.max_positions 64)
    TRAIN_STEPS=2
  else  # one micro-batch per step (no accumulation): the step time is the micro-batch's
    TRAIN_ARGS=(--config configs/pretrain/base.yaml --train.micro_batch_size 128 --train.global_batch_size 128)
  fi
  # a free port: another run on the machine may hold the launcher's default
  PORT=${MASTER_PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
  # stop_after_steps (not max_steps): base.yaml's schedule, and no checkpoint at the end
  run_part train "$T_TRAIN" "$PY" -m deepspeed.launcher.runner --num_gpus 1 --master_port "$PORT" \
    trainer/pretrain.py "${TRAIN_ARGS[@]}" --data "$LARGE" --output_dir "$WORK/run" \
    --train.stop_after_steps "$TRAIN_STEPS" --train.log_every 1 --train.eval_every 0 --train.save_every 0 \
    --train.plot false --train.resume none
  mkdir -p "$WORK/run" && cp "$WORK/train.log" "$WORK/run/stdout.log" 2>/dev/null
  report
fi

"$PY" benchmarks/gpu_check_report.py --work "$WORK" --out "$REPORT" --device "$DEVICE" --copy "$RESULTS/gpu_check.json"
echo "gpu_check: wrote $REPORT and $RESULTS/gpu_check.json; whole logs in $LOG_ALL"
