"""Pretraining instances as offsets into a shard's flat token ids: Google's segment pairs
(create_instances_from_document) or, without next-sentence prediction, full-length windows of
each document; and the [CLS] A [SEP] B [SEP] (or [CLS] A [SEP]) id arrays built from them."""

import itertools

import numpy as np


def create_pairs(sentence_starts, sentence_ends, doc_ranges, config, rng, stats):
    """Google's segment-pair algorithm over one shard's documents, `dupe_factor` passes.

    Returns int64 array [n, 5]: a_start, a_end, b_start, b_end (offsets into the shard's flat
    token ids, after truncation) and is_random_next.
    """
    max_num_tokens = config.max_seq_length - 3
    lengths = (sentence_ends - sentence_starts).tolist()
    starts, ends = sentence_starts.tolist(), sentence_ends.tolist()
    stats["long_sentences"] += sum(n > max_num_tokens for n in lengths)
    pairs = []
    num_docs = len(doc_ranges)
    for _ in range(config.dupe_factor):
        for doc_index, (first, stop) in enumerate(doc_ranges):
            target = max_num_tokens
            if rng.random() < config.short_seq_prob:
                target = rng.randint(2, max_num_tokens)
            chunk_first, chunk_length, i = first, 0, first
            while i < stop:
                chunk_length += lengths[i]
                if i == stop - 1 or chunk_length >= target:
                    num_chunk = i - chunk_first + 1
                    a_sentences = rng.randint(1, num_chunk - 1) if num_chunk >= 2 else 1
                    a_start, a_end = starts[chunk_first], ends[chunk_first + a_sentences - 1]
                    if num_chunk == 1 or rng.random() < 0.5:
                        is_random_next = 1
                        target_b = target - (a_end - a_start)
                        for _ in range(10):
                            other = rng.randint(0, num_docs - 1)
                            if other != doc_index:
                                break
                        other_first, other_stop = doc_ranges[other]
                        j = rng.randint(other_first, other_stop - 1)
                        b_start, b_end = starts[j], ends[j]
                        while b_end - b_start < target_b and j + 1 < other_stop:
                            j += 1
                            b_end = ends[j]
                        # The chunk's unused sentences start the next chunk.
                        i -= num_chunk - a_sentences
                    else:
                        is_random_next = 0
                        b_start, b_end = ends[chunk_first + a_sentences - 1], ends[i]
                    pairs.append(_truncate_pair(a_start, a_end, b_start, b_end, is_random_next,
                                                max_num_tokens, rng, stats))
                    chunk_first, chunk_length = i + 1, 0
                i += 1
    return np.asarray(pairs, np.int64).reshape(-1, 5)


def create_windows(sentence_starts, sentence_ends, doc_ranges, config, rng):
    """Each document's tokens cut into windows of max_seq_length - 2 ([CLS] window [SEP]), for
    masked-LM-only pretraining: no padding but at a document's end, no sentence pair (RoBERTa's
    DOC-SENTENCES input, Liu et al. 2019, Table 2: no worse than pairs without NSP). Every pass
    after the first starts its windows at a random offset, so `dupe_factor` passes cut the text
    in different places.

    Returns int64 array [n, 5] in create_pairs' layout: a_start, a_end, b_start = b_end = a_end
    (no segment B) and is_random_next = 0.
    """
    window = config.max_seq_length - 2
    windows = []  # (start, end) offsets
    for dupe in range(config.dupe_factor):
        for first, stop in doc_ranges:
            begin, end = int(sentence_starts[first]), int(sentence_ends[stop - 1])
            offset = rng.randrange(window) if dupe else 0
            cuts = [begin, *range(begin + offset if offset else begin + window, end, window), end]
            windows += [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
    pairs = np.zeros([len(windows), 5], np.int64)
    if windows:
        pairs[:, :2] = windows
        pairs[:, 2] = pairs[:, 3] = pairs[:, 1]
    return pairs


def _truncate_pair(a_start, a_end, b_start, b_end, is_random_next, max_num_tokens, rng, stats):
    """Google's truncate_seq_pair in closed form: tokens leave the longer segment (B on ties) one
    at a time, each from its front or back with probability 1/2."""
    len_a, len_b = a_end - a_start, b_end - b_start
    excess = len_a + len_b - max_num_tokens
    if excess > 0:
        stats["truncated_instances"] += 1
        stats["truncated_tokens"] += excess
        first = min(excess, abs(len_a - len_b))
        rest = excess - first
        cut_a = rest // 2 + (first if len_a > len_b else 0)
        cut_b = rest - rest // 2 + (0 if len_a > len_b else first)
        front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
        front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
        a_start, a_end = a_start + front_a, a_end - (cut_a - front_a)
        b_start, b_end = b_start + front_b, b_end - (cut_b - front_b)
    return a_start, a_end, b_start, b_end, is_random_next


def assemble_tokens(flat, pairs, tokenizer, max_seq_length, flat_word_starts=None):
    """[CLS] A [SEP] B [SEP] ([CLS] A [SEP] where B is empty: create_windows) + padding for
    every pair at once -> (input_ids, segment_ids, lengths, word_starts) with
    input_ids/segment_ids int64 [n, S]; word_starts (bool [n, S], whether each position begins
    a word; None without flat_word_starts) for whole-word masking."""
    position = np.arange(max_seq_length)[None, :]
    a_start, a_end, b_start, b_end = (pairs[:, k:k + 1] for k in range(4))
    len_a, len_b = a_end - a_start, b_end - b_start
    in_a = (position >= 1) & (position <= len_a)
    in_b = (position >= len_a + 2) & (position <= len_a + len_b + 1)
    source = np.where(in_a, a_start + position - 1, np.where(in_b, b_start + position - len_a - 2, 0))
    source = np.minimum(source, max(flat.size - 1, 0))
    input_ids = np.where(in_a | in_b, flat[source], tokenizer.pad_id).astype(np.int64)
    word_starts = None
    if flat_word_starts is not None:
        word_starts = ~(in_a | in_b) | flat_word_starts[source]
    input_ids[:, 0] = tokenizer.cls_id
    rows = np.arange(len(pairs))
    input_ids[rows, len_a[:, 0] + 1] = tokenizer.sep_id
    has_b = len_b[:, 0] > 0
    input_ids[rows[has_b], (len_a + len_b)[has_b, 0] + 2] = tokenizer.sep_id
    lengths = (len_a + len_b + 2)[:, 0] + has_b
    segment_ids = ((position >= len_a + 2) & (position < lengths[:, None])).astype(np.int64)
    return input_ids, segment_ids, lengths, word_starts
