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

import argparse
import glob
import os
import sys

import blingfire

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


def read_text(path, stats):
    """Decodes UTF-8, replacing (and counting) undecodable bytes."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise FormatTextError(f"cannot read input file {path}: {e.strerror}") from e
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count("\ufffd") - raw.count("\ufffd".encode())
    if replaced:
        stats["replaced_bytes"] += replaced
        print(f"format_text: warning: {path}: {replaced} undecodable byte(s) replaced by U+FFFD "
              "(the file is not valid UTF-8)", file=sys.stderr)
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


def expand_inputs(patterns):
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise FormatTextError(f"--input_files: nothing matches {pattern!r}")
        files.extend(matches)
    return files


def format_files(input_files, output_dir, num_shards=1, input_format="paragraphs",
                 max_document_chars=20000, min_document_chars=200):
    """Writes output_dir/part-XXXXX-of-NNNNN.txt; returns statistics."""
    if num_shards < 1:
        raise FormatTextError(f"--num_shards={num_shards} must be at least 1")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise FormatTextError(f"--output_dir {output_dir}: cannot create it ({e.strerror})") from e
    names = [os.path.join(output_dir, f"part-{i:05d}-of-{num_shards:05d}.txt")
             for i in range(num_shards)]
    stats = {"files": 0, "documents": 0, "sentences": 0, "replaced_bytes": 0}
    try:
        outputs = [open(f"{name}.tmp", "w", encoding="utf-8") for name in names]
    except OSError as e:
        raise FormatTextError(f"--output_dir {output_dir} is not writable ({e.strerror})") from e
    try:
        for path in input_files:
            text = read_text(path, stats)
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
    except BaseException:
        for out in outputs:
            out.close()
            os.remove(out.name)
        raise
    for out, name in zip(outputs, names, strict=True):
        out.close()
        os.replace(out.name, name)
    if not stats["documents"]:
        print("format_text: warning: the input has no text; the shards are empty",
              file=sys.stderr)
    return stats


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bert_tf.format_text", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input_files", required=True,
                        help="comma-separated files or globs of UTF-8 text")
    parser.add_argument("--output_dir", required=True, help="where the shards are written")
    parser.add_argument("--num_shards", type=int, default=1, help="number of output files")
    parser.add_argument("--input_format", choices=["paragraphs", "lines"], default="paragraphs",
                        help="paragraphs: hard-wrapped text, blank lines between paragraphs; "
                             "lines: one document per line")
    parser.add_argument("--max_document_chars", type=int, default=20000,
                        help="paragraphs format: cut a longer section into documents")
    parser.add_argument("--min_document_chars", type=int, default=200,
                        help="paragraphs format: merge a shorter section into the next one")
    args = parser.parse_args(argv)
    try:
        files = expand_inputs([p for p in args.input_files.split(",") if p.strip()])
        stats = format_files(files, args.output_dir, args.num_shards, args.input_format,
                             args.max_document_chars, args.min_document_chars)
    except FormatTextError as e:
        print(f"format_text: error: {e}", file=sys.stderr)
        return 2
    print(f"{stats['files']} files -> {stats['documents']} documents, {stats['sentences']} "
          f"sentences in {args.num_shards} shard(s) under {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
