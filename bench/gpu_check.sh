#!/usr/bin/env bash
# GPU check (under 10 minutes), on one NVIDIA GPU without internet:
# 1. BERT-large and BERT-base phase 1 (seq 128, 20 masked positions) training updates through
#    bert_tf's own update step at fp16 + XLA, fp32 + XLA and fp32 without XLA: sequences/s per
#    GPU next to NVIDIA's published TF2 figures for the GPU class where there are some
#    (DeepLearningExamples TensorFlow2/LanguageModeling/BERT/README.md, "Pre-training training
#    performance", 1 GPU, BERT-large only: A100-80GB 485.59 mixed precision at batch 312 and
#    282.98 TF32 at 176; V100-32GB 206.5 at 60 and 49.97 FP32 at 32), and MFU against the GPU
#    matmul peak measured here and the nominal dense tensor-core peak of known GPUs;
# 2. a short fp16 run that must track an fp32 run's loss (bench/fp16_tracks_fp32.py: BERT-base,
#    4 micro-batches per update, the same weights and data); the check fails if it does not.
# Runs left when the 9-minute budget is spent are reported as not run (and fail the check).
#
#   bash bench/gpu_check.sh                      # GPU: the runs above
#   BATCH=256 FP32_BATCH=128 bash bench/gpu_check.sh
#   bash bench/gpu_check.sh --cpu                # no GPU: tiny config on CPU (bf16 where the
#                                                # CPU has it, else fp32), proves the script
#
# Without internet it installs what does not import from carried wheels (BERT_TF_WHEELS,
# default ./wheels), in one of two set-ups, both on x86_64 Linux:
# - NVIDIA's NGC TensorFlow image (the Dockerfile's base, Python 3.12): its TensorFlow and its
#   NCCL Horovod stay; bert_tf and its pure-Python dependencies go into its Python, the
#   Dockerfile's way (no tensorflow*, tensorflow-text or horovod pins).
# - A CUDA 12 machine with python3 (3.12 checked: `pip install --dry-run --python-version 3.12
#   --only-binary=:all: -r <(bash bench/gpu_check.sh --requirements=cuda)` resolves every pin
#   to a wheel): a venv .venv-gpu gets tensorflow[and-cuda] at
#   install/requirements.txt's TensorFlow version and those requirements WITHOUT tensorflow-cpu
#   (tensorflow-cpu and tensorflow unpack into the same site-packages/tensorflow: the last one
#   installed wins, and the CPU build sees no GPU), then Horovod built from its source against
#   that TensorFlow (Gloo, no MPI: the check runs one process; needs g++ and patch).
# Stage on a machine with internet and the SAME Python version (python3 --version there), then
# copy the folder over:
#   bash bench/gpu_check.sh --requirements=cuda > gpu-requirements.txt   # or =ngc on NGC
#   python3.12 -m pip download -d wheels -r gpu-requirements.txt cmake
#   python3.12 -m pip download -d wheels --no-deps --no-binary :all: horovod==0.28.1  # cuda only
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${BERT_TF_WHEELS:-$REPO/wheels}"
HOROVOD_VERSION=0.28.1

# The pins a set-up installs (see the header): cuda swaps tensorflow-cpu for
# tensorflow[and-cuda] at the same version; ngc keeps the image's TensorFlow and Horovod.
requirements() {
  local pins="$REPO/install/requirements.txt"
  case "$1" in
    cuda) sed -n 's/^tensorflow-cpu==/tensorflow[and-cuda]==/p' "$pins"
          grep -vE '^tensorflow-cpu[=<>]' "$pins" ;;
    ngc) grep -vE '^(tensorflow|tensorflow-cpu|tensorflow-text|horovod)[=<>]' "$pins" ;;
    *) echo "gpu_check: --requirements takes cuda or ngc, not '$1'" >&2; return 2 ;;
  esac
}

MODE=gpu
case "${1:-}" in
  "") ;;
  --cpu) MODE=cpu ;;
  --requirements=*) requirements "${1#--requirements=}"; exit ;;
  *) echo "gpu_check: unknown argument '$1' (--cpu or --requirements=cuda|ngc; set BATCH," \
       "FP32_BATCH, STEPS in the env)" >&2
     exit 2 ;;
esac

if [[ "$MODE" == gpu ]]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: nvidia-smi finds no GPU; on a CPU machine run 'bash $0 --cpu'" >&2
    exit 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # "shape precision xla batch"; fp32 takes NVIDIA's smaller A100 batch (312 does not fit).
  BATCH="${BATCH:-312}" FP32_BATCH="${FP32_BATCH:-176}"
  RUNS=("large fp16 xla $BATCH" "large fp32 xla $FP32_BATCH" "large fp32 noxla $FP32_BATCH"
        "base fp16 xla $BATCH" "base fp32 xla $FP32_BATCH" "base fp32 noxla $FP32_BATCH")
  WARMUP=2 REPEATS=3 STEPS="${STEPS:-3}" PEAK_DTYPES=float16,float32 PEAK_SIZE=8192
  SEQ_LENGTH=128 MASKED_POSITIONS=20
  RUN_TIMEOUT=100  # each
  TRACK=(--shape base --batch_size 32 --accumulation 4 --updates 30 --xla)
  BUDGET=540  # seconds after which no run starts: the script ends within 10 minutes
else
  # The smallest run that goes through the same code: BERT-tiny, 2 sequences of 64 tokens, in
  # bf16 where the CPU multiplies bf16 natively (avx512_bf16, amx_bf16); elsewhere bf16 is
  # emulated, so fp32 (the path of the GPU's fp32 + XLA row).
  CPU_PRECISION=fp32 PEAK_DTYPES=float32
  if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then
    CPU_PRECISION=bf16 PEAK_DTYPES=float32,bfloat16
  fi
  RUNS=("tiny $CPU_PRECISION xla ${BATCH:-2}")
  WARMUP=1 REPEATS=1 STEPS="${STEPS:-1}" PEAK_SIZE=256
  SEQ_LENGTH=64 MASKED_POSITIONS=10
  RUN_TIMEOUT=900  # a busy shared CPU can take minutes just to start TensorFlow
  TRACK=(--shape tiny --batch_size 2 --accumulation 2 --updates 2 --seq_length 64
         --masked_positions 10)
  BUDGET=3000
fi

# Horovod from its staged source, patched as install/horovod_wheel.sh does, against the TensorFlow
# installed in $PYTHON: Gloo only (one process here; no MPI headers needed).
build_horovod() {
  local src
  src="$(mktemp -d)"
  tar -xzf "$WHEELS/horovod-$HOROVOD_VERSION.tar.gz" -C "$src"
  patch -d "$src/horovod-$HOROVOD_VERSION" -p1 -s < "$REPO/install/horovod-$HOROVOD_VERSION-tf2.21.patch"
  command -v cmake >/dev/null || "${PIP[@]}" cmake
  echo "gpu_check: building Horovod $HOROVOD_VERSION against this TensorFlow (a few minutes)"
  ( cd "$src/horovod-$HOROVOD_VERSION"
    export PATH="$(dirname "$PYTHON"):$PATH" HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 \
      HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      MAKEFLAGS="-j$(nproc)"
    "${PIP[@]}" --no-build-isolation --no-deps . > "$src/build.log" 2>&1 ) \
    || { tail -30 "$src/build.log" >&2; echo "gpu_check: Horovod build failed" >&2; exit 1; }
  rm -rf "$src"
}

# The Python: $PYTHON; else for --cpu the project's .venv; else python3 where TensorFlow and
# Horovod already import (NGC), or the .venv-gpu venv (created from python3 if missing).
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" && "$MODE" == cpu && -x "$REPO/.venv/bin/python" ]]; then
  PYTHON="$REPO/.venv/bin/python"
elif [[ -z "$PYTHON" ]] && python3 -c "import tensorflow, horovod.tensorflow" 2>/dev/null; then
  PYTHON=python3
elif [[ -z "$PYTHON" ]]; then
  PYTHON="$REPO/.venv-gpu/bin/python"
fi
if ! "$PYTHON" -c "import tensorflow, horovod.tensorflow, bert_tf" 2>/dev/null; then
  [[ -d "$WHEELS" ]] || {
    echo "gpu_check: TensorFlow/Horovod/bert_tf do not import in $PYTHON and $WHEELS is" \
      "missing; stage wheels as the header of $0 says" >&2
    exit 1
  }
  if [[ "$PYTHON" == "$REPO/.venv-gpu/bin/python" && ! -x "$PYTHON" ]]; then
    python3 -m venv "$REPO/.venv-gpu"
  fi
  PIP=("$PYTHON" -m pip install -q --no-index --find-links "$WHEELS")
  SETUP=cuda
  "$PYTHON" -c "import tensorflow, horovod.tensorflow" 2>/dev/null && SETUP=ngc
  if [[ "$SETUP" == cuda ]] && "$PYTHON" -m pip show -q tensorflow-cpu 2>/dev/null; then
    echo "gpu_check: tensorflow-cpu is installed in $PYTHON's environment and would shadow" \
      "tensorflow[and-cuda]: use another Python (PYTHON=...) or pip uninstall tensorflow-cpu" \
      "tensorflow first" >&2
    exit 1
  fi
  echo "gpu_check: installing from $WHEELS into $PYTHON's environment ($SETUP set-up)"
  "${PIP[@]}" -r <(requirements "$SETUP")
  "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null || build_horovod
  "${PIP[@]}" --no-deps --no-build-isolation -e "$REPO"
fi
SECONDS=0  # the run budget starts after the installation
if [[ "$MODE" == gpu ]] && ! "$PYTHON" -c \
    "import sys, tensorflow as tf; sys.exit(not tf.config.list_physical_devices('GPU'))"; then
  echo "gpu_check: TensorFlow in $PYTHON sees no GPU (CPU-only build? need tensorflow[and-cuda])" >&2
  exit 1
fi

LOG="$(mktemp -d)"
trap 'rm -rf "$LOG"' EXIT
export TF_CPP_MIN_LOG_LEVEL=2
COMPARE=("$PYTHON" "$REPO/bench/compare_train.py")
THREADS="$(nproc)"
"${COMPARE[@]}" --child peaks --threads "$THREADS" --peak_dtypes "$PEAK_DTYPES" \
  --peak_size "$PEAK_SIZE" --steps_per_repeat 10 > "$LOG/peaks"
remaining() { echo $((BUDGET - SECONDS)); }
for run in "${RUNS[@]}"; do
  read -r shape precision xla batch <<< "$run"
  name="$shape-$precision-$xla"
  if (( $(remaining) < 30 )); then
    echo "gpu_check: $name not run: the ${BUDGET}s budget is spent" >&2
    continue
  fi
  echo "gpu_check: BERT-$shape seq $SEQ_LENGTH, batch $batch, $precision, $xla ..."
  xla_flag=()
  [[ "$xla" == xla ]] && xla_flag=(--xla)
  limit=$(( RUN_TIMEOUT < $(remaining) ? RUN_TIMEOUT : $(remaining) ))
  # A failed run (say OOM) is reported and the next one still runs.
  timeout "$limit" "${COMPARE[@]}" --child ours --shape "$shape" --batch_size "$batch" \
    --precision "$precision" "${xla_flag[@]}" --optimizer lamb --threads "$THREADS" \
    --seq_length "$SEQ_LENGTH" --masked_positions "$MASKED_POSITIONS" \
    --warmup "$WARMUP" --repeats "$REPEATS" --steps_per_repeat "$STEPS" \
    > "$LOG/$name" 2> "$LOG/$name.err" \
    || { echo "gpu_check: $name failed (exit $?):" >&2; tail -15 "$LOG/$name.err" >&2; }
done
TRACKED=0
if (( $(remaining) >= 60 )); then
  echo "gpu_check: fp16 against fp32: ${TRACK[*]} ..."
  if timeout "$(remaining)" "$PYTHON" "$REPO/bench/fp16_tracks_fp32.py" "${TRACK[@]}" \
      > "$LOG/track" 2> "$LOG/track.err"; then
    TRACKED=1
  else
    echo "gpu_check: fp16_tracks_fp32 failed (exit $?):" >&2
    tail -15 "$LOG/track.err" >&2
  fi
  grep -E "^(update|fp16 tracks)" "$LOG/track" || true
else
  echo "gpu_check: fp16_tracks_fp32 not run: the ${BUDGET}s budget is spent" >&2
fi

"$PYTHON" - "$LOG" "$TRACKED" "${RUNS[@]}" <<'EOF'
import json
import subprocess
import sys
from pathlib import Path

log, tracked, runs = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
MARK = "BENCH_JSON "
# Dense tensor-core peaks (FLOP/s, fp16 = bf16) from the vendor data sheets.
NOMINAL = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "L4": 121e12, "A10": 125e12}
# NVIDIA's TF2 BERT-large phase 1 on 1 GPU: (sequences/s, batch), README cited above.
PUBLISHED = {"A100": {"fp16": (485.59, 312), "fp32": (282.98, 176)},
             "V100": {"fp16": (206.5, 60), "fp32": (49.97, 32)}}


def record(name):
    path = log / name
    lines = [s for s in path.read_text().splitlines() if s.startswith(MARK)] \
        if path.exists() else []
    return json.loads(lines[-1][len(MARK):]) if lines else None


peaks = record("peaks")["peak_flops"]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
except (OSError, IndexError):
    gpu = "no GPU (CPU fallback)"
nominal = next((v for k, v in NOMINAL.items() if k in gpu), None)
published = next((v for k, v in PUBLISHED.items() if k in gpu), None)


def rate(flops_per_s):
    return f"{flops_per_s / 1e12:.1f} TFLOP/s" if flops_per_s > 1e12 else (
        f"{flops_per_s / 1e9:.1f} GFLOP/s")


def reference(shape, precision):
    if shape != "large":
        return f"NVIDIA publishes no TF2 BERT-{shape} pretraining figure"
    if not published:
        return "no NVIDIA TF2 figure for this GPU; A100-80GB: 485.59 fp16, 282.98 TF32"
    figure, batch = published["fp32" if precision == "fp32" else "fp16"]
    return f"NVIDIA {figure} at batch {batch}"


print(f"\n{gpu}: measured matmul peak " + ", ".join(f"{k} {rate(v)}" for k, v in peaks.items()))
missing = []
for run in runs:
    shape, precision, xla, _ = run.split()
    r = record(f"{shape}-{precision}-{xla}")
    if not r or "sequences_per_s" not in r:
        print(f"BERT-{shape} {precision} {xla}: no result "
              f"({(r or {}).get('skipped', 'failed or not run, see above')})")
        missing.append(run)
        continue
    achieved = r["sequences_per_s"] * r["train_flops_per_sequence"]
    dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(precision, "float32")
    line = (f"{precision}{'+XLA' if xla == 'xla' else ''} BERT-{r['shape']} batch "
            f"{r['batch_size']}: {r['sequences_per_s']:.1f} sequences/s per GPU "
            f"({reference(shape, precision)}), {rate(achieved)}, "
            f"MFU {achieved / peaks.get(dtype, peaks[next(iter(peaks))]):.1%} of measured peak")
    if nominal:
        line += f", {achieved / nominal:.1%} of nominal {nominal / 1e12:.0f} TFLOP/s"
    print(line)
print(f"fp16 tracks fp32: {'OK' if tracked else 'FAILED or not run (see above)'}")
sys.exit(1 if missing or not tracked else 0)  # a run without a figure fails the check
EOF
