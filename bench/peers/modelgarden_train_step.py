"""Peer row: one full BERT pretraining step with TF Model Garden
(tf-models-official): networks.BertEncoder inside models.BertPretrainerV2 with
a next-sentence ClassificationHead, stepped by Model Garden's own
MaskedLMTask.train_step (its MLM + NSP loss, backward, optimizer update) in a
tf.function, optionally jit-compiled (XLA). fp32, or bf16 through the Keras
'mixed_bfloat16' policy, the way Model Garden runs mixed precision. AdamW is
Model Garden's AdamWeightDecay (its BERT default); LAMB is its LAMB.

Runs in the benchmark-only `modelgarden` venv (bench/setup_peers.sh) and prints
one BENCH_JSON record.
"""

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402

# Model Garden's feature names for Google's.
FEATURE_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}


def build_model(tf_keras, config):
    """BertPretrainerV2 over a BertEncoder for a Google bert_config dict, built as
    official/nlp/configs/encoders.py builds it; the next-sentence head is a ClassificationHead
    on [CLS] (its `pooler_dense` is Google's pooler)."""
    from official.modeling import tf_utils
    from official.nlp.modeling import layers, models, networks

    initializer = tf_keras.initializers.TruncatedNormal(stddev=0.02)
    gelu = tf_utils.get_activation("gelu")
    encoder = networks.BertEncoder(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_attention_heads=config["num_attention_heads"],
        inner_dim=config["intermediate_size"], inner_activation=gelu,
        max_sequence_length=config.get("max_position_embeddings", 512), type_vocab_size=2,
        output_dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        initializer=initializer, dict_outputs=True)
    return models.BertPretrainerV2(
        encoder_network=encoder, mlm_activation=gelu, mlm_initializer=initializer,
        classification_heads=[layers.ClassificationHead(
            inner_dim=config["hidden_size"], num_classes=2,
            dropout_rate=config.get("hidden_dropout_prob", 0.1), name="next_sentence")])


def build_optimizer(name, learning_rate, weight_decay_rate=0.01,
                    exclude_from_layer_adaptation=None):
    """Model Garden's own optimizers: LAMB, or AdamWeightDecay (Google's rule, its BERT
    default); decay skips LayerNorm and bias."""
    from official.modeling.optimization import lamb, legacy_adamw

    decay = dict(weight_decay_rate=weight_decay_rate,
                 exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    if name == "lamb":
        return lamb.LAMB(learning_rate=learning_rate, epsilon=1e-6,
                         exclude_from_layer_adaptation=exclude_from_layer_adaptation, **decay)
    return legacy_adamw.AdamWeightDecay(learning_rate=learning_rate, epsilon=1e-6, **decay)


def main():
    parser = common.add_step_args(argparse.ArgumentParser(description=__doc__))
    parser.add_argument("--xla", action="store_true", help="jit_compile the whole step")
    parser.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw")
    args = parser.parse_args()
    if args.precision not in ("fp32", "bf16"):
        common.fail(f"--precision={args.precision}: this peer runs fp32 or bf16 on a CPU")
    common.configure_tf_threads(args.threads)
    import tensorflow as tf
    import tf_keras
    from official.nlp.data import pretrain_dataloader
    from official.nlp.tasks import masked_lm

    reason = common.skip_reason(args, common.measure_matmul_peak(
        "bfloat16" if args.precision == "bf16" else "float32", 1024, repeats=1))
    if reason:
        common.report_skip(args, {**vars(args), "framework": "modelgarden", "skipped": reason})
        return
    tf.random.set_seed(0)
    if args.precision == "bf16":
        tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = build_model(tf_keras, {**common.SHAPES[args.shape], "vocab_size": common.VOCAB_SIZE})
    optimizer = build_optimizer(args.optimizer, 1e-4)
    task = masked_lm.MaskedLMTask(masked_lm.MaskedLMConfig(
        train_data=pretrain_dataloader.BertPretrainDataConfig(
            seq_length=args.seq_length, max_predictions_per_seq=args.masked_positions,
            use_next_sentence_label=True)))
    metrics = task.build_metrics(training=True)

    batch = common.synthetic_batch(args.batch_size, args.seq_length, args.masked_positions)
    inputs = {FEATURE_NAMES.get(name, name): tf.constant(value) for name, value in batch.items()}

    @tf.function(jit_compile=args.xla)
    def train_step(inputs):
        return task.train_step(inputs, model, optimizer, metrics)[task.loss]

    def step():
        return float(train_step(inputs))

    loss = step()
    common.serve_rounds(step, args, lambda timing: common.step_record(
        args, timing, framework="modelgarden", xla=args.xla, optimizer=args.optimizer,
        step_function="official.nlp.tasks.masked_lm.MaskedLMTask.train_step",
        versions={"tensorflow": tf.__version__,
                  "tf-models-official": version("tf-models-official")},
        loss=loss))


if __name__ == "__main__":
    main()
