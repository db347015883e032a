"""build_vocab: a WordPiece vocab for a new language (Japanese) and Google's special layout."""

import bz2
import dataclasses
import gzip
import subprocess
import sys

import pytest

from bert_tf.data.build_vocab import (
    BuildVocabConfig,
    BuildVocabError,
    build_vocab,
    run,
    write_vocab,
)
from bert_tf.data.format_text import format_files
from bert_tf.data.tokenization import FullTokenizer


def test_japanese_vocab(shared_data, tmp_path):
    format_files([shared_data / "corpora/ja/debian-reference.ja.txt"], tmp_path / "ja",
                 num_shards=2)
    train, held_out = sorted((tmp_path / "ja").glob("part-*.txt"))
    vocab = build_vocab([train], vocab_size=3000, do_lower_case=False, max_unique_chars=3000)
    assert len(vocab) == 3000 and len(set(vocab)) == 3000
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert any(len(t) > 2 and all("\u30a0" <= c <= "\u30ff" for c in t) for t in vocab)  # katakana
    write_vocab(vocab, tmp_path / "vocab.txt")
    tokenizer = FullTokenizer(tmp_path / "vocab.txt", do_lower_case=False)
    lines = [line for line in held_out.read_text(encoding="utf-8").split("\n") if line]
    ids, row_splits = tokenizer.tokenize_ids_batch(lines)
    unknown = (ids == tokenizer.unk_id).mean()
    assert unknown < 0.005, unknown
    # Pieces, not characters: fewer tokens than non-space characters.
    assert len(ids) < 0.8 * sum(len(line.replace(" ", "")) for line in lines)
    assert tokenizer.tokenize("パッケージをインストールします。")[-1] == "。"


def test_google_layout_uncased_and_errors(shared_data, tmp_path):
    book = shared_data / "corpora/gutenberg/carroll-alice.txt"
    vocab = build_vocab([book], vocab_size=2000, do_lower_case=True, num_unused_tokens=994)
    assert vocab[0] == "[PAD]" and vocab[1] == "[unused0]" and vocab[99] == "[unused98]"
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert vocab[104] == "[unused99]" and vocab[998] == "[unused993]"
    assert "the" in vocab and "The" not in vocab
    with pytest.raises(BuildVocabError, match="--vocab_size=50"):
        build_vocab([book], vocab_size=50, num_unused_tokens=40)
    # issue 37: 76 tokens written for --vocab_size=50 (the alphabet alone is larger)
    with pytest.raises(BuildVocabError, match=r"--vocab_size=50 is smaller than the input's "
                                              r"alphabet: .* already \d+ tokens"):
        build_vocab([book], vocab_size=50)
    # issue 37: an OverflowError from the trainer
    with pytest.raises(BuildVocabError, match="--min_count must be an integer >= 0, got -3"):
        build_vocab([book], vocab_size=1000, min_count=-3)
    result = subprocess.run([sys.executable, "-m", "bert_tf", "build_vocab", "--input_files",
                             str(tmp_path / "none*.txt"), "--vocab_file", str(tmp_path / "v.txt")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and not (tmp_path / "v.txt").exists()
    assert "--input_files: no input files match" in result.stderr and "none*.txt" in result.stderr


def test_the_same_vocab_every_run(shared_data):
    """The trainer's own WordPiece mode gave another vocab (and size) in every process."""
    script = ("from bert_tf.data.build_vocab import build_vocab; print('\\n'.join(build_vocab("
              f"[{str(shared_data / 'corpora/gutenberg/carroll-alice.txt')!r}], 5000)))")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True).stdout for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    vocab = runs[0].split("\n")
    assert "alice" in vocab and "##ing" in vocab and len(vocab) > 2500


@pytest.mark.parametrize("suffix, compress", [(".bz2", bz2.compress), (".gz", gzip.compress)])
def test_compressed_input_is_read_as_its_text(shared_data, tmp_path, suffix, compress):
    book = shared_data / "corpora/gutenberg/carroll-alice.txt"
    packed = tmp_path / f"alice.txt{suffix}"
    packed.write_bytes(compress(book.read_bytes()))
    assert build_vocab([packed], vocab_size=1000) == build_vocab([book], vocab_size=1000)


def test_a_vocab_file_matched_by_the_input_glob_is_not_learned_from(shared_data, tmp_path):
    """Issue 37: a rerun whose --input_files glob matched its own --vocab_file trained on the
    old vocab as if it were text."""
    text = tmp_path / "alice.txt"
    text.write_bytes((shared_data / "corpora/gutenberg/carroll-alice.txt").read_bytes())
    (tmp_path / "vocab.txt").write_text("".join(f"zzqx{i}\n" for i in range(3000)))
    config = BuildVocabConfig(input_files=str(tmp_path / "*.txt"),
                              vocab_file=str(tmp_path / "vocab.txt"), vocab_size=1000)
    assert run(config) == 0
    assert not any(token.startswith("zzq") for token in
                   (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n"))
    # An unwritable --vocab_file was found only after the learning.
    unwritable = dataclasses.replace(config, vocab_file="/sys/kernel/bert_tf/vocab.txt")
    with pytest.raises(BuildVocabError, match="--vocab_file=/sys/kernel/bert_tf is not writable "
                                              r"\(/sys/kernel: .*\(the directory of "):
        run(unwritable)
