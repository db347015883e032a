"""input_pipeline: fixed-shape batches, rank sharding, determinism, shape errors, and dynamic
masking statistics, over records written by create_pretraining_data."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import PYTHON, REPO, run_command

from bert_tf.data import input_pipeline as ip
from bert_tf.data import pretraining_data as pdata
from bert_tf.data.files import InputDataError, expand_patterns
from bert_tf.data.records import serialize_examples, validate_records
from bert_tf.data.tokenization import FullTokenizer

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

SEQ, PRED, BATCH = 64, 10, 8


def write_records(path, first_id, count, seq_length=SEQ, predictions=PRED, masked=()):
    """Records whose input_ids[1] numbers them, so tests can tell them apart; those of index in
    `masked` have one masked position (1), the others none."""
    input_ids = np.zeros([count, seq_length], np.int64)
    input_ids[:, 0], input_ids[:, 1], input_ids[:, 2] = 101, np.arange(first_id, first_id + count), 102
    zeros = np.zeros([count, predictions], np.int64)
    weights = zeros.astype(np.float32)
    weights[list(masked), 0] = 1.0
    records = serialize_examples({
        "input_ids": input_ids, "input_mask": (input_ids > 0).astype(np.int64),
        "segment_ids": np.zeros_like(input_ids), "masked_lm_positions": (weights > 0) * 1,
        "masked_lm_ids": zeros, "masked_lm_weights": weights,
        "next_sentence_labels": np.ones([count, 1], np.int64)})
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


def record_numbers(dataset, num_batches):
    return [int(i) for batch in dataset.take(num_batches) for i in batch["input_ids"][:, 1]]


@pytest.fixture(scope="module")
def four_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    for k in range(4):
        write_records(directory / f"part-{k}.tfrecord", 1000 * (k + 1), 40)
    return directory


def test_shapes_types_and_eval_order(four_files):
    dataset = ip.pretraining_dataset(str(four_files / "part-*.tfrecord"), BATCH, SEQ, PRED,
                                     is_training=False)
    batches = list(dataset)
    assert len(batches) == 4 * 40 // BATCH
    batch = batches[0]
    for name, shape, dtype in [("input_ids", [BATCH, SEQ], tf.int32),
                               ("input_mask", [BATCH, SEQ], tf.int32),
                               ("segment_ids", [BATCH, SEQ], tf.int32),
                               ("masked_lm_positions", [BATCH, PRED], tf.int32),
                               ("masked_lm_ids", [BATCH, PRED], tf.int32),
                               ("masked_lm_weights", [BATCH, PRED], tf.float32),
                               ("next_sentence_labels", [BATCH], tf.int32)]:
        assert batch[name].shape == shape and batch[name].dtype == dtype, name
    numbers = [int(i) for b in batches for i in b["input_ids"][:, 1]]
    assert numbers == [1000 * (k + 1) + i for k in range(4) for i in range(40)]


def test_training_shards_by_file_and_by_record_and_is_deterministic(four_files):
    pattern = str(four_files / "part-*.tfrecord")
    by_file = [set(record_numbers(ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, rank=r,
                                                         num_ranks=2), 40)) for r in range(2)]
    assert not by_file[0] & by_file[1]
    assert {n // 1000 for n in by_file[0]} == {1, 3} and {n // 1000 for n in by_file[1]} == {2, 4}
    one_file = str(four_files / "part-0.tfrecord")
    by_record = [set(record_numbers(ip.pretraining_dataset(one_file, BATCH, SEQ, PRED, rank=r,
                                                           num_ranks=2), 10)) for r in range(2)]
    assert not by_record[0] & by_record[1] and by_record[0] | by_record[1] == set(
        range(1000, 1040))
    first = record_numbers(ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, seed=3), 30)
    assert first == record_numbers(ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, seed=3), 30)
    assert first != record_numbers(ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, seed=4), 30)
    assert first[:40] != sorted(first[:40])  # shuffled
    # Resume: skip_batches=n continues the same sequence.
    resumed = ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, seed=3, skip_batches=10)
    assert record_numbers(resumed, 20) == first[10 * BATCH:]


def test_shape_mismatch_and_missing_files(four_files, tmp_path):
    write_records(tmp_path / "long.tfrecord", 0, 4, seq_length=128)
    with pytest.raises(InputDataError, match=r"long\.tfrecord: feature 'input_ids' has length "
                                             r"128, expected 64"):
        validate_records([str(tmp_path / "long.tfrecord")], SEQ, PRED)
    with pytest.raises(InputDataError, match="'masked_lm_positions' has length 10, expected 20"):
        validate_records([str(four_files / "part-0.tfrecord")], SEQ, 20)
    with pytest.raises(InputDataError, match="no input files match .*nothing-"):
        expand_patterns(str(tmp_path / "nothing-*.tfrecord"))
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    with pytest.raises(InputDataError, match="--eval_files: all 1 file.* are empty"):
        validate_records([str(tmp_path / "empty.tfrecord")], SEQ, PRED, flag="eval_files")


def test_masked_or_not_is_judged_by_every_checked_record(tmp_path):
    # Static whole-word masking may leave a record without a masked position; the file is
    # still masked data (the check used to judge it by its first such record).
    write_records(tmp_path / "some.tfrecord", 0, 20, masked=range(1, 20, 3))
    write_records(tmp_path / "none.tfrecord", 0, 20)
    assert validate_records([str(tmp_path / "some.tfrecord")], SEQ, PRED, masked=True)
    with pytest.raises(InputDataError, match=r"none\.tfrecord holds unmasked records \(none of "
                                             "its first 16 has a masked position"):
        validate_records([str(tmp_path / "none.tfrecord")], SEQ, PRED, masked=True)
    with pytest.raises(InputDataError, match=r"some\.tfrecord holds masked records, but "
                                             "--dynamic_masking"):
        validate_records([str(tmp_path / "some.tfrecord")], SEQ, PRED, masked=False)


def test_dynamic_masking_statistics(shared_data, tmp_path):
    vocab_file = str(shared_data / "vocab/bert-base-uncased.txt")
    tokenizer = FullTokenizer(vocab_file)
    pdata.create_pretraining_data(
        str(shared_data / "corpora/gutenberg/carroll-alice.txt"), str(tmp_path / "u.tfrecord"),
        vocab_file, progress=False, config=pdata.InstanceConfig(
            max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=1,
            dynamic_masking=True))
    unmasked = ip.pretraining_dataset(str(tmp_path / "u.tfrecord"), 64, SEQ, PRED,
                                      is_training=False)
    assert all((b["masked_lm_weights"].numpy() == 0).all() for b in unmasked.take(3))
    masking = ip.DynamicMasking.from_tokenizer(tokenizer)
    dataset = ip.pretraining_dataset(str(tmp_path / "u.tfrecord"), 64, SEQ, PRED,
                                     dynamic_masking=masking, seed=5)
    num_records = sum(1 for _ in tf.data.TFRecordDataset(str(tmp_path / "u.tfrecord")))
    kinds = np.zeros(3)
    masked_total = tokens_total = records_seen = 0
    masks_by_record = {}
    for batch in dataset.take(2 * num_records // 64):
        ids = batch["input_ids"].numpy()
        positions, labels = batch["masked_lm_positions"].numpy(), batch["masked_lm_ids"].numpy()
        valid = batch["masked_lm_weights"].numpy() == 1.0
        lengths = batch["input_mask"].numpy().sum(1)
        np.testing.assert_array_equal(valid.sum(1),
                                      np.minimum(PRED, np.maximum(1, np.round(lengths * 0.15))))
        assert not np.isin(labels[valid], [tokenizer.cls_id, tokenizer.sep_id, 0]).any()
        assert (positions[~valid] == 0).all()
        at = ids[np.arange(len(ids))[:, None], positions][valid]
        kinds += [(at == tokenizer.mask_id).sum(),
                  ((at == labels[valid]) & (at != tokenizer.mask_id)).sum(),
                  ((at != labels[valid]) & (at != tokenizer.mask_id)).sum()]
        masked_total += valid.sum()
        tokens_total += lengths.sum()
        for row in range(len(ids)):
            original = ids[row].copy()
            original[positions[row][valid[row]]] = labels[row][valid[row]]
            masks_by_record.setdefault(original.tobytes(), set()).add(positions[row].tobytes())
            records_seen += 1
    assert kinds / kinds.sum() == pytest.approx([0.8, 0.1, 0.1], abs=0.025)
    assert masked_total / tokens_total == pytest.approx(0.15, abs=0.01)
    # Deterministic per seed (a new pipeline gives the same batches); a new mask for the same
    # record each epoch.
    first, again = (ip.pretraining_dataset(str(tmp_path / "u.tfrecord"), 64, SEQ, PRED,
                                           dynamic_masking=masking, seed=5) for _ in range(2))
    for a, b in zip(first.take(3), again.take(3), strict=True):
        np.testing.assert_array_equal(a["masked_lm_positions"], b["masked_lm_positions"])
    # A resumed pipeline gives the batches, masks included, that an uninterrupted one gives
    # (each a new pipeline: a second pass over one dataset object reshuffles).
    uninterrupted, resumed = (
        ip.pretraining_dataset(str(tmp_path / "u.tfrecord"), 64, SEQ, PRED,
                               dynamic_masking=masking, seed=5, skip_batches=skip)
        for skip in (0, 2))
    for a, b in zip(uninterrupted.skip(2).take(2), resumed.take(2), strict=True):
        for name in ("input_ids", "masked_lm_positions", "masked_lm_ids"):
            np.testing.assert_array_equal(a[name], b[name])
    # Records recur across epochs with fresh masks.
    assert records_seen > 1.5 * num_records
    assert sum(len(masks) > 1 for masks in masks_by_record.values()) > num_records // 2


@pytest.mark.parametrize("flags", [["--do_whole_word_mask"], ["--masked_lm_prob=0.2"]])
def test_dynamic_masking_refuses_masking_flags_it_cannot_honour(shared_data, tmp_path, flags):
    # DynamicMasking masks single WordPieces at 0.15: these flags would be silently lost.
    output = tmp_path / "u.tfrecord"
    result = run_command([PYTHON, REPO / "create_pretraining_data.py", "--input_file",
                          shared_data / "corpora/gutenberg/blake-poems.txt", "--output_file",
                          output, "--vocab_file", shared_data / "vocab/bert-base-uncased.txt",
                          "--dynamic_masking", "--noprogress", *flags], check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error: --dynamic_masking writes unmasked records" in result.stderr
    assert flags[0].split("=")[0] + "=" in result.stderr
    assert not output.exists()


def test_resume_skips_whole_groups_of_files_unread(tmp_path):
    # 11 files of 15..25 records: groups of 8 and 3 files per epoch. A resume lands in the group
    # that holds its position and reads only that group's records before it; the stream is
    # the uninterrupted one's, across groups and epochs, by file and by record.
    for k in range(11):
        write_records(tmp_path / f"part-{k:02}.tfrecord", 1000 * (k + 1), 15 + k)
    pattern = str(tmp_path / "part-*.tfrecord")
    files = expand_patterns(pattern)
    per_epoch = sum(range(15, 26))
    for rank, num_ranks in ((0, 1), (1, 12)):  # 12 ranks > 11 files: by record
        full = record_numbers(ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, rank=rank,
                                                     num_ranks=num_ranks, seed=3), 120)
        layout = ip.RecordLayout.of_rank(files, rank, num_ranks)
        for skip_batches in (1, 30, 70):
            epoch, group, skip_in_group = ip.resume_point(layout, 3, skip_batches * BATCH)
            sizes = ip.group_sizes(layout, 3, epoch, {f: 15 + k for k, f in enumerate(files)})
            assert skip_in_group < sizes[group]
            resumed = ip.pretraining_dataset(pattern, BATCH, SEQ, PRED, rank=rank,
                                             num_ranks=num_ranks, seed=3,
                                             skip_batches=skip_batches)
            assert record_numbers(resumed, 10) == full[skip_batches * BATCH:][:10 * BATCH]
        if num_ranks == 1:
            assert ip.resume_point(layout, 3, 70 * BATCH)[0] == 70 * BATCH // per_epoch == 2


def _bytes_read(action) -> int:
    """Bytes this process read (read system calls of all its threads, /proc/self/io rchar)
    while `action()` ran."""
    def rchar():
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])

    before = rchar()
    action()
    return rchar() - before


def test_start_up_reads_per_rank_do_not_grow_with_the_number_of_files(tmp_path):
    # Every rank used to check every input file (64 ranks x 1,472 files of phase 1: ~100 GiB
    # at each start), and a resume counted the records of the rank's whole share.
    from types import SimpleNamespace

    from bert_tf.train.run_setup import check_share

    for k in range(32):
        write_records(tmp_path / f"part-{k:02}.tfrecord", 1000 * k, 200)
    files = expand_patterns(str(tmp_path / "part-*.tfrecord"))
    config = SimpleNamespace(max_seq_length=SEQ, max_predictions_per_seq=PRED,
                             dynamic_masking=True)
    bert_config = SimpleNamespace(vocab_size=30522)

    def checked(num_files, num_ranks):
        return _bytes_read(lambda: check_share(files[:num_files], 0, num_ranks, config,
                                               "input_files", bert_config))

    checked(8, 2)  # first use: TensorFlow's lazy loading reads too
    assert checked(32, 8) <= 1.2 * checked(8, 2)  # the same share of 4 files
    assert checked(32, 1) > 3 * checked(8, 2)
    # A resume early in the data counts the records of the groups up to its position only.

    def resumed(num_files):
        layout = ip.RecordLayout.of_rank(files[:num_files], 0, 1)
        return _bytes_read(lambda: ip.resume_point(layout, 3, 10))

    resumed(8)
    assert resumed(32) <= 1.2 * resumed(8)
