"""The model's elementwise pieces against TensorFlow's own, forward and backward, at BERT-base's
shapes (batch 4, seq 128): GELU on [512, 3072], dropout on the [4, 12, 128, 128] attention
probabilities and the masked-LM loss on [4, 20, 30522] float32 logits. Rows are timed in
interleaved rounds (bench/rounds.py): milliseconds per forward+backward, median (min-max), and
a VERDICT per piece.

    .venv/bin/python bench/model_pieces.py [--dtypes bfloat16,float32] [--rounds 5]

The figures behind modeling._float32_gelu, modeling.stateless_dropout and
modeling.cross_entropy_and_predictions (bench/README.md, "The work that is not a matmul").
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import rounds  # noqa: E402

SHAPES = {"gelu": [512, 3072], "dropout": [4, 12, 128, 128], "cross": [4, 20, 30522]}


def pieces(tf, modeling):
    """{piece: (TensorFlow's way, ours)}, each a function of x in the compute dtype."""
    seed = tf.constant([1, 2], tf.int64)
    labels = tf.random.stateless_uniform(SHAPES["cross"][:-1], [0, 3], 0, SHAPES["cross"][-1],
                                         tf.int32)
    return {
        "gelu erf": (lambda x: tf.nn.gelu(x, approximate=False), modeling.ACTIVATIONS["gelu"]),
        "gelu tanh": (lambda x: tf.nn.gelu(x, approximate=True),
                      modeling.ACTIVATIONS["gelu_new"]),
        "dropout": (lambda x: tf.nn.experimental.stateless_dropout(x, 0.1, seed),
                    lambda x: modeling.stateless_dropout(x, 0.1, seed)),
        "cross entropy": (
            lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels, x),
            lambda x: modeling.cross_entropy_and_predictions(labels, x)[0]),
    }


def forward_backward(tf, function, x, upstream):
    """The timed call: function(x) and its gradient for `upstream`, in one tf.function."""
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = function(x)
        return tape.gradient(y, x, output_gradients=upstream)

    def call():
        step().numpy()
    call()  # trace
    return call


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    common.configure_tf_threads(args.threads)
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # a tf.function per row is intended, not retracing

    from bert_tf.model import modeling

    rows = {}
    for dtype in args.dtypes.split(","):
        for piece, (theirs, ours) in pieces(tf, modeling).items():
            if piece == "cross entropy" and dtype != "float32":
                continue  # the model's logits are float32 in every precision
            shape = SHAPES[piece.split()[0]]
            x = tf.cast(tf.random.stateless_normal(shape, [0, 1]), dtype)
            upstream = tf.random.stateless_normal(shape, [0, 2])
            upstream = upstream[..., 0] if piece == "cross entropy" else tf.cast(upstream, dtype)
            for who, function in (("tf", theirs), ("bert_tf", ours)):
                call = forward_backward(tf, function, x, upstream)
                rows[(piece, dtype, who)] = lambda _, call=call: common.time_step(
                    call, warmup=1, repeats=args.repeats)
    results = rounds.run_rounds(rows, args.rounds, log=lambda line: None)
    table = []
    for (piece, dtype, who), records in results.items():
        summary = rounds.row_summary(records, 1)["step_s"]
        table.append([piece, dtype, who, f"{summary['median'] * 1e3:.2f} "
                      f"({summary['min'] * 1e3:.2f}-{summary['max'] * 1e3:.2f})"])
    print(common.markdown_table(["piece", "dtype", "implementation", "ms median (min-max)"],
                                table))
    print(rounds.steady_line(results.values()))
    for piece, dtype, who in results:
        if who == "bert_tf":
            print(rounds.verdict_line(f"{piece} {dtype}: bert_tf / tf", rounds.compare(
                results[(piece, dtype, who)], results[(piece, dtype, "tf")])))


if __name__ == "__main__":
    main()
