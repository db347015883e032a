"""Sequences/s one CPU core feeds through bert_tf's pretraining input pipeline
(bert_tf.data.input_pipeline.pretraining_dataset: read, shuffle, batch, parse), the figure
behind bert_tf/tools/performance.py's INPUT_SEQUENCES_PER_CPU_S.

    .venv/bin/python bench/input_rate.py                 # seq 128, 20 predictions, 1 core
    .venv/bin/python bench/input_rate.py --max_seq_length=512 --max_predictions_per_seq=80

The records are random token ids in the real TFRecord layout (parse cost does not depend
on the values), written to a temporary directory and removed afterwards.
"""

import argparse
import os
import tempfile
import time

import numpy as np


def write_records(directory, num_files, per_file, seq, predictions, rng):
    import tensorflow as tf

    from bert_tf.data.records import FEATURES, feature_lengths, serialize_examples

    lengths = feature_lengths(seq, predictions)
    paths = []
    for index in range(num_files):
        features = {name: (rng.random((per_file, lengths[name]), dtype=np.float32)
                           if dtype == "float32" else
                           rng.integers(0, 30522, (per_file, lengths[name]), dtype=np.int64))
                    for name, (dtype, _) in FEATURES.items()}
        path = os.path.join(directory, f"part-{index:03d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for record in serialize_examples(features):
                writer.write(record)
        paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads TensorFlow may use")
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from bert_tf.data.input_pipeline import pretraining_dataset

    with tempfile.TemporaryDirectory() as directory:
        write_records(directory, 4, 2048, args.max_seq_length, args.max_predictions_per_seq,
                      np.random.default_rng(0))
        dataset = pretraining_dataset(os.path.join(directory, "*.tfrecord"), args.batch_size,
                                      args.max_seq_length, args.max_predictions_per_seq)
        options = tf.data.Options()  # tf.data's own pool, else it uses every core
        options.threading.private_threadpool_size = args.threads
        options.threading.max_intra_op_parallelism = 1
        dataset = dataset.with_options(options)
        iterator = iter(dataset)
        for _ in range(20):  # warm-up: buffers filled, functions traced
            next(iterator)
        start = time.perf_counter()
        for _ in range(args.batches):
            next(iterator)
        seconds = time.perf_counter() - start
    rate = args.batches * args.batch_size / seconds
    print(f"input pipeline, seq {args.max_seq_length}, {args.threads} thread(s): "
          f"{rate:,.0f} sequences/s ({rate / args.threads:,.0f} per thread)")


if __name__ == "__main__":
    main()
