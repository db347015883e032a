"""Task heads for fine-tuning: BERT plus one linear classifier, with Google's variable names.

As in Google's run_classifier.py, the classifier is `output_weights` [num_labels, hidden] and
`output_bias` [num_labels] at the top level (outside `bert/`), applied after dropout to the pooled
output (sequence classification) or to every position's final hidden state (token
classification, BERT's NER setup). Initialising from a pretraining checkpoint loads `bert/...`
and leaves the two classifier variables new.

Losses come as sums over weighted rows (`classification_sums`), so training can normalise by
totals over micro-batches and ranks, as pretraining does.
"""

import tensorflow as tf

from bert_tf.model.config import BertConfig
from bert_tf.model.modeling import (
    BertModel,
    _dropout_for,
    _NamedModule,
    _truncated_normal,
    _zeros,
    cross_entropy_and_predictions,
)

# The per-batch sums a fine-tuning loss and accuracy come from; training allreduces them.
CLASSIFICATION_SUMS = ("loss_sum", "weight_sum", "correct_sum")
# Folded into the pass's dropout seed for the classifier's own dropout site.
_HEAD_DROPOUT_SITE = 1_000_003


class _Classifier(_NamedModule):
    """BERT, dropout, then `output_weights`/`output_bias`."""

    def __init__(self, config: BertConfig, num_labels: int, compute_dtype=tf.float32):
        super().__init__("")
        if num_labels < 2:
            raise ValueError(f"a classifier needs at least 2 labels, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.bert = self._child(BertModel(config, compute_dtype))
        self.output_weights = self._add("output_weights", [num_labels, config.hidden_size],
                                        _truncated_normal(config.initializer_range))
        self.output_bias = self._add("output_bias", [num_labels], _zeros)

    def _encode(self, features, training, dropout_seed):
        return self.bert(features["input_ids"], features["input_mask"], features["segment_ids"],
                         training=training, dropout_seed=dropout_seed)

    def _logits(self, hidden, training, dropout_seed):
        """hidden: [N, H] float32 -> float32 logits [N, num_labels]."""
        head_seed = None
        if training and dropout_seed is not None:
            head_seed = tf.random.experimental.stateless_fold_in(dropout_seed,
                                                                 _HEAD_DROPOUT_SITE)
        hidden = _dropout_for(training, head_seed)(hidden, self.config.hidden_dropout_prob)
        logits = tf.matmul(hidden, self.output_weights, transpose_b=True)
        return tf.nn.bias_add(logits, self.output_bias)


class BertForSequenceClassification(_Classifier):
    """One label per sequence, from the pooled [CLS] output."""

    def __call__(self, features, training=False, dropout_seed=None) -> tf.Tensor:
        """features: input_ids, input_mask, segment_ids [B, S]. training, dropout_seed: as
        BertModel's. Returns float32 logits [B, num_labels]."""
        outputs = self._encode(features, training, dropout_seed)
        return self._logits(outputs.pooled_output, training, dropout_seed)


class BertForTokenClassification(_Classifier):
    """One label per position, from the final hidden states."""

    def __call__(self, features, training=False, dropout_seed=None) -> tf.Tensor:
        """features: input_ids, input_mask, segment_ids [B, S]. Returns float32 logits
        [B, S, num_labels]."""
        outputs = self._encode(features, training, dropout_seed)
        sequence = outputs.sequence_output
        shape = tf.shape(sequence)
        logits = self._logits(tf.reshape(sequence, [-1, self.config.hidden_size]), training,
                              dropout_seed)
        return tf.reshape(logits, [shape[0], shape[1], self.num_labels])


def classification_sums(logits, label_ids, label_weights) -> dict:
    """Cross-entropy and accuracy sums over weighted rows (keys CLASSIFICATION_SUMS).

    Args:
      logits: float32 [..., num_labels].
      label_ids: integer [...], each in [0, num_labels) where its weight is non-zero.
      label_weights: [...], 1.0 for rows that count (real examples, first word pieces), else 0.

    Returns:
      float32 scalars loss_sum, weight_sum, correct_sum.
    """
    num_labels = logits.shape[-1]
    logits = tf.reshape(logits, [-1, num_labels])
    weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
    labels = tf.reshape(tf.cast(label_ids, tf.int32), [-1])
    labels = tf.where(weights > 0, labels, tf.zeros_like(labels))  # padding rows: any label
    nll, predictions = cross_entropy_and_predictions(labels, logits)
    hit = tf.cast(tf.equal(predictions, labels), tf.float32)
    return {"loss_sum": tf.reduce_sum(weights * nll), "weight_sum": tf.reduce_sum(weights),
            "correct_sum": tf.reduce_sum(weights * hit)}


def classification_metrics(sums) -> dict[str, float]:
    """loss and accuracy (Python floats) from CLASSIFICATION_SUMS (a dict or a sequence)."""
    if not isinstance(sums, dict):
        sums = dict(zip(CLASSIFICATION_SUMS, sums, strict=True))
    weight = max(float(sums["weight_sum"]), 1e-5)
    return {"loss": float(sums["loss_sum"]) / weight,
            "accuracy": float(sums["correct_sum"]) / weight}
