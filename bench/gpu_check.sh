#!/usr/bin/env bash
# GPU check (under 8 minutes): BERT-large phase 1 (seq 128, 20 masked positions)
# training updates through bert_tf's own update step, XLA on, at fp16 and bf16,
# on one NVIDIA GPU without internet. Prints sequences/s, the ratio to NVIDIA's
# published 485.6 sequences/s per A100-80GB (TF2, AMP, batch 312, DeepLearningExamples),
# and MFU against both the GPU matmul peak measured here and the nominal dense
# tensor-core peak of known GPUs.
#
#   bash bench/gpu_check.sh                      # GPU: large, batch 312, fp16 + bf16
#   BATCH=256 PRECISIONS=bf16 bash bench/gpu_check.sh
#   bash bench/gpu_check.sh --cpu                # no GPU: tiny config on CPU, proves the script
#
# Without internet it installs from carried wheels when TensorFlow, Horovod or
# bert_tf do not import. Stage them on a machine with internet and the same
# Python (3.11) and platform (x86_64 manylinux), then copy the folder over:
#   pip download -d wheels "tensorflow[and-cuda]==2.21.0" -r install/requirements.txt
#   cp ~/.cache/bert_tf/wheels/horovod-0.28.1-*/horovod-*.whl wheels/   # from make venv
# and run with BERT_TF_WHEELS=/path/to/wheels (default: ./wheels). The CPU-built
# Horovod wheel is enough: one process, so it never allreduces over NCCL.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="${BERT_TF_WHEELS:-$REPO/wheels}"
NVIDIA_A100_SEQ_PER_S=485.6
MODE=gpu
if [[ "${1:-}" == "--cpu" ]]; then
  MODE=cpu
elif [[ -n "${1:-}" ]]; then
  echo "gpu_check: unknown argument '$1' (only --cpu; set BATCH, PRECISIONS, STEPS in the env)" >&2
  exit 2
fi

if [[ "$MODE" == gpu ]]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: nvidia-smi finds no GPU; on a CPU machine run 'bash $0 --cpu'" >&2
    exit 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  SHAPE=large BATCH="${BATCH:-312}" PRECISIONS="${PRECISIONS:-fp16 bf16}"
  WARMUP=3 REPEATS=5 STEPS="${STEPS:-4}" PEAK_DTYPES=float16,bfloat16 PEAK_SIZE=8192
  RUN_TIMEOUT=200  # per precision: two of them plus set-up stay under 8 minutes
else
  SHAPE=tiny BATCH="${BATCH:-2}" PRECISIONS="${PRECISIONS:-bf16}"
  WARMUP=1 REPEATS=1 STEPS="${STEPS:-1}" PEAK_DTYPES=float32,bfloat16 PEAK_SIZE=256
  RUN_TIMEOUT=900  # a busy shared CPU can take minutes just to start TensorFlow
fi

PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import tensorflow, horovod.tensorflow, bert_tf" 2>/dev/null; then
  [[ -d "$WHEELS" ]] || {
    echo "gpu_check: TensorFlow/Horovod/bert_tf do not import in $PYTHON and $WHEELS is" \
      "missing; stage wheels as the header of $0 says" >&2
    exit 1
  }
  echo "gpu_check: installing from $WHEELS into $PYTHON's environment"
  PIP=("$PYTHON" -m pip install -q --no-index --find-links "$WHEELS")
  "${PIP[@]}" "tensorflow[and-cuda]==2.21.0" -r "$REPO/install/requirements.txt"
  HOROVOD_WHEELS=("$WHEELS"/horovod-*.whl)
  "${PIP[@]}" --no-deps "${HOROVOD_WHEELS[0]}"
  "${PIP[@]}" --no-deps --no-build-isolation -e "$REPO"
fi
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
read -r -a PRECISION_LIST <<< "$PRECISIONS"
for precision in "${PRECISION_LIST[@]}"; do
  echo "gpu_check: BERT-$SHAPE seq 128, batch $BATCH, $precision + XLA ..."
  # A failed precision (say OOM) is reported and the next one still runs.
  timeout "$RUN_TIMEOUT" "${COMPARE[@]}" --child ours --shape "$SHAPE" --batch_size "$BATCH" \
    --precision "$precision" --xla --optimizer lamb --threads "$THREADS" --warmup "$WARMUP" \
    --repeats "$REPEATS" --steps_per_repeat "$STEPS" > "$LOG/$precision" 2> "$LOG/$precision.err" \
    || { echo "gpu_check: $precision failed (exit $?):" >&2; tail -15 "$LOG/$precision.err" >&2; }
done

"$PYTHON" - "$LOG" "$NVIDIA_A100_SEQ_PER_S" "${PRECISION_LIST[@]}" <<'EOF'
import json
import subprocess
import sys
from pathlib import Path

log, reference, precisions = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
MARK = "BENCH_JSON "
# Dense tensor-core peaks (FLOP/s, fp16 = bf16) from the vendor data sheets.
NOMINAL = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "L4": 121e12, "A10": 125e12}


def record(name):
    lines = [s for s in (log / name).read_text().splitlines() if s.startswith(MARK)]
    return json.loads(lines[-1][len(MARK):]) if lines else None


peaks = record("peaks")["peak_flops"]
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
except (OSError, IndexError):
    gpu = "no GPU (CPU fallback)"
nominal = next((v for k, v in NOMINAL.items() if k in gpu), None)


def rate(flops_per_s):
    return f"{flops_per_s / 1e12:.1f} TFLOP/s" if flops_per_s > 1e12 else (
        f"{flops_per_s / 1e9:.1f} GFLOP/s")


print(f"\n{gpu}: measured matmul peak " + ", ".join(f"{k} {rate(v)}" for k, v in peaks.items()))
missing = []
for precision in precisions:
    r = (log / precision).exists() and record(precision)
    if not r or "sequences_per_s" not in r:
        print(f"{precision}: no result ({(r or {}).get('skipped', 'failed, see above')})")
        missing.append(precision)
        continue
    achieved = r["sequences_per_s"] * r["train_flops_per_sequence"]
    dtype = {"fp16": "float16", "bf16": "bfloat16"}.get(precision, "float32")
    line = (f"{precision}+XLA BERT-{r['shape']} batch {r['batch_size']}: "
            f"{r['sequences_per_s']:.1f} sequences/s ({r['sequences_per_s'] / reference:.2f}x "
            f"NVIDIA's {reference} per A100-80GB), {rate(achieved)}, "
            f"MFU {achieved / peaks.get(dtype, peaks[next(iter(peaks))]):.1%} of measured peak")
    if nominal:
        line += f", {achieved / nominal:.1%} of nominal {nominal / 1e12:.0f} TFLOP/s"
    print(line)
sys.exit(1 if missing else 0)  # a precision without a figure fails the check
EOF
