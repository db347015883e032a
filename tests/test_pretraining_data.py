"""create_pretraining_data: Google's schema and algorithm statistics on real text, determinism
across worker counts and MPI ranks, and every bad input."""

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import PYTHON, REPO, run_command

from bert_tf.data import pretraining_data as pdata
from bert_tf.data.format_text import format_files
from bert_tf.data.records import FEATURES, feature_spec
from bert_tf.data.tokenization import FullTokenizer, VocabError

SEQ, PRED = 128, 20


@pytest.fixture(scope="module")
def vocab_file(shared_data):
    return str(shared_data / "vocab/bert-base-uncased.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
    return FullTokenizer(vocab_file)


@pytest.fixture(scope="module")
def corpus(shared_data, tmp_path_factory):
    """Three Gutenberg books formatted into 3 shards (~1.4 MB)."""
    directory = tmp_path_factory.mktemp("corpus")
    format_files([shared_data / f"corpora/gutenberg/{name}.txt" for name in
                  ("austen-persuasion", "carroll-alice", "chesterton-brown")], directory,
                 num_shards=3)
    return sorted(directory.glob("part-*.txt"))


@pytest.fixture(scope="module")
def small_corpus(corpus, tmp_path_factory):
    """The first 600 lines of each shard: enough documents for every code path, fast."""
    directory = tmp_path_factory.mktemp("small")
    for path in corpus:
        lines = path.read_text(encoding="utf-8").split("\n")[:600]
        (directory / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sorted(directory.glob("part-*.txt"))


def read_records(paths, seq_length=SEQ, predictions=PRED):
    """All records of the files as numpy arrays; checks the feature names and lengths."""
    records = [r for path in paths for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]
    assert set(tf.train.Example.FromString(records[0]).features.feature) == set(FEATURES)
    parsed = tf.io.parse_example(records, feature_spec(seq_length, predictions))
    return {name: value.numpy() for name, value in parsed.items()}


@pytest.fixture(scope="module")
def gutenberg_run(corpus, vocab_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("records")
    config = pdata.InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=2)
    summary = pdata.create_pretraining_data(",".join(map(str, corpus)),
                                            str(out / "part-{shard}.tfrecord"), vocab_file,
                                            config=config, progress=False)
    return summary, read_records(sorted(out.glob("*.tfrecord"))), out


@pytest.mark.ngc
def test_schema_padding_and_layout(gutenberg_run, tokenizer):
    summary, rows, out = gutenberg_run
    assert sorted(p.name for p in out.iterdir()) == [f"part-{i}.tfrecord" for i in range(3)]
    n = summary["instances"]
    assert n > 4000 and len(rows["input_ids"]) == n
    for name, length in [("input_ids", SEQ), ("input_mask", SEQ), ("segment_ids", SEQ),
                         ("masked_lm_positions", PRED), ("masked_lm_ids", PRED),
                         ("masked_lm_weights", PRED), ("next_sentence_labels", 1)]:
        assert rows[name].shape == (n, length), name
    ids, mask, segments = rows["input_ids"], rows["input_mask"], rows["segment_ids"]
    lengths = mask.sum(1)
    position = np.arange(SEQ)[None, :]
    np.testing.assert_array_equal(mask, (position < lengths[:, None]).astype(int))
    assert (ids[mask == 0] == 0).all() and (segments[mask == 0] == 0).all()
    assert (ids[:, 0] == tokenizer.cls_id).all()
    assert (ids[np.arange(n), lengths - 1] == tokenizer.sep_id).all()
    len_a = (segments == 0).sum(1) - (SEQ - lengths) - 2
    assert (len_a >= 1).all() and (lengths - len_a - 3 >= 1).all()
    assert (ids[np.arange(n), len_a + 1] == tokenizer.sep_id).all()
    assert ((ids == tokenizer.sep_id).sum(1) >= 2).all()
    weights, positions, labels = (rows["masked_lm_weights"], rows["masked_lm_positions"],
                                  rows["masked_lm_ids"])
    valid = weights == 1.0
    assert set(np.unique(weights)) <= {0.0, 1.0}
    assert (positions[~valid] == 0).all() and (labels[~valid] == 0).all()
    # Valid entries first, positions increasing, never [CLS]/[SEP]/padding.
    assert (np.diff(valid.astype(int), axis=1) <= 0).all()
    assert all((np.diff(p[v]) > 0).all() for p, v in zip(positions, valid, strict=True))
    assert (positions[valid] >= 1).all() and (positions[valid] < lengths.repeat(PRED)
                                              .reshape(n, PRED)[valid]).all()
    assert not np.isin(labels[valid], [tokenizer.cls_id, tokenizer.sep_id, 0]).any()
    assert set(np.unique(rows["next_sentence_labels"])) == {0, 1}


def test_statistics_match_google_algorithm(gutenberg_run, tokenizer):
    summary, rows, _ = gutenberg_run
    lengths = rows["input_mask"].sum(1)
    valid = rows["masked_lm_weights"] == 1.0
    num_masked = valid.sum(1)
    # num_to_predict = min(max_predictions, max(1, round(len * 0.15))), exactly.
    expected = np.minimum(PRED, np.maximum(1, np.round(lengths * 0.15)))
    np.testing.assert_array_equal(num_masked, expected)
    assert summary["masked_fraction"] == pytest.approx(num_masked.sum() / lengths.sum())
    # 80% [MASK], 10% random, 10% unchanged.
    n = len(lengths)
    at = rows["input_ids"][np.arange(n)[:, None], rows["masked_lm_positions"]][valid]
    labels = rows["masked_lm_ids"][valid]
    is_mask = at == tokenizer.mask_id
    unchanged = (at == labels) & ~is_mask
    assert is_mask.mean() == pytest.approx(0.8, abs=0.01)
    assert unchanged.mean() == pytest.approx(0.1, abs=0.01)
    assert (~is_mask & ~unchanged).mean() == pytest.approx(0.1, abs=0.01)
    assert summary["masked_as_mask_fraction"] == pytest.approx(0.8, abs=0.01)
    # NSP: 50% random, plus chunks of a single sentence, which are always random-next.
    random_next = rows["next_sentence_labels"][:, 0].mean()
    assert 0.5 <= random_next <= 0.6
    assert summary["nsp_random_fraction"] == pytest.approx(random_next)
    # Sequences mostly fill max_seq_length; short_seq_prob=0.1 of documents (Google draws it per
    # document) target a random shorter length, and documents' ends give the other short ones.
    assert (lengths == SEQ).mean() > 0.6
    assert 0.02 < (lengths < SEQ // 2).mean() < 0.15
    assert summary["documents"] > 50 and summary["truncated_instances"] > 0


def test_whole_word_masking(corpus, vocab_file, tokenizer, tmp_path):
    config = pdata.InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=PRED,
                                  dupe_factor=1, do_whole_word_mask=True)
    pdata.create_pretraining_data(str(corpus[1]), str(tmp_path / "wwm.tfrecord"), vocab_file,
                                  config=config, progress=False)
    rows = read_records([tmp_path / "wwm.tfrecord"])
    is_piece = np.array([t.startswith("##") for t in
                         tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))])
    checked = 0
    for ids, positions, labels, weights, segments in zip(
            rows["input_ids"], rows["masked_lm_positions"], rows["masked_lm_ids"],
            rows["masked_lm_weights"], rows["segment_ids"], strict=True):
        original = ids.copy()
        valid = weights == 1.0
        original[positions[valid]] = labels[valid]
        masked = np.zeros(SEQ, bool)
        masked[positions[valid]] = True
        assert valid.sum() <= max(1, round(original.astype(bool).sum() * 0.15))
        for p in range(2, SEQ):
            if is_piece[original[p]] and segments[p] == segments[p - 1] and \
                    original[p - 1] != tokenizer.sep_id:
                assert masked[p] == masked[p - 1], (p, tokenizer.convert_ids_to_tokens(original))
                checked += masked[p]
    assert checked > 100


def test_deterministic_across_workers_and_mpi_ranks(small_corpus, vocab_file, tmp_path):
    inputs = ",".join(map(str, small_corpus))
    config = pdata.InstanceConfig(dupe_factor=1)
    for workers in (1, 2):
        pdata.create_pretraining_data(inputs, str(tmp_path / f"w{workers}-{{shard}}.tfrecord"),
                                      vocab_file, config=config, num_workers=workers,
                                      progress=False)
    run_command(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", PYTHON,
                 REPO / "create_pretraining_data.py", f"--input_file={inputs}",
                 f"--vocab_file={vocab_file}", "--dupe_factor=1", "--noprogress",
                 f"--output_file={tmp_path}/mpi-{{shard}}.tfrecord"])
    for i in range(3):
        expected = (tmp_path / f"w1-{i}.tfrecord").read_bytes()
        assert len(expected) > 10000
        assert (tmp_path / f"w2-{i}.tfrecord").read_bytes() == expected
        assert (tmp_path / f"mpi-{i}.tfrecord").read_bytes() == expected
    assert not list(tmp_path.glob("*.tmp"))


def test_output_sharding_and_seed(small_corpus, vocab_file, tmp_path):
    config = pdata.InstanceConfig(dupe_factor=1)
    inputs = ",".join(map(str, small_corpus))
    per_input = [tmp_path / f"in{i}.tfrecord" for i in range(3)]
    summary = pdata.create_pretraining_data(inputs, ",".join(map(str, per_input)), vocab_file,
                                            config=config, progress=False)
    # Fewer outputs than inputs: concatenated; more: each input spread round-robin.
    pdata.create_pretraining_data(inputs, str(tmp_path / "one.tfrecord"), vocab_file,
                                  config=config, progress=False)
    outputs = [tmp_path / f"out{i}.tfrecord" for i in range(5)]
    pdata.create_pretraining_data(inputs, ",".join(map(str, outputs)), vocab_file, config=config,
                                  progress=False)
    expected = sorted(map(tuple, read_records(per_input)["input_ids"]))
    assert len(expected) == summary["instances"]
    for paths in [[tmp_path / "one.tfrecord"], outputs]:
        assert sorted(map(tuple, read_records(paths)["input_ids"])) == expected
    assert all(path.stat().st_size > 0 for path in outputs)
    pdata.create_pretraining_data(inputs, str(tmp_path / "seed.tfrecord"), vocab_file,
                                  config=dataclasses.replace(config, random_seed=7),
                                  progress=False)
    assert (tmp_path / "seed.tfrecord").read_bytes() != (tmp_path / "one.tfrecord").read_bytes()


def test_bad_inputs_counted(vocab_file, tmp_path):
    text = tmp_path / "bad.txt"
    long_line = " ".join(["word"] * 300)
    text.write_bytes(b"Fine first sentence.\nSecond one \xff\xfe here.\n\n\x07\x00\n\n"
                     + long_line.encode() + b"\nA short one.\n")
    summary = pdata.create_pretraining_data(
        str(text), str(tmp_path / "bad.tfrecord"), vocab_file, progress=False,
        config=pdata.InstanceConfig(max_seq_length=64, max_predictions_per_seq=10))
    assert summary["replaced_bytes"] == 2
    assert summary["empty_documents"] == 1
    assert summary["long_sentences"] == 1
    assert summary["documents"] == 2 and summary["instances"] > 0
    report = pdata.format_summary(summary)
    for phrase in ("2 undecodable input bytes", "1 document(s) had no tokens",
                   "1 line(s) are longer than max_seq_length-3"):
        assert phrase in report


def test_bad_inputs_rejected(vocab_file, corpus, tmp_path):
    def create(input_file=str(corpus[0]), output=str(tmp_path / "o.tfrecord"), vocab=vocab_file,
               **config):
        pdata.create_pretraining_data(input_file, output, vocab, progress=False,
                                      config=pdata.InstanceConfig(**config))

    with pytest.raises(pdata.PretrainingDataError, match="--input_file: no input files match"):
        create(input_file=str(tmp_path / "missing*.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(pdata.PretrainingDataError, match="empty.txt is empty"):
        create(input_file=str(tmp_path / "empty.txt"))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[SEP]\n[MASK]\nthe\n")
    with pytest.raises(VocabError, match=r"lacks the special token\(s\) \[CLS\]"):
        create(vocab=str(vocab))
    with pytest.raises(pdata.PretrainingDataError, match="--max_predictions_per_seq=200"):
        create(max_seq_length=128, max_predictions_per_seq=200)
    with pytest.raises(pdata.PretrainingDataError, match=r"--masked_lm_prob must be a finite "
                                                         r"number in \(0, 1\), got nan"):
        create(masked_lm_prob=float("nan"))
    (tmp_path / "file").write_text("")
    with pytest.raises(pdata.PretrainingDataError, match="file/x is not writable"):
        create(output=str(tmp_path / "file" / "x" / "y.tfrecord"))
    assert not list(tmp_path.glob("*.tfrecord*"))
    # issue 37: --output_file equal to --input_file replaced the text with records
    text = tmp_path / "text.txt"
    text.write_bytes(corpus[0].read_bytes())
    own_vocab = tmp_path / "own_vocab.txt"
    own_vocab.write_bytes(Path(vocab_file).read_bytes())
    for output, flag in ((text, "--input_file"), (own_vocab, "--vocab_file")):
        with pytest.raises(pdata.PretrainingDataError, match=f"--output_file={output} is also "
                                                             f"{flag}"):
            create(input_file=str(text), output=str(output), vocab=str(own_vocab))
    assert text.read_bytes() == corpus[0].read_bytes()
    assert own_vocab.read_bytes() == Path(vocab_file).read_bytes()


def test_interrupted_run_leaves_no_output(vocab_file, corpus, tmp_path, monkeypatch):
    original = pdata.process_shard

    def fail_on_second_shard(shard_index, *args):
        if shard_index == 1:
            raise KeyboardInterrupt
        return original(shard_index, *args)

    monkeypatch.setattr(pdata, "process_shard", fail_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        pdata.create_pretraining_data(",".join(map(str, corpus)),
                                      str(tmp_path / "part-{shard}.tfrecord"), vocab_file,
                                      config=pdata.InstanceConfig(dupe_factor=1), progress=False)
    assert os.listdir(tmp_path) == []


def test_cli_reports_errors(tmp_path, vocab_file):
    result = run_command([PYTHON, REPO / "create_pretraining_data.py", "--input_file",
                          tmp_path / "none.txt", "--output_file", tmp_path / "o.tfrecord",
                          "--vocab_file", vocab_file], check=False)
    assert result.returncode == 2
    assert "error: --input_file: no input files match" in result.stderr
    assert shutil.which("mpirun")
