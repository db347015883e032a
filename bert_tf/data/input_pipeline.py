"""tf.data pipeline over pretraining TFRecords (Google's schema), with optional dynamic masking.

Knows nothing of the model or Horovod: the rank and the number of ranks are arguments.
"""

import dataclasses
import types

import tensorflow as tf

from bert_tf.data.files import expand_patterns
from bert_tf.data.records import feature_spec, num_to_predict

# What records.num_to_predict needs, inside a TensorFlow graph.
TF_OPS = types.SimpleNamespace(round=tf.math.round, maximum=tf.maximum, minimum=tf.minimum)


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """RoBERTa-style masking chosen per batch in the pipeline (records are written unmasked with
    create_pretraining_data.py --dynamic_masking). Ids are the vocab's; Google's rules: pick
    records.num_to_predict non-special tokens, then 80% [MASK], 10% a random vocab id, 10%
    unchanged."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never masked: [CLS], [SEP], [PAD]
    masked_lm_prob: float = 0.15

    @classmethod
    def from_tokenizer(cls, tokenizer, masked_lm_prob=0.15):
        return cls(tokenizer.vocab_size, tokenizer.mask_id,
                   (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id), masked_lm_prob)


def _to_model_types(record):
    """int64 -> int32 (what the model takes), next_sentence_labels [1] -> scalar."""
    out = {}
    for name, value in record.items():
        if value.dtype == tf.int64:
            value = tf.cast(value, tf.int32)
        out[name] = value
    out["next_sentence_labels"] = tf.squeeze(out["next_sentence_labels"], -1)
    return out


def apply_dynamic_masking(batch, masking, max_predictions_per_seq, seed):
    """Chooses masked positions for a batch of unmasked records; `seed` is a [2] int tensor."""
    input_ids = batch["input_ids"]
    shape = tf.shape(input_ids)
    batch_size, seq_length = shape[0], shape[1]
    seeds = tf.random.experimental.stateless_split(seed, 4)
    candidate = tf.cast(batch["input_mask"], tf.bool)
    for special_id in masking.special_ids:
        candidate &= tf.not_equal(input_ids, special_id)
    num_tokens = tf.reduce_sum(batch["input_mask"], axis=1)
    num_to_mask = tf.cast(num_to_predict(tf.cast(num_tokens, tf.float32), masking.masked_lm_prob,
                                         max_predictions_per_seq, ops=TF_OPS), tf.int32)
    num_to_mask = tf.minimum(num_to_mask, tf.reduce_sum(tf.cast(candidate, tf.int32), 1))
    # A uniform random subset of the candidates: the top-k of random keys.
    keys = tf.random.stateless_uniform(shape, seeds[0])
    keys = tf.where(candidate, keys, -1.0)
    _, top = tf.math.top_k(keys, k=max_predictions_per_seq)
    valid = tf.range(max_predictions_per_seq)[None, :] < num_to_mask[:, None]
    positions = tf.sort(tf.where(valid, top, seq_length), axis=1)  # invalid ones sort last
    valid = positions < seq_length
    positions = tf.where(valid, positions, 0)
    original = tf.gather(input_ids, positions, batch_dims=1)
    choice = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[2], 0, masking.vocab_size,
                                             dtype=tf.int32)
    replacement = tf.where(choice < 0.8, masking.mask_id,
                           tf.where(choice < 0.9, original, random_ids))
    rows = tf.broadcast_to(tf.range(batch_size)[:, None], tf.shape(positions))
    indices = tf.stack([rows, positions], -1)
    update_indices = tf.boolean_mask(indices, valid)
    masked_ids = tf.tensor_scatter_nd_update(input_ids, update_indices,
                                             tf.boolean_mask(replacement, valid))
    return {
        **batch,
        "input_ids": masked_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(valid, original, 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
    }


def pretraining_dataset(input_patterns, batch_size, max_seq_length, max_predictions_per_seq,
                        is_training=True, rank=0, num_ranks=1, seed=12345, dynamic_masking=None,
                        skip_batches=0, batches_per_update=1):
    """Batches of pretraining features, [B,S]/[B,P] int32 (masked_lm_weights float32) and
    next_sentence_labels [B]; drop_remainder=True.

    Training: this rank's share (whole files when there are at least as many files as ranks,
    else every num_ranks-th record), shuffled, repeated forever; the same arguments give the same
    batches in every run. `skip_batches` resumes that sequence after so many batches: it drops
    raw records before they are parsed (much cheaper than skipping parsed batches, though still
    a read of the skipped data). Eval: one pass, in order. The files are read as they are:
    check them first with records.validate_records.

    `batches_per_update` (the micro-batches of one optimizer update): that many are made ahead,
    while the update before computes, so that an update that takes all its micro-batches
    before its first forward pass (their totals normalise its loss) finds them ready.
    """
    files = expand_patterns(input_patterns)
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    options = tf.data.Options()
    options.deterministic = True
    shard_by_file = is_training and len(files) >= num_ranks
    if shard_by_file:
        files = files[rank::num_ranks]
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
        dataset = dataset.interleave(
            tf.data.TFRecordDataset, cycle_length=min(len(files), 8), block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if not shard_by_file:
            dataset = dataset.shard(num_ranks, rank)
        dataset = dataset.shuffle(max(100, 10 * batch_size), seed=seed + 1)
        # The stream repeats forever, so batch i is always records [i*B, (i+1)*B).
        dataset = dataset.skip(skip_batches * batch_size)
    else:
        dataset = tf.data.TFRecordDataset(dataset)
        if num_ranks > 1:
            dataset = dataset.shard(num_ranks, rank)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda records: _to_model_types(tf.io.parse_example(records, spec)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if dynamic_masking is not None:
        # Seeded by (seed, rank, batch index): reproducible, and the same after a resume.
        dataset = dataset.enumerate(start=skip_batches if is_training else 0).map(
            lambda index, batch: apply_dynamic_masking(
                batch, dynamic_masking, max_predictions_per_seq,
                tf.stack([tf.constant(seed * 1009 + rank, tf.int64), index])),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ahead = batches_per_update if batches_per_update > 1 else tf.data.AUTOTUNE
    return dataset.with_options(options).prefetch(ahead)
