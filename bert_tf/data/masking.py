"""Google's masked-LM choice (create_masked_lm_predictions) for a batch of instances: 15% of
the positions, 80% [MASK] / 10% the same token / 10% a random token, per token or whole words."""

import numpy as np

from bert_tf.data.records import num_to_predict


def choose_masks(input_ids, lengths, segment_lengths_a, config, tokenizer, word_starts, rng):
    """Google's create_masked_lm_predictions for a batch of instances.

    Returns (masked input_ids, positions [n, P], label ids [n, P], weights [n, P], counts) where
    counts tallies the 80/10/10 decisions. word_starts (bool [n, S]: whether each position
    begins a word of the tokenizer's word splitter, for whole-word masking) is None for
    per-token masking. The words come from the splitter (tokenize_words_batch), not from "##"
    strings: Japanese without spaces rarely makes "##" pieces under Google's split. Whole words
    are chosen by the rule dynamic masking runs (whole_words.random_whole_words).
    """
    n, seq_length = input_ids.shape
    max_predictions = config.max_predictions_per_seq
    position = np.arange(seq_length)[None, :]
    len_a = segment_lengths_a[:, None]
    candidate = ((position >= 1) & (position <= len_a)) | (
        (position >= len_a + 2) & (position < lengths[:, None] - 1))
    num_to_mask = np.minimum(num_to_predict(lengths, config.masked_lm_prob, max_predictions),
                             candidate.sum(1)).astype(np.int64)
    if word_starts is None:
        keys = rng.random((n, seq_length))
        order = np.argsort(np.where(candidate, keys, 2.0), axis=1)[:, :max_predictions]
        chosen = np.arange(max_predictions)[None, :] < num_to_mask[:, None]
        positions = np.sort(np.where(chosen, order, seq_length), axis=1)
    else:
        positions = _choose_whole_words(candidate, num_to_mask, word_starts, max_predictions,
                                        rng)
    valid = positions < seq_length
    positions = np.where(valid, positions, 0)
    rows = np.arange(n)[:, None]
    labels = np.where(valid, input_ids[rows, positions], 0)
    decision = rng.random(positions.shape)
    random_ids = rng.integers(0, tokenizer.vocab_size, positions.shape)
    replacement = np.where(decision < 0.8, tokenizer.mask_id,
                           np.where(decision < 0.9, labels, random_ids))
    masked = input_ids.copy()
    masked[np.broadcast_to(rows, positions.shape)[valid], positions[valid]] = replacement[valid]
    counts = {
        "masked": int(valid.sum()),
        "masked_as_mask": int((valid & (decision < 0.8)).sum()),
        "masked_kept": int((valid & (decision >= 0.8) & (decision < 0.9)).sum()),
        "masked_random": int((valid & (decision >= 0.9)).sum()),
    }
    return masked, positions, labels, valid.astype(np.float32), counts


def _choose_whole_words(candidate, num_to_mask, word_starts, max_predictions, rng):
    """whole_words.random_whole_words, the rule dynamic masking runs in the graph, run eagerly
    with a stateless seed drawn from `rng` -> positions int64 [n, P], seq_length where unused."""
    import tensorflow as tf

    from bert_tf.data.whole_words import random_whole_words

    seed = tf.constant(rng.integers(0, 2**31, size=2), tf.int64)
    positions = random_whole_words(tf.constant(word_starts), tf.constant(candidate),
                                   tf.constant(num_to_mask, tf.int32), max_predictions, seed)
    return positions.numpy().astype(np.int64)
