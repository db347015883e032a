"""tf.data pipeline over pretraining TFRecords (Google's schema), with optional dynamic masking.

Knows nothing of the model or Horovod: the rank and the number of ranks are arguments.
"""

import dataclasses
import types

import tensorflow as tf

from bert_tf.data.files import expand_patterns
from bert_tf.data.records import count_records, feature_spec, num_to_predict
from bert_tf.data.whole_words import random_pieces, random_whole_words

# What records.num_to_predict needs, inside a TensorFlow graph.
TF_OPS = types.SimpleNamespace(round=tf.math.round, maximum=tf.maximum, minimum=tf.minimum)


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """RoBERTa-style masking chosen per batch in the pipeline (records are written unmasked with
    create_pretraining_data.py --dynamic_masking). Ids are the vocab's; Google's rules: pick
    records.num_to_predict non-special tokens (or whole words of them), then 80% [MASK], 10% a
    random vocab id, 10% unchanged."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never masked: [CLS], [SEP], [PAD]
    masked_lm_prob: float = 0.15
    # Whole-word masking: whether each vocab id begins a word of the tokenizer's word splitter
    # (FullTokenizer.word_start_table: the records keep Google's schema, the ids say it); None
    # masks single pieces.
    word_start_table: tuple[bool, ...] | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer, masked_lm_prob=0.15, whole_word=False):
        table = tuple(tokenizer.word_start_table().tolist()) if whole_word else None
        return cls(tokenizer.vocab_size, tokenizer.mask_id,
                   (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id), masked_lm_prob, table)


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
    if masking.word_start_table is None:
        positions = random_pieces(candidate, num_to_mask, max_predictions_per_seq, seeds[0])
    else:
        word_starts = tf.gather(tf.constant(masking.word_start_table), input_ids)
        positions = random_whole_words(word_starts, candidate, num_to_mask,
                                       max_predictions_per_seq, seeds[0])
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


# Files read interleaved at a time (NVIDIA's cycle_length), and the unit a resume skips.
FILES_PER_GROUP = 8


@dataclasses.dataclass(frozen=True)
class RecordLayout:
    """Which records of `files` a rank reads: whole files (`shard` None) or every num_ranks-th
    record of each group (`shard` = (num_ranks, rank)), when there are fewer files than ranks."""

    files: tuple[str, ...]
    shard: tuple[int, int] | None

    @classmethod
    def of_rank(cls, files, rank, num_ranks):
        if len(files) >= num_ranks:
            return cls(tuple(files[rank::num_ranks]), None)
        return cls(tuple(files), (num_ranks, rank))

    @property
    def num_groups(self) -> int:
        return -(-len(self.files) // FILES_PER_GROUP)


def _epoch_order(files, seed, epoch):
    """The files (a string tensor) in epoch `epoch`'s order, a permutation seeded by both."""
    keys = tf.random.stateless_uniform(tf.shape(files), tf.stack(
        [tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)]))
    return tf.gather(files, tf.argsort(keys))


def _group_records(layout: RecordLayout, seed, epoch, group, buffer_size):
    """One group's records: up to FILES_PER_GROUP files of the epoch's order interleaved, this
    rank's share, shuffled with a buffer that the group's end drains (so a resume can start at
    any group without replaying the ones before)."""
    order = _epoch_order(tf.constant(layout.files), seed, epoch)
    members = order[group * FILES_PER_GROUP:(group + 1) * FILES_PER_GROUP]
    records = tf.data.Dataset.from_tensor_slices(members).interleave(
        tf.data.TFRecordDataset, cycle_length=FILES_PER_GROUP, block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if layout.shard:
        records = records.shard(*layout.shard)
    return records.shuffle(buffer_size, seed=seed + 1 + epoch * layout.num_groups + group)


def training_records(files, rank, num_ranks, seed, buffer_size, skip_records=0):
    """This rank's training records forever, after the first `skip_records`: epoch after epoch
    (each in its own file order), group of files after group, each group shuffled. A resume
    starts at the group that holds its position (`resume_point`) and reads only the records of
    that group before it."""
    layout = RecordLayout.of_rank(files, rank, num_ranks)
    first_epoch, first_group, skip_in_group = resume_point(layout, seed, skip_records)

    def epoch_records(epoch):
        start = tf.where(epoch == first_epoch, tf.constant(first_group, tf.int64), 0)
        return tf.data.Dataset.range(start, layout.num_groups).flat_map(
            lambda group: _group_records(layout, seed, epoch, group, buffer_size))

    epochs = tf.data.Dataset.range(first_epoch, tf.int64.max)
    return epochs.flat_map(epoch_records).skip(skip_in_group)


class _RecordCounts(dict):
    """path -> records, counted from the file's headers (records.count_records) when first
    needed."""

    def __missing__(self, path):
        self[path] = count_records(path)
        return self[path]


def group_sizes(layout: RecordLayout, seed, epoch, file_records: dict) -> list[int]:
    """The records this rank reads from each group of epoch `epoch`, given the records of
    each file."""
    order = _order_of(layout, seed, epoch)
    return [_group_size(layout, order, group, file_records) for group in range(layout.num_groups)]


def _order_of(layout: RecordLayout, seed, epoch) -> list[str]:
    return [f.decode() for f in _epoch_order(tf.constant(layout.files), seed, epoch).numpy()]


def _group_size(layout: RecordLayout, order, group, file_records) -> int:
    total = sum(file_records[f] for f in order[group * FILES_PER_GROUP:
                                                (group + 1) * FILES_PER_GROUP])
    if layout.shard:
        num_ranks, rank = layout.shard
        total = len(range(rank, total, num_ranks))
    return total


def resume_point(layout: RecordLayout, seed, skip_records) -> tuple[int, int, int]:
    """(epoch, group, records into that group) at which this rank's stream resumes after
    `skip_records`; the files' records are counted from their headers, unread, and within the
    first epoch only those of the groups up to the position (a resume early in the data does
    not read through the rank's whole share)."""
    if not skip_records:
        return 0, 0, 0
    file_records = _RecordCounts()
    order, rest = _order_of(layout, seed, 0), skip_records
    for group in range(layout.num_groups):
        size = _group_size(layout, order, group, file_records)
        if rest < size:
            return 0, group, rest
        rest -= size
    # Past the first epoch: every file is counted by now.
    epoch, rest = 0, skip_records
    total = sum(file_records[f] for f in layout.files)
    if layout.shard is None and total:  # whole files: every epoch reads every record once
        epoch, rest = divmod(rest, total)
    sizes = group_sizes(layout, seed, epoch, file_records)
    while 0 < sum(sizes) <= rest:  # by record: an epoch's share depends on its order
        rest -= sum(sizes)
        epoch += 1
        sizes = group_sizes(layout, seed, epoch, file_records)
    group = 0
    while group < len(sizes) - 1 and rest >= sizes[group]:
        rest -= sizes[group]
        group += 1
    return epoch, group, rest


def pretraining_dataset(input_patterns, batch_size, max_seq_length, max_predictions_per_seq,
                        is_training=True, rank=0, num_ranks=1, seed=12345, dynamic_masking=None,
                        skip_batches=0, batches_per_update=1):
    """Batches of pretraining features, [B,S]/[B,P] int32 (masked_lm_weights float32) and
    next_sentence_labels [B]; drop_remainder=True.

    Training: this rank's share (whole files when there are at least as many files as ranks,
    else every num_ranks-th record), shuffled, repeated forever (`training_records`); the same
    arguments give the same batches in every run. `skip_batches` resumes that sequence after so
    many batches, skipping whole groups of files unread. Eval: one pass, in order. The files
    are read as they are: check them first with records.validate_records.

    `batches_per_update` (the micro-batches of one optimizer update): that many are made ahead,
    while the update before computes, so that an update that takes all its micro-batches
    before its first forward pass (their totals normalise its loss) finds them ready.
    """
    files = expand_patterns(input_patterns)
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    options = tf.data.Options()
    options.deterministic = True
    if is_training:
        # The stream repeats forever, so batch i is always records [i*B, (i+1)*B).
        dataset = training_records(files, rank, num_ranks, seed, max(100, 10 * batch_size),
                                   skip_records=skip_batches * batch_size)
    else:
        dataset = tf.data.TFRecordDataset(files)
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
