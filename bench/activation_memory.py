"""What a training step keeps, measured by TensorFlow's own allocator on the CPU, against the
memory model (bert_tf/tools/model_size.py, docs/memory.md).

With TF_CPU_ALLOCATOR_USE_BFC=true the CPU allocator is a BFC allocator that counts its peak
bytes (tf.config.experimental.get_memory_info). One forward+backward pass of BertForPreTraining
(BERT-base widths, no XLA) runs at two layer counts; the difference of their peaks over the
extra layers is what one layer keeps, the term the memory model multiplies by L.

    .venv/bin/python bench/activation_memory.py [--precision fp32] [--batch_size 32]
    PYTHONPATH=/tmp/old .venv/bin/python bench/activation_memory.py   # an earlier checkout
"""

import argparse
import dataclasses
import os
import subprocess
import sys

PASS = """
import sys
import tensorflow as tf
from bert_tf.model import modeling
from bert_tf.model.config import BertConfig
from bert_tf.train.config import PRECISION_MODES

precision, layers, batch, seq, predictions = sys.argv[1], *map(int, sys.argv[2:])
model = modeling.BertForPreTraining(BertConfig(vocab_size=30522, num_hidden_layers=layers),
                                    PRECISION_MODES[precision].compute_dtype)
def ones(shape):
    return tf.ones(shape, tf.int32)

features = dict(input_ids=ones([batch, seq]), input_mask=ones([batch, seq]),
                segment_ids=0 * ones([batch, seq]), masked_lm_positions=ones([batch, predictions]),
                masked_lm_ids=ones([batch, predictions]),
                masked_lm_weights=tf.ones([batch, predictions]),
                next_sentence_labels=0 * ones([batch]))

@tf.function(autograph=False)
def step():
    with tf.GradientTape() as tape:
        outputs = model(features, training=True, dropout_seed=tf.constant([1, 2], tf.int64))
        loss = modeling.pretraining_loss(outputs, features)["mlm_loss_sum"]
    return tape.gradient(loss, model.trainable_variables)

step()  # trace and allocate the variables
tf.config.experimental.reset_memory_stats("CPU:0")
start = tf.config.experimental.get_memory_info("CPU:0")["current"]
step()
print(tf.config.experimental.get_memory_info("CPU:0")["peak"] - start)
"""


def peak_bytes(precision, layers, args) -> int:
    # One inter-op thread: ops run in one order, so the peak is the same from run to run.
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2",
           "TF_NUM_INTEROP_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", PASS, precision, str(layers),
                           str(args.batch_size), str(args.seq_length), str(args.predictions)],
                          env=env, capture_output=True, text=True, check=True)
    return int(proc.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--layers", default="2,6", help="the two layer counts")
    args = parser.parse_args()
    few, many = map(int, args.layers.split(","))
    from bert_tf.tools import model_size

    measured = (peak_bytes(args.precision, many, args)
                - peak_bytes(args.precision, few, args)) / (many - few)
    config = model_size.MODEL_PRESETS["base"]
    one, two = (model_size.activation_bytes_per_sequence(
        dataclasses.replace(config, num_hidden_layers=n), args.seq_length, args.predictions,
        args.precision) for n in (1, 2))
    modelled = (two - one) * args.batch_size
    print(f"{args.precision}, batch {args.batch_size}, seq {args.seq_length}: one layer keeps "
          f"{measured / 2**20:.1f} MiB measured (peak difference over layers {few}->{many}), "
          f"{modelled / 2**20:.1f} MiB in the memory model ({modelled / measured:.2f}x)")


if __name__ == "__main__":
    main()
