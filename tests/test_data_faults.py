"""Faults of data jobs (issue 19 items 4 and 8): an interrupted create_pretraining_data.py
stops its workers and removes its temporary files; compressed input is read transparently and
binary input is refused, naming the file and the share."""

import bz2
import codecs
import gzip
import lzma
import os
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest
from conftest import PYTHON, REPO, run_command

from bert_tf.data import pretraining_data as pdata
from bert_tf.data import records
from bert_tf.data.files import InputDataError, decode_text, read_text
from bert_tf.data.format_text import FormatTextError, format_files


@pytest.fixture(scope="module")
def vocab(shared_data):
    return shared_data / "vocab/bert-base-uncased.txt"


@pytest.fixture(scope="module")
def books(shared_data, tmp_path_factory):
    """Two Gutenberg books as sentence-per-line shards (~1 MB, several seconds each to encode)."""
    directory = tmp_path_factory.mktemp("books")
    format_files([shared_data / "corpora/gutenberg/austen-persuasion.txt",
                  shared_data / "corpora/gutenberg/chesterton-brown.txt"], directory, num_shards=2)
    return sorted(directory.glob("part-*.txt"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_workers_and_removes_temporaries(books, vocab, tmp_path, signum):
    out = tmp_path / "records"
    process = subprocess.Popen(
        [PYTHON, REPO / "create_pretraining_data.py", f"--input_file={books[0]},{books[1]}",
         f"--output_file={out}/part-{{shard}}.tfrecord", f"--vocab_file={vocab}",
         "--num_workers=2", "--dupe_factor=20", "--noprogress"],
        cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stderr=subprocess.PIPE,
        text=True)
    workers = _wait_for_workers(process, out)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum
    assert f"interrupted by {signal.Signals(signum).name}" in stderr
    assert "temporary files removed" in stderr
    assert_gone(workers)
    assert os.listdir(out) == []


def _wait_for_workers(process, out, timeout=300):
    """The worker processes, once they are writing their parts."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process.poll() is None, process.communicate()[1]
        if out.is_dir() and len([p for p in os.listdir(out) if p.endswith(".tmp")]) == 2:
            return psutil.Process(process.pid).children(recursive=True)
        time.sleep(0.05)
    raise AssertionError("the workers did not start writing")


def assert_gone(processes, timeout=30):
    """The processes (psutil) end within `timeout` seconds: they do not outlive their parent."""
    deadline = time.time() + timeout
    alive = processes
    while alive and time.time() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    assert not alive, f"workers {alive} outlived their parent"


def test_sigkill_of_parent_kills_workers(books, vocab, tmp_path):
    out = tmp_path / "records"
    process = subprocess.Popen(
        [PYTHON, REPO / "create_pretraining_data.py", f"--input_file={books[0]},{books[1]}",
         f"--output_file={out}/part-{{shard}}.tfrecord", f"--vocab_file={vocab}",
         "--num_workers=2", "--dupe_factor=20", "--noprogress"],
        cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), stderr=subprocess.DEVNULL)
    workers = _wait_for_workers(process, out)
    process.kill()
    process.wait()
    assert_gone(workers)
    # What the killed parent could not remove: parts that the next run overwrites.
    assert all(name.endswith(".tmp") for name in os.listdir(out))


def test_compressed_input_is_read_transparently(books, vocab, tmp_path):
    plain = books[0].read_bytes()[:60000]
    (tmp_path / "plain.txt").write_bytes(plain)
    names = ["plain.txt"]
    for suffix, compress in ((".bz2", bz2.compress), (".gz", gzip.compress),
                             (".xz", lzma.compress)):
        names.append(f"packed.txt{suffix}")
        (tmp_path / names[-1]).write_bytes(compress(plain))
    config = pdata.InstanceConfig(dupe_factor=1)
    for name in names:
        pdata.create_pretraining_data(str(tmp_path / name), f"{tmp_path / name}.rec", str(vocab),
                                      config=config, progress=False)
        stats = format_files([tmp_path / name], tmp_path / f"{name}.formatted")
        assert stats["sentences"] > 100 and stats["replaced_bytes"] == 0
    expected = (tmp_path / "plain.txt.rec").read_bytes()
    expected_text = (tmp_path / "plain.txt.formatted/part-00000-of-00001.txt").read_bytes()
    assert len(expected) > 10000
    for name in names[1:]:
        assert (tmp_path / f"{name}.rec").read_bytes() == expected, name
        assert (tmp_path / f"{name}.formatted/part-00000-of-00001.txt").read_bytes() == \
            expected_text


def test_binary_input_is_refused(books, vocab, tmp_path):
    # Compressed bytes under a name that does not say so: what users passed before.
    binary = tmp_path / "corpus.txt"
    binary.write_bytes(bz2.compress(books[0].read_bytes()[:100000]))
    result = run_command([PYTHON, REPO / "create_pretraining_data.py", f"--input_file={binary}",
                          f"--output_file={tmp_path}/out.tfrecord", f"--vocab_file={vocab}",
                          "--noprogress"], check=False)
    assert result.returncode == 2
    assert f"input file {binary} is not text: " in result.stderr
    assert "% of its bytes are not UTF-8" in result.stderr
    assert not list(tmp_path.glob("out.tfrecord*"))
    with pytest.raises(FormatTextError, match=f"{binary} is not text: [0-9.]+% of its bytes"):
        format_files([binary], tmp_path / "formatted")
    assert not list((tmp_path / "formatted").glob("*"))


def test_decode_text_rules():
    assert decode_text("Grüße\n".encode("utf-16"), "x") == ("Grüße\n", 0)
    assert decode_text(b"\xef\xbb\xbfhello", "x") == ("hello", 0)
    assert decode_text(b"a stray \xff byte" * 10, "x")[1] == 10  # a few: replaced and counted
    with pytest.raises(InputDataError, match=r"input file y is not text: 10\.0% of its bytes"):
        decode_text(b"ten bytes\xff" * 100, "y")
    # issue 37: NUL is valid UTF-8, so UTF-16 without a BOM came out with NULs in every word
    with pytest.raises(InputDataError, match=r"input file z is not text: 10 of its 20 bytes are "
                                             r"NUL \(UTF-16 without a byte-order mark"):
        decode_text("Grüße\nfrom".encode("utf-16-le"), "z")


def test_damaged_gzip_is_named_by_every_command_that_reads_text(books, tmp_path):
    """Issue 37: zlib.error in five commands (format_text, build_vocab, create_pretraining_data,
    analyze_attention, probe_syntax's CoNLL-U), all through files.read_bytes."""
    packed = bytearray(gzip.compress(books[0].read_bytes()[:60000]))
    packed[10:30] = b"\xff" * 20  # the first deflate block: "invalid block type"
    damaged = tmp_path / "books.txt.gz"
    damaged.write_bytes(bytes(packed))
    with pytest.raises(InputDataError, match=f"input file {damaged} is corrupt or truncated"):
        read_text(damaged)
    with pytest.raises(FormatTextError, match=f"input file {damaged} is corrupt or truncated"):
        format_files([damaged], tmp_path / "formatted")
    assert not list((tmp_path / "formatted").glob("*"))


# ------------------------------------------------------------------ truncated records


def _records_file(path, count):
    """`count` records of 1 to 3000 random bytes; returns the byte offset of each."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    starts, offset = [], 0
    with tf.io.TFRecordWriter(str(path)) as writer:
        for size in rng.integers(1, 3000, count):
            writer.write(rng.bytes(int(size)))
            starts.append(offset)
            offset += 16 + int(size)
    return starts


def test_records_cut_anywhere_are_found_with_the_offset_of_the_cut_record(tmp_path):
    whole = tmp_path / "whole.tfrecord"
    starts = _records_file(whole, 2000)  # about 3 MB: more than the tail the check reads
    data = whole.read_bytes()
    assert len(data) > 2 * records.TAIL_BYTES
    assert records.truncated_at(str(whole)) is None
    cut = tmp_path / "cut.tfrecord"
    for length, expected in [(len(data) - 1, starts[-1]), (starts[-1] + 5, starts[-1]),
                             (starts[-1], None), (starts[-700] + 100, starts[-700]),
                             (starts[3] + 1, starts[3])]:
        cut.write_bytes(data[:length])
        assert records.truncated_at(str(cut)) == expected, length


class _CountingFile:
    def __init__(self, f, reads):
        self.f, self.reads = f, reads

    def read(self, size):
        self.reads.append(size)
        return self.f.read(size)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.f.close()


def test_a_whole_records_file_is_checked_by_one_read_of_its_tail(tmp_path, monkeypatch):
    path = tmp_path / "whole.tfrecord"
    _records_file(path, 2000)
    reads = []
    monkeypatch.setattr(records, "open", lambda *args: _CountingFile(open(*args), reads),
                        raising=False)
    assert records.truncated_at(str(path)) is None
    assert reads == [records.TAIL_BYTES]


def test_conllu_and_vocab_with_a_byte_order_mark_or_undecodable_bytes(shared_data, tmp_path):
    from bert_tf.analysis.analyze_attention import read_documents
    from bert_tf.data import conllu
    from bert_tf.data.tokenization import load_vocab

    ud = (shared_data / "ud/en_ewt-ud-test.conllu").read_bytes()[:20_000].rsplit(b"\n\n", 1)[0]
    plain = conllu.read_conllu(_write(tmp_path / "plain.conllu", ud + b"\n\n"))
    for name, data in [("bom.conllu", codecs.BOM_UTF8 + ud + b"\n\n"),
                       ("packed.conllu.bz2", bz2.compress(ud + b"\n\n"))]:
        assert conllu.read_conllu(_write(tmp_path / name, data)) == plain
    lines = ud.split(b"\n")
    lines[7] = lines[7].replace(b"\t", b"\xe9\t", 1)  # a Latin-1 byte in a word
    with pytest.raises(conllu.ConlluError, match=r"bad\.conllu:8: not UTF-8 \(1 undecodable "):
        conllu.read_conllu(_write(tmp_path / "bad.conllu", b"\n".join(lines)))

    vocab = shared_data / "vocab/bert-base-uncased.txt"
    with_bom = _write(tmp_path / "vocab.txt", codecs.BOM_UTF8 + vocab.read_bytes())
    assert load_vocab(with_bom) == load_vocab(vocab)

    text = b"First sentence here.\nSecond one.\n\nAnother document.\n"
    assert list(read_documents(_write(tmp_path / "docs.txt.bz2", bz2.compress(text)))) == [
        ["First sentence here.", "Second one."], ["Another document."]]


def _write(path, data):
    path.write_bytes(data)
    return path
