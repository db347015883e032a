"""Which positions of a batch to mask, in TensorFlow: single pieces, or whole words. The one
rule for both static masking (create_pretraining_data.py, bert_tf.data.masking, run eagerly)
and dynamic masking (input_pipeline.apply_dynamic_masking, in the tf.data graph)."""

import tensorflow as tf


def random_pieces(candidate, num_to_mask, max_predictions_per_seq, seed):
    """A uniform random subset of num_to_mask candidates per row, the top-k of random keys.

    Args:
      candidate: bool [B, S], the positions that may be masked.
      num_to_mask: int32 [B], at most the candidates of each row.
      max_predictions_per_seq: P.
      seed: int [2], a stateless seed.

    Returns:
      int32 [B, P], positions in increasing order, S where unused.
    """
    seq_length = tf.shape(candidate)[1]
    keys = tf.where(candidate, tf.random.stateless_uniform(tf.shape(candidate), seed), -1.0)
    _, top = tf.math.top_k(keys, k=max_predictions_per_seq)
    valid = tf.range(max_predictions_per_seq)[None, :] < num_to_mask[:, None]
    return tf.sort(tf.where(valid, top, seq_length), axis=1)  # invalid ones sort last


def random_whole_words(word_starts, candidate, num_to_mask, max_predictions_per_seq, seed):
    """Google's whole-word rule: words in random order, a word that would overflow num_to_mask
    skipped. A word starts where word_starts says, or after a non-candidate ([CLS], [SEP]).

    A row where no word fits (each is longer than its budget: a long word alone in a short
    sequence) masks single pieces instead, as random_pieces does, rather than nothing: Google's
    rule left such sequences without a masked position.

    Args:
      word_starts: bool [B, S], whether each position begins a word.
      candidate, num_to_mask, max_predictions_per_seq, seed: as random_pieces.

    Returns:
      int32 [B, P], positions in increasing order, S where unused.
    """
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    shape = tf.shape(candidate)
    batch_size, seq_length = shape[0], shape[1]
    after_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
    starts = candidate & (word_starts | ~after_candidate)
    word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # word index of each position
    word = tf.where(candidate, word, seq_length - 1)
    rows = tf.broadcast_to(tf.range(batch_size)[:, None], shape)
    slot = rows * seq_length + tf.maximum(word, 0)
    lengths = tf.reshape(tf.math.unsorted_segment_sum(
        tf.cast(candidate, tf.int32), slot, batch_size * seq_length), shape)  # per word
    order = tf.argsort(tf.random.stateless_uniform(shape, seeds[0]), axis=1)
    sorted_lengths = tf.gather(lengths, order, batch_dims=1)

    def take(count, length):  # Google: skip a word that would overflow, keep going
        fits = (length > 0) & (count + length <= num_to_mask)
        return count + tf.where(fits, length, 0)
    counts = tf.transpose(tf.scan(take, tf.transpose(sorted_lengths),
                                  tf.zeros([batch_size], tf.int32)))
    taken_sorted = counts > tf.pad(counts[:, :-1], [[0, 0], [1, 0]])
    taken = tf.gather(taken_sorted, tf.argsort(order, axis=1), batch_dims=1)
    chosen = candidate & tf.gather(taken, tf.maximum(word, 0), batch_dims=1)
    # Chosen positions first, in increasing order: the top-k of (seq_length - position).
    score = tf.where(chosen, seq_length - tf.range(seq_length)[None, :], 0)
    top_score, _ = tf.math.top_k(score, k=max_predictions_per_seq)
    words = tf.where(top_score > 0, seq_length - top_score, seq_length)
    none_fits = counts[:, -1] == 0
    pieces = random_pieces(candidate, num_to_mask, max_predictions_per_seq, seeds[1])
    return tf.where(none_fits[:, None], pieces, words)
