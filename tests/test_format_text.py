"""format_text: raw books and dumps -> one sentence per line, blank line between documents."""

import subprocess
import sys

import pytest

from bert_tf.data.format_text import FormatTextError, format_files, join_lines, split_sentences
from bert_tf.data.output_dir import OutputDirLock


def read_documents(directory):
    documents = []
    for path in sorted(directory.glob("part-*.txt")):
        text = path.read_text(encoding="utf-8")
        assert text == "" or text.endswith("\n\n"), path
        documents += [block.split("\n") for block in text.split("\n\n") if block]
    return documents


def test_gutenberg_books_to_chapters(shared_data, tmp_path):
    books = [shared_data / "corpora/gutenberg/carroll-alice.txt",
             shared_data / "corpora/gutenberg/austen-persuasion.txt"]
    stats = format_files(books, tmp_path, num_shards=3, max_document_chars=30000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"part-{i:05d}-of-00003.txt" for i in range(3)]
    documents = read_documents(tmp_path)
    assert len(documents) == stats["documents"]
    assert sum(map(len, documents)) == stats["sentences"]
    # Alice has 12 chapters and Persuasion 24; chapter breaks are runs of blank lines.
    chapter_starts = [d for d in documents if any(s.lower().startswith("chapter") for s in d[:2])]
    assert len(chapter_starts) == 12 + 24
    # Long chapters are cut at paragraph boundaries near max_document_chars.
    assert len(documents) <= 60
    assert all(sum(map(len, d)) <= 30000 for d in documents)
    sentences = [s for d in documents for s in d]
    assert all(s == s.strip() and s for s in sentences)
    assert "Alice was beginning to get very tired of sitting by her sister on the bank, and of " \
           "having nothing to do: once or twice she had peeped into the book her sister was " \
           "reading, but it had no pictures or conversations in it, 'and what is the use of a " \
           "book,' thought Alice 'without pictures or conversation?'" in sentences


def test_japanese_and_korean(shared_data, tmp_path):
    format_files([shared_data / "corpora/ja/debian-reference.ja.txt",
                  shared_data / "corpora/ko/installation-guide.ko.txt"], tmp_path)
    sentences = [s for d in read_documents(tmp_path) for s in d]
    # Hard-wrapped Japanese joins without a space; 。 ends a sentence.
    assert any(s.startswith("本書は非開発者を対象にシェルコマンド例を通してシステム管理の多くの"
                            "局面を説明します。") for s in sentences)
    assert not any("シ ステム" in s for s in sentences)
    assert sum(s.endswith("。") for s in sentences) > 1000
    assert "간단히 설치 절차만 설명한 문서로, 설치할 때 필요한 정보 대부분이 들어 있습니다." in sentences
    # blingfire leaves a closing bracket at the start of the next sentence; it is moved back.
    assert split_sentences("次の文。「引用。」と言った。") == ["次の文。", "「引用。」", "と言った。"]
    assert join_lines(["本書はシ", "ステム", "and", "this"]) == "本書はシステム and this"


def test_lines_format_undecodable_bytes_and_errors(tmp_path, capsys):
    dump = tmp_path / "dump.txt"
    dump.write_bytes("First article. It has two sentences.\n\nSecond \xff article.\n".encode()
                     .replace(b"\xc3\xbf", b"\xff\xfe"))
    stats = format_files([dump], tmp_path / "out", input_format="lines")
    assert stats["replaced_bytes"] == 2
    assert "2 undecodable byte(s)" in capsys.readouterr().err
    assert read_documents(tmp_path / "out") == [
        ["First article.", "It has two sentences."], ["Second \ufffd\ufffd article."]]
    with pytest.raises(FormatTextError, match="--num_shards must be an integer >= 1, got 0"):
        format_files([dump], tmp_path / "out", num_shards=0)
    with pytest.raises(FormatTextError, match="dump.txt/sub"):
        format_files([dump], dump / "sub")
    result = subprocess.run([sys.executable, "-m", "bert_tf", "format_text", "--input_files",
                             str(tmp_path / "nothing*.txt"), "--output_dir", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "--input_files: no input files match" in result.stderr
    assert "nothing*.txt" in result.stderr


def test_its_own_output_is_not_read_and_empty_shards_are_refused(shared_data, tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "alice.txt").write_bytes(
        (shared_data / "corpora/gutenberg/carroll-alice.txt").read_bytes())

    def format_text(*flags):
        return subprocess.run([sys.executable, "-m", "bert_tf", "format_text",
                               f"--input_files={books}/*.txt", f"--output_dir={books}", *flags],
                              capture_output=True, text=True)

    first = format_text("--num_shards=2")
    assert first.returncode == 0, first.stderr
    shards = {p.name: p.read_bytes() for p in books.glob("part-*.txt")}
    second = format_text("--num_shards=2")  # the glob now matches the shards too
    assert second.returncode == 0, second.stderr
    assert "not reading 2 file(s) of its own output" in second.stderr
    assert {p.name: p.read_bytes() for p in books.glob("part-*.txt")} == shards
    assert second.stdout.startswith("1 files ->")

    documents = len(read_documents(books))
    many = format_text(f"--num_shards={documents + 5}")
    assert many.returncode == 2
    assert (f"--num_shards={documents + 5} but the input has only {documents} document(s): 5 "
            "shard(s) would be empty") in many.stderr
    assert not list(books.glob(f"part-*-of-{documents + 5:05d}.txt*"))


def test_a_rerun_replaces_every_shard_and_a_concurrent_run_is_refused(shared_data, tmp_path):
    """Issue 37: a rerun with another --num_shards left the old shards (the documented glob
    then read every document twice); two runs into one directory mixed their text."""
    book = shared_data / "corpora/gutenberg/carroll-alice.txt"
    out = tmp_path / "out"
    format_files([book], out, num_shards=3)
    documents = read_documents(out)
    format_files([book], out, num_shards=2)
    assert sorted(p.name for p in out.iterdir()) == ["part-00000-of-00002.txt",
                                                     "part-00001-of-00002.txt"]
    assert sorted(map(tuple, read_documents(out))) == sorted(map(tuple, documents))
    with OutputDirLock(out), pytest.raises(FormatTextError, match=f"--output_dir={out} is in "
                                                                   "use by another run"):
        format_files([book], out, num_shards=4)
    assert len(list(out.glob("part-*"))) == 2
