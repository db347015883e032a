"""The optimizer update alone (bert_tf.train.optimization: AdamW and LAMB over a model's float32
variables, random gradients), as a TensorFlow graph of per-variable ops and XLA-compiled, the
rows timed in interleaved rounds (bench/rounds.py): seconds and CPU seconds per update.

    .venv/bin/python bench/optimizer_update.py [--shape base] [--rounds 5]

The update is bound by memory traffic (each elementwise pass reads and writes 110M floats for
BERT-base), which is what XLA's fusion saves; this is the figure behind
optimization.FUSED_UPDATE_MIN_PARAMETERS. Prints the table and VERDICT lines.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import rounds  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(common.SHAPES), default="base")
    parser.add_argument("--optimizers", default="adamw,lamb")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    from bert_tf.model import modeling
    from bert_tf.model.config import BertConfig
    from bert_tf.train import optimization

    dims = {k: v for k, v in common.SHAPES[args.shape].items() if k != "name"}
    model = modeling.BertForPreTraining(BertConfig(vocab_size=common.VOCAB_SIZE, **dims))
    params = modeling.variables_by_name(model)
    grads = [tf.random.stateless_normal(p.shape, seed=[i, 0]) * 1e-3
             for i, p in enumerate(params.values())]
    first = next(iter(params.values()))
    rows = {}
    for name in args.optimizers.split(","):
        optimizer = optimization.create_optimizer(name, params, 0.01)
        for label, update in ((f"{name} graph", tf.function(optimizer._update)),
                              (f"{name} XLA", optimizer._compiled_update)):
            def step(update=update):
                update(grads, tf.constant(1e-6), tf.constant(1, tf.int64))
                first.numpy()
            step()  # trace (and compile)
            rows[label] = lambda _, step=step: common.time_step(step, warmup=0,
                                                                 repeats=args.repeats)
    results = rounds.run_rounds(rows, args.rounds)
    table = []
    for label, records in results.items():
        summary = rounds.row_summary(records, 1)
        table.append([label, f"{summary['step_s']['median']:.3f} ({summary['step_s']['min']:.3f}"
                      f"-{summary['step_s']['max']:.3f})", f"{summary['cpu_s']['median']:.3f}",
                      f"{summary['load_average']['median']:.1f}"])
    print(common.markdown_table(["update", "s median (min-max)", "CPU s median", "load"], table))
    for name in args.optimizers.split(","):
        print(rounds.verdict_line(f"{name} XLA / graph", rounds.compare(
            results[f"{name} XLA"], results[f"{name} graph"])))


if __name__ == "__main__":
    main()
