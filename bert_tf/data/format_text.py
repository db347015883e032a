"""Raw text -> pretraining input: one sentence per line, a blank line between documents, N shards.

Input formats:
- paragraphs (hard-wrapped books such as Project Gutenberg texts): a paragraph is a run of
  non-blank lines, joined with a space (with nothing between two CJK/kana characters, since
  Japanese and Chinese do not separate words). A document is a section: the paragraphs up to the
  next run of two or more blank lines (how Gutenberg books set off chapters), cut at a paragraph
  boundary once longer than --max_document_chars; a section shorter than --min_document_chars
  (a lone chapter heading, say) is merged into the next one.
- lines (one article per line, e.g. WikiExtractor output flattened): each line is a document.

Sentences are split by blingfire (its model ships with the package; it handles 。！？ too).
Documents are dealt round-robin to the shards, so every shard mixes all input files and
create_pretraining_data.py finds "random next" segments from other books in each shard.
"""

import contextlib
import dataclasses
import os
import re
import sys

import blingfire
from absl import flags

import bert_tf
from bert_tf.data.files import (
    InputDataError,
    OutputDirError,
    expand_patterns,
    read_text,
    warn_replaced,
)
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import OutputDirLock, check_output_dir, replace_files_in

# The output shards' names: part-00000-of-00003.txt ... (and their .tmp names before issue 37)
_SHARD_NAME = re.compile(r"part-\d{5}-of-\d{5}\.txt")
_SHARD_GLOBS = ("part-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].txt",
                "part-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].txt.tmp")
# Characters between which a line break is not a word break (CJK ideographs, kana, CJK
# punctuation and full-width forms).
_NO_SPACE_RANGES = ((0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
                    (0xFF00, 0xFFEF), (0x20000, 0x2FA1F))
# Closing brackets/quotes that blingfire leaves at the start of the next sentence (「…。」).
_CLOSERS = "」』）】〉》〕］｝)]”’"


class FormatTextError(ValueError):
    pass


def _no_space(char):
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in _NO_SPACE_RANGES)


def join_lines(lines):
    """A hard-wrapped paragraph -> one line."""
    text = ""
    for line in lines:
        line = line.strip()
        if text and line and not (_no_space(text[-1]) and _no_space(line[0])):
            text += " "
        text += line
    return text


def split_sentences(text):
    sentences = []
    for sentence in blingfire.text_to_sentences(text).split("\n"):
        sentence = sentence.strip()
        if not sentence:
            continue
        closers = len(sentence) - len(sentence.lstrip(_CLOSERS))
        if closers and sentences:
            sentences[-1] += sentence[:closers]
            sentence = sentence[closers:].strip()
        if sentence:
            sentences.append(sentence)
    return sentences


def read_counted_text(path, stats):
    """Decodes UTF-8 (or UTF-16 with a byte-order mark; .gz/.bz2/.xz read transparently),
    replacing (and counting) a few undecodable bytes; mostly undecodable input is refused."""
    try:
        text, replaced = read_text(path)
    except InputDataError as e:
        raise FormatTextError(str(e)) from e
    if replaced:
        stats["replaced_bytes"] += replaced
        warn_replaced("format_text", path, replaced)
    return text


def paragraph_documents(text, max_document_chars, min_document_chars):
    """Yields documents (lists of paragraphs) of a hard-wrapped text."""
    document, document_chars = [], 0
    paragraph, blank_run = [], 0
    for line in [*text.split("\n"), "", ""]:
        if line.strip():
            if blank_run >= 2 and document and document_chars >= min_document_chars:
                yield document
                document, document_chars = [], 0
            blank_run = 0
            paragraph.append(line)
            continue
        blank_run += 1
        if paragraph:
            joined = join_lines(paragraph)
            paragraph = []
            if document and document_chars + len(joined) > max_document_chars:
                yield document
                document, document_chars = [], 0
            document.append(joined)
            document_chars += len(joined)
    if document:
        yield document


def line_documents(text):
    for line in text.split("\n"):
        if line.strip():
            yield [line.strip()]


def format_files(input_files, output_dir, num_shards=1, input_format="paragraphs",
                 max_document_chars=20000, min_document_chars=200):
    """Writes output_dir/part-XXXXX-of-NNNNN.txt; returns statistics. The shards appear
    together when all are written, an earlier run's shards (of any --num_shards) are then
    removed, and a second run into the same directory at the same time is refused."""
    check_number("num_shards", num_shards, at_least=1, integer=True, error=FormatTextError)
    try:
        check_output_dir(output_dir, "output_dir", create=True)
        with OutputDirLock(output_dir), replace_files_in(output_dir, _SHARD_GLOBS) as staging:
            return _write_shards(input_files, staging, num_shards, input_format,
                                 max_document_chars, min_document_chars)
    except OutputDirError as e:
        raise FormatTextError(str(e)) from e


def _write_shards(input_files, directory, num_shards, input_format, max_document_chars,
                  min_document_chars):
    stats = {"files": 0, "documents": 0, "sentences": 0, "replaced_bytes": 0}
    names = [os.path.join(directory, f"part-{i:05d}-of-{num_shards:05d}.txt")
             for i in range(num_shards)]
    with contextlib.ExitStack() as stack:
        outputs = [stack.enter_context(open(name, "w", encoding="utf-8")) for name in names]
        for path in input_files:
            text = read_counted_text(path, stats)
            stats["files"] += 1
            documents = (line_documents(text) if input_format == "lines" else
                         paragraph_documents(text, max_document_chars, min_document_chars))
            for paragraphs in documents:
                sentences = [s for p in paragraphs for s in split_sentences(p)]
                if not sentences:
                    continue
                out = outputs[stats["documents"] % num_shards]
                out.write("\n".join(sentences) + "\n\n")
                stats["documents"] += 1
                stats["sentences"] += len(sentences)
    if 0 < stats["documents"] < num_shards:
        raise FormatTextError(
            f"--num_shards={num_shards} but the input has only {stats['documents']} "
            f"document(s): {num_shards - stats['documents']} shard(s) would be empty (and "
            "create_pretraining_data refuses empty files); use --num_shards="
            f"{stats['documents']} or fewer")
    if not stats["documents"]:
        print("format_text: warning: the input has no text; the shards are empty",
              file=sys.stderr)
    return stats


@dataclasses.dataclass
class FormatTextConfig:
    input_files: str  # comma-separated files or globs
    output_dir: str
    num_shards: int = 1
    input_format: str = "paragraphs"  # or "lines"
    max_document_chars: int = 20000
    min_document_chars: int = 200


def define_flags():
    """Defines the flags (defaults from FormatTextConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(FormatTextConfig)}
    flags.DEFINE_string("input_files", None, "Comma-separated files or globs of UTF-8 text.")
    flags.DEFINE_string("output_dir", None, "Where the shards are written.")
    flags.DEFINE_integer("num_shards", d["num_shards"], "Number of output files.", lower_bound=1)
    flags.DEFINE_enum("input_format", d["input_format"], ["paragraphs", "lines"],
                      "paragraphs: hard-wrapped text, blank lines between paragraphs; "
                      "lines: one document per line.")
    flags.DEFINE_integer("max_document_chars", d["max_document_chars"],
                         "paragraphs format: cut a longer section into documents.")
    flags.DEFINE_integer("min_document_chars", d["min_document_chars"],
                         "paragraphs format: merge a shorter section into the next one.")
    flags.mark_flags_as_required(["input_files", "output_dir"])


def without_own_output(input_files, output_dir):
    """The input files less the shards this command writes to output_dir (an input glob that
    also matches the output directory would otherwise read a previous run's output)."""
    directory = os.path.realpath(output_dir)
    own = [path for path in input_files if os.path.dirname(os.path.realpath(path)) == directory
           and _SHARD_NAME.fullmatch(os.path.basename(path))]
    if own:
        print(f"format_text: note: not reading {len(own)} file(s) of its own output in "
              f"--output_dir={output_dir} ({', '.join(map(os.path.basename, own[:3]))}"
              f"{' ...' if len(own) > 3 else ''})", file=sys.stderr)
    kept = [path for path in input_files if path not in own]
    if not kept:
        raise InputDataError(f"every file matched is format_text's own output in "
                             f"--output_dir={output_dir}; name the raw text files")
    return kept


def run(config: FormatTextConfig) -> int:
    """Writes the shards and prints their counts; returns the exit status. FormatTextError on
    bad input."""
    try:
        files = without_own_output(expand_patterns(config.input_files), config.output_dir)
        stats = format_files(files, config.output_dir, config.num_shards, config.input_format,
                             config.max_document_chars, config.min_document_chars)
    except InputDataError as e:
        raise FormatTextError(f"--input_files: {e}") from e
    print(f"{stats['files']} files -> {stats['documents']} documents, {stats['sentences']} "
          f"sentences in {config.num_shards} shard(s) under {config.output_dir}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, FormatTextConfig, run, errors=(FormatTextError,),
                        error_status=2)
