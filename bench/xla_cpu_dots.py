"""How fast XLA's CPU backend runs BERT-base's largest matmul ([512, 768] x [768, 3072] and
back, 4 round trips) in each dtype, against TensorFlow's own (oneDNN) kernels, in GFLOP per
CPU second (all threads; meaningful on a busy machine, unlike wall time):

    .venv/bin/python bench/xla_cpu_dots.py
    XLA_FLAGS=--xla_cpu_use_onednn=true .venv/bin/python bench/xla_cpu_dots.py   # a flag's effect

Rows: fp32 and bf16 without XLA; with XLA, fp32, bf16 -> bf16 (tf.matmul, what XLA upcasts to
float32) and bf16 -> fp32 (BatchMatMulV3 with Tout=float32, what bert_tf.model.modeling.matmul
writes for bf16 under XLA on a CPU). Prints one BENCH_JSON record.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ROWS = ("fp32", "bf16", "xla fp32", "xla bf16->bf16", "xla bf16->fp32")


def round_trips(tf, row):
    """The timed function: 4 x (a @ w, then @ w^T) in the row's dtypes."""
    if row.endswith("bf16->fp32"):
        def matmul(a, w, transpose_b=False):
            return tf.cast(tf.raw_ops.BatchMatMulV3(x=a, y=w, Tout=tf.float32,
                                                    adj_y=transpose_b), a.dtype)
    else:
        matmul = tf.matmul

    @tf.function(jit_compile=row.startswith("xla"))
    def run(a, w):
        for _ in range(4):
            a = matmul(matmul(a, w), w, transpose_b=True)
        return a
    return run


def gflop_per_cpu_s(tf, row, repeats):
    dtype = tf.float32 if "fp32" in row.split("->")[0] else tf.bfloat16  # the inputs' dtype
    a = tf.cast(tf.random.normal([512, 768]), dtype)
    w = tf.cast(tf.random.normal([768, 3072]), dtype)
    run = round_trips(tf, row)
    run(a, w).numpy()  # trace and compile
    cpu = time.process_time()
    for _ in range(repeats):
        run(a, w).numpy()
    flops = 8 * 2 * 512 * 768 * 3072
    return flops * repeats / (time.process_time() - cpu) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    result = {row: round(gflop_per_cpu_s(tf, row, args.repeats), 1) for row in ROWS}
    common.print_json({"gflop_per_cpu_s": result, "xla_flags": os.environ.get("XLA_FLAGS", ""),
                       "threads": args.threads, "tensorflow": tf.__version__,
                       "load_average": os.getloadavg()})


if __name__ == "__main__":
    main()
