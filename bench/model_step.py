"""Forward+backward speed of bert_tf.model.modeling alone (no optimizer, no Horovod):
seconds per step, sequences/s and model FLOPs utilisation (MFU) against a
matmul peak measured in the same run, for BERT-base and a small config at
fp32 and bf16:

    .venv/bin/python bench/model_step.py [--shapes base,small] [--precisions fp32,bf16]
        [--batch_size 8] [--threads 2] [--xla]

Step = pretraining_loss (MLM at 20 masked positions + NSP) and its gradients
for every variable, dropout on, inside one tf.function. MFU divides the
step's model FLOPs (3 x forward matmul FLOPs, bench/common.py) by the
measured matmul peak of the same dtype. Results go to
bench/results/model_step.{json,md}; the machine may be shared, so the load
average is recorded.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def measure_step(shape, precision, args):
    import tensorflow as tf

    from bert_tf.model.config import BertConfig
    from bert_tf.model.modeling import BertForPreTraining, pretraining_loss

    config = BertConfig(vocab_size=common.VOCAB_SIZE,
                        **{k: v for k, v in common.SHAPES[shape].items() if k != "name"})
    model = BertForPreTraining(config, compute_dtype=DTYPES[precision])
    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions)
    features = {k: tf.constant(v) for k, v in batch.items()}

    @tf.function(jit_compile=args.xla)
    def forward_backward(features):
        with tf.GradientTape() as tape:
            loss = pretraining_loss(model(features, training=True), features)["loss"]
        # Returned, so no part of the backward pass is pruned away.
        return loss, tape.gradient(loss, model.trainable_variables)

    timing = common.time_step(lambda: forward_backward(features)[0].numpy(),
                              warmup=args.warmup, repeats=args.repeats)
    flops = common.train_flops_per_sequence(shape, args.seq_length, args.masked_positions)
    return {"shape": shape, "precision": precision, "batch_size": args.batch_size,
            "seq_length": args.seq_length, "masked_positions": args.masked_positions,
            "xla": args.xla, **timing, "sequences_per_s": args.batch_size / timing["step_s"],
            "train_flops_per_sequence": flops}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="base,small", help="comma list of: base, small, large")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma list of: fp32, bf16, fp16")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--masked_positions", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow intra-op threads")
    parser.add_argument("--xla", action="store_true", help="compile the step with jit_compile")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shapes, precisions = args.shapes.split(","), args.precisions.split(",")
    for shape in shapes:
        if shape not in common.SHAPES:
            common.fail(f"--shapes: unknown shape {shape!r}; choose from {sorted(common.SHAPES)}")
    for precision in precisions:
        if precision not in DTYPES:
            common.fail(f"--precisions: unknown {precision!r}; choose from {sorted(DTYPES)}")

    common.configure_tf_threads(args.threads)
    machine = common.machine_info()
    peaks = {p: common.measure_matmul_peak(DTYPES[p]) for p in precisions}
    for p, peak in peaks.items():
        print(f"matmul peak {p}: {peak / 1e9:.1f} GFLOP/s", flush=True)
    records = []
    for shape in shapes:
        for precision in precisions:
            record = measure_step(shape, precision, args)
            record["mfu"] = common.mfu(record["train_flops_per_sequence"],
                                       record["sequences_per_s"], peaks[precision])
            records.append(record)
            print(f"{shape} {precision}: {record['step_s'] * 1e3:.0f} ms/step, "
                  f"{record['sequences_per_s']:.2f} seq/s, MFU {record['mfu']:.1%}", flush=True)

    headers = ["shape", "precision", "batch", "ms/step (median)", "min-max ms", "seq/s",
               "GFLOP/s", "MFU"]
    rows = [[r["shape"], r["precision"], r["batch_size"], r["step_s"] * 1e3,
             f"{r['step_s_min'] * 1e3:.0f}-{r['step_s_max'] * 1e3:.0f}", r["sequences_per_s"],
             r["train_flops_per_sequence"] * r["sequences_per_s"] / 1e9, f"{r['mfu']:.1%}"]
            for r in records]
    markdown = "\n".join([
        f"# Model forward+backward ({'XLA' if args.xla else 'no XLA'}, {args.threads} threads, "
        f"seq {args.seq_length}, {args.masked_positions} masked positions)",
        "",
        "Matmul peak measured in this run: "
        + ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in peaks.items()),
        f"Machine: {machine['cpu']}, load average at start {machine['load_average']}",
        "",
        common.markdown_table(headers, rows),
    ])
    print("\n" + markdown)
    machine["load_average_end"] = common.machine_info()["load_average"]
    paths = common.write_results("model_step", {"machine": machine, "peaks_flops": peaks,
                                                "args": vars(args), "records": records}, markdown)
    print("wrote " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
