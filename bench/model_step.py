"""Forward+backward speed of bert_tf.model.modeling alone (no optimizer, no Horovod):
seconds per step, sequences/s and model FLOPs utilisation (MFU) against a
matmul peak measured in the same run, for BERT-base and a small config at
fp32 and bf16:

    .venv/bin/python bench/model_step.py [--shapes base,small] [--precisions fp32,bf16]
        [--batch_size 8] [--threads 2] [--xla]

The rows are timed in interleaved rounds (bench/rounds.py): median and min-max per row, and
a VERDICT on bf16 / fp32 per shape. Step = pretraining_loss (MLM at 20 masked positions + NSP) and its gradients
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
import rounds  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def step_function(shape, precision, args):
    """The row's timed call (traced and warmed up) and its fixed fields."""
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

    def step():
        forward_backward(features)[0].numpy()
    for _ in range(args.warmup):
        step()
    flops = common.train_flops_per_sequence(shape, args.seq_length, args.masked_positions)
    return step, {"shape": shape, "precision": precision, "batch_size": args.batch_size,
                  "seq_length": args.seq_length, "masked_positions": args.masked_positions,
                  "xla": args.xla, "train_flops_per_sequence": flops}


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
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
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
    peaks = {"start": {p: common.measure_matmul_peak(DTYPES[p]) for p in precisions}}
    rows, fields = {}, {}
    for shape in shapes:
        for precision in precisions:
            step, fields[f"{shape} {precision}"] = step_function(shape, precision, args)
            rows[f"{shape} {precision}"] = lambda _, step=step: common.time_step(
                step, warmup=0, repeats=args.repeats)
    results = rounds.run_rounds(rows, args.rounds)
    peaks["end"] = {p: common.measure_matmul_peak(DTYPES[p]) for p in precisions}
    best_peak = {p: max(peaks["start"][p], peaks["end"][p]) for p in precisions}
    records = []
    for label, row_rounds in results.items():
        record = {**fields[label], "rounds": row_rounds,
                  "summary": rounds.row_summary(row_rounds, args.batch_size)}
        speed = record["summary"]["sequences_per_s"]
        record["mfu"] = common.mfu(record["train_flops_per_sequence"], speed["median"],
                                   best_peak[record["precision"]])
        records.append(record)

    headers = ["shape", "precision", "batch", "ms/step median (min-max)", "seq/s", "GFLOP/s",
               "MFU"]
    table = []
    for r in records:
        step, speed = r["summary"]["step_s"], r["summary"]["sequences_per_s"]
        table.append([r["shape"], r["precision"], r["batch_size"],
                      f"{step['median'] * 1e3:.0f} ({step['min'] * 1e3:.0f}-{step['max'] * 1e3:.0f})",
                      speed["median"], r["train_flops_per_sequence"] * speed["median"] / 1e9,
                      f"{r['mfu']:.1%}"])
    verdicts = [rounds.verdict_line(f"{shape} bf16 / fp32", rounds.compare(
        results[f"{shape} bf16"], results[f"{shape} fp32"]))
        for shape in shapes if {"bf16", "fp32"} <= set(precisions)]
    markdown = "\n".join([
        f"# Model forward+backward ({'XLA' if args.xla else 'no XLA'}, {args.threads} threads, "
        f"seq {args.seq_length}, {args.masked_positions} masked positions, {args.rounds} "
        "interleaved rounds)",
        "",
        *(rounds.peaks_line(when, {DTYPES[p]: v for p, v in peak.items()})
          for when, peak in peaks.items()),
        f"Machine: {machine['cpu']}, load average at start {machine['load_average']}",
        "",
        common.markdown_table(headers, table),
        "",
        *verdicts,
    ])
    print("\n" + markdown)
    machine["load_average_end"] = common.machine_info()["load_average"]
    paths = common.write_results("model_step", {"machine": machine, "peaks_flops": peaks,
                                                "args": vars(args), "records": records}, markdown)
    print("wrote " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
