"""Peer for bench/convergence.py: trains TF Model Garden's BERT (BertEncoder inside
BertPretrainerV2, as bench/peers/modelgarden_train_step.py builds it) from the same initial
weights on the same masked records, stepped by Model Garden's own optimizer
(`official.modeling.optimization.lamb.LAMB`, or `legacy_adamw.AdamWeightDecay`, Google's
rule), and evaluates held-out masked-LM loss/accuracy and NSP accuracy every --eval_every
updates.

What is the same as bert_tf: the initial weights (our Google-format checkpoint, mapped onto
Model Garden's variables), the records and batch, the loss (mean masked-LM + mean NSP), the
clipping (global norm 1.0) and the learning-rate schedule (bert_tf's, written out below:
Model Garden's LinearWarmup ends its warmup at the decayed rate, Google's at the peak).
What is Model Garden's own: the model code and the optimizer's update.

Runs in the benchmark-only `modelgarden` venv (bench/setup_peers.sh) and prints one
BENCH_JSON record with the curve.
"""

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from modelgarden_train_step import FEATURE_NAMES, build_model, build_optimizer  # noqa: E402

# Google checkpoint name -> Model Garden variable name (first match wins); kernels are then
# reshaped to Model Garden's per-head EinsumDense shapes.
NAME_MAP = (
    (r"^bert/embeddings/word_embeddings$", "word_embeddings/embeddings"),
    (r"^bert/embeddings/position_embeddings$", "position_embedding/embeddings"),
    (r"^bert/embeddings/token_type_embeddings$", "type_embeddings/embeddings"),
    (r"^bert/embeddings/LayerNorm/", "embeddings/layer_norm/"),
    (r"^bert/encoder/(layer_\d+)/attention/self/", r"transformer/\1/self_attention/"),
    (r"^bert/encoder/(layer_\d+)/attention/output/dense/",
     r"transformer/\1/self_attention/attention_output/"),
    (r"^bert/encoder/(layer_\d+)/attention/output/LayerNorm/",
     r"transformer/\1/self_attention_layer_norm/"),
    (r"^bert/encoder/(layer_\d+)/intermediate/dense/", r"transformer/\1/intermediate/"),
    (r"^bert/encoder/(layer_\d+)/output/dense/", r"transformer/\1/output/"),
    (r"^bert/encoder/(layer_\d+)/output/LayerNorm/", r"transformer/\1/output_layer_norm/"),
    # The next-sentence head's own dense layer on [CLS] is Google's pooler.
    (r"^bert/pooler/dense/", "bert/next_sentence/pooler_dense/"),
    (r"^cls/seq_relationship/output_weights$", "bert/next_sentence/logits/kernel"),
    (r"^cls/seq_relationship/output_bias$", "bert/next_sentence/logits/bias"),
    (r"^cls/predictions/output_bias$", "bert/cls/predictions/output_bias/bias"),
    (r"^cls/predictions/transform/", "bert/cls/predictions/transform/"),
)


def parse_args():
    parser = common.add_convergence_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--bert_config_file", required=True)
    parser.add_argument("--init_checkpoint", required=True, help="Google-format prefix")
    return parser.parse_args()


def model_garden_name(google_name):
    for pattern, replacement in NAME_MAP:
        if re.search(pattern, google_name):
            return re.sub(pattern, replacement, google_name)
    return None


def load_google_checkpoint(tf, model, prefix):
    """Assigns every model variable from the Google-format checkpoint; fails on a gap."""
    reader = tf.train.load_checkpoint(prefix)
    by_name = {v.name.split(":")[0]: v for v in model.trainable_variables}
    loaded = set()
    for google_name in reader.get_variable_to_shape_map():
        target = model_garden_name(google_name)
        if target is None:
            continue
        value = reader.get_tensor(google_name)
        if google_name == "cls/seq_relationship/output_weights":
            value = value.T  # Google stores [2, hidden]
        variable = by_name[target]
        variable.assign(value.reshape(variable.shape))
        loaded.add(target)
    # pooler_transform feeds only pooled_output, which the pretraining heads do not use.
    missing = sorted(set(by_name) - loaded - {"pooler_transform/kernel", "pooler_transform/bias"})
    if missing:
        common.fail(f"{prefix}: no value for Model Garden variables {missing}")


def schedule(tf, tf_keras, args):
    """bert_tf's schedule (optimization.learning_rate_at) as a Keras schedule."""
    power = 0.5 if args.optimizer_type == "lamb" else 1.0

    class BertTfSchedule(tf_keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warmup = args.learning_rate * step / max(1, args.num_warmup_steps)
            remaining = 1.0 - tf.minimum(step, args.num_train_steps) / args.num_train_steps
            return tf.where(step < args.num_warmup_steps, warmup,
                            args.learning_rate * remaining ** power)

    return BertTfSchedule()


def sums_and_loss(tf, outputs, batch):
    """bert_tf's metric sums over a batch and the batch's loss (mean MLM + mean NSP)."""
    weights = batch["masked_lm_weights"]
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["masked_lm_ids"],
                                                         outputs["mlm_logits"])
    labels = tf.reshape(batch["next_sentence_labels"], [-1])
    nsp_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs["next_sentence"])
    correct = tf.cast(tf.argmax(outputs["mlm_logits"], -1, output_type=tf.int32)
                      == batch["masked_lm_ids"], tf.float32)
    nsp_correct = tf.cast(tf.argmax(outputs["next_sentence"], -1, output_type=tf.int32)
                          == labels, tf.float32)
    sums = tf.stack([tf.reduce_sum(weights * nll), tf.reduce_sum(weights),
                     tf.reduce_sum(weights * correct), tf.reduce_sum(nsp_nll),
                     tf.reduce_sum(nsp_correct), tf.cast(tf.size(labels), tf.float32)])
    return sums, sums[0] / (sums[1] + 1e-5) + tf.reduce_mean(nsp_nll)


def load_npz(path):
    import numpy as np

    data = dict(np.load(path))
    return {FEATURE_NAMES.get(k, k): (v.astype(np.float32) if k == "masked_lm_weights"
                                      else v.astype(np.int32)) for k, v in data.items()}


def main():
    args = parse_args()
    # The encoder sees the labels in the feature dict too and warns that it ignores them.
    warnings.filterwarnings("ignore", message="Input dict contained keys")
    common.configure_tf_threads(args.threads)
    import numpy as np
    import tensorflow as tf
    import tf_keras

    tf.random.set_seed(args.seed)
    with open(args.bert_config_file, encoding="utf-8") as f:
        model = build_model(tf_keras, json.load(f))
    train, held_out = load_npz(args.train_npz), load_npz(args.eval_npz)
    model({k: v[:1] for k, v in train.items()})  # creates the variables
    load_google_checkpoint(tf, model, args.init_checkpoint)
    adapt = [p for p in args.exclude_from_layer_adaptation.split(",") if p]
    optimizer = build_optimizer(
        args.optimizer_type, schedule(tf, tf_keras, args), args.weight_decay_rate,
        # Model Garden treats an empty list as "same as weight decay"; NVIDIA passes ['None'].
        exclude_from_layer_adaptation=adapt or ["None"])

    @tf.function
    def train_step(batch):
        with tf.GradientTape() as tape:
            _, loss = sums_and_loss(tf, model(batch, training=True), batch)
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def eval_sums(batch):
        return sums_and_loss(tf, model(batch, training=False), batch)[0]

    def evaluate():
        n, size = len(held_out["input_word_ids"]), args.eval_batch_size
        totals = sum(eval_sums({k: v[i:i + size] for k, v in held_out.items()}).numpy()
                     for i in range(0, n - size + 1, size))
        totals = [float(t) for t in totals]
        weight = totals[1] + 1e-5
        return {"masked_lm_loss": totals[0] / weight, "masked_lm_accuracy": totals[2] / weight,
                "next_sentence_loss": totals[3] / totals[5],
                "next_sentence_accuracy": totals[4] / totals[5]}

    rng = np.random.default_rng(args.seed)
    num_records = len(train["input_word_ids"])
    order, cursor = rng.permutation(num_records), 0
    curve = [{"step": 0, **evaluate()}]
    start = time.time()
    for step in range(args.num_train_steps):
        if cursor + args.batch_size > num_records:
            order, cursor = rng.permutation(num_records), 0
        index = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        loss = float(train_step({k: v[index] for k, v in train.items()}))
        if (step + 1) % args.eval_every == 0 or step + 1 == args.num_train_steps:
            point = {"step": step + 1, "train_loss": loss, **evaluate()}
            curve.append(point)
            if args.curve_file:
                Path(args.curve_file).write_text(json.dumps(curve))
            print(f"modelgarden step {step + 1}: {json.dumps(point)}", file=sys.stderr,
                  flush=True)
    common.print_json({"framework": "modelgarden", "tensorflow": tf.__version__,
                       "curve": curve,
                       "train_seconds": time.time() - start})


if __name__ == "__main__":
    main()
