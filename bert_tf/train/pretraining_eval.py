"""Pretraining's evaluation: masked-LM loss/accuracy and next-sentence accuracy over
--eval_files, summed on every rank and allreduced (downstream scores are in evaluation.py)."""

import tensorflow as tf

from bert_tf.data import input_pipeline, records
from bert_tf.model.modeling import METRIC_SUMS, metrics_from_sums, pretraining_loss
from bert_tf.train import distributed
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.faults import TrainingError


def trained_metrics(metrics: dict, config: PretrainingConfig) -> dict:
    """`metrics` without the next-sentence ones when the run does not train that head
    (--nonext_sentence_prediction): its untrained loss would read as a result, and in the
    loss."""
    if config.next_sentence_prediction:
        return metrics
    kept = {k: v for k, v in metrics.items() if not k.startswith("next_sentence")}
    if "loss" in kept:
        kept["loss"] = kept["masked_lm_loss"]
    return kept


def evaluate(model, config: PretrainingConfig, files, masking=None) -> dict:
    """Masked-LM loss/accuracy and NSP accuracy over up to --max_eval_steps batches per rank.
    With `masking` (unmasked records) the masks are fixed by --seed and the batch order."""
    rank, num_ranks = distributed.rank(), distributed.size()
    dataset = input_pipeline.pretraining_dataset(
        files, batch_size=config.eval_batch_size, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq, is_training=False,
        rank=rank, num_ranks=num_ranks, seed=config.seed, dynamic_masking=masking)

    @tf.function(jit_compile=config.use_xla, autograph=False)
    def eval_sums(features):
        sums = pretraining_loss(model(features, training=False), features)
        return tf.stack([sums[name] for name in METRIC_SUMS])

    totals = tf.zeros([len(METRIC_SUMS)])
    try:
        for features in dataset.take(config.max_eval_steps):
            totals += eval_sums(features)
    except tf.errors.DataLossError as e:
        raise TrainingError(records.damage_message(files, "eval_files", e)) from None
    (totals,) = distributed.allreduce_sum([totals])
    sums = dict(zip(METRIC_SUMS, totals.numpy().tolist(), strict=True))
    if sums["num_examples"] == 0:
        raise TrainingError(f"--eval_files={config.eval_files} gave no batch: each of the "
                            f"{num_ranks} rank(s) needs at least --eval_batch_size="
                            f"{config.eval_batch_size} records")
    return {**trained_metrics(metrics_from_sums(sums), config),
            "examples": int(sums["num_examples"])}
