"""Finding input files: comma-separated globs, local or on TensorFlow's file systems."""

import bz2
import codecs
import glob
import gzip
import lzma
import os
import sys
import zlib


class InputDataError(ValueError):
    """Input files are missing or hold records that disagree with the flags."""


def expand_patterns(input_patterns):
    """Comma-separated string or list of globs -> sorted, de-duplicated file list."""
    if isinstance(input_patterns, str | os.PathLike):
        input_patterns = str(input_patterns).split(",")
    files, empty = [], []
    for pattern in input_patterns:
        pattern = str(pattern).strip()
        if not pattern:
            continue
        if "://" in pattern:  # gs://, hdfs://, ...: only TensorFlow's file system knows them
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
        else:
            matches = sorted(glob.glob(pattern))
        if not matches:
            empty.append(pattern)
        files.extend(matches)
    if empty or not files:
        raise InputDataError(f"no input files match {', '.join(empty) or input_patterns!r}; "
                             "check the input file pattern(s) (comma-separated globs)")
    return sorted(set(files))


class OutputDirError(RuntimeError):
    """An output directory cannot be created or written (checked by output_dir.py)."""


# Compressed inputs are read transparently, by file name (what the corpora users download are).
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# Input with more undecodable bytes than this share (and this count, so that a short text with a
# stray byte passes with a warning) is refused: it is binary, compressed or not UTF-8/16.
MAX_REPLACED_SHARE = 0.01
MAX_REPLACED_BYTES = 64
# Text with more NUL bytes than this share is UTF-16 (ASCII letters take a NUL each) or binary.
UTF16_NUL_SHARE = 0.2


def open_input(path):
    """Opens a local or compressed (.gz/.bz2/.xz by suffix) file for binary streaming reads."""
    opener = _OPENERS.get(os.path.splitext(str(path))[1].lower(), open)
    try:
        return opener(path, "rb")
    except OSError as e:
        raise InputDataError(f"cannot read input file {path}: {e.strerror or e}") from e


def read_bytes(path):
    """The whole (decompressed) content of an input file."""
    with open_input(path) as f:
        try:
            return f.read()
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as e:
            raise InputDataError(f"input file {path} is corrupt or truncated ({e}); "
                                 "download or decompress it again") from e


def read_text(path):
    """The text of a local or compressed input file: decode_text(read_bytes(path), path)."""
    return decode_text(read_bytes(path), path)


def warn_replaced(command, path, replaced):
    """Says on stderr how many undecodable bytes of `path` became U+FFFD (if any)."""
    if replaced:
        print(f"{command}: warning: {path}: {replaced} undecodable byte(s) replaced by U+FFFD "
              "(the file is not valid UTF-8)", file=sys.stderr)


def read_exact_text(path):
    """The text of a file where a changed character would change the data (labels, words,
    heads): InputDataError naming the line of the first byte that is not UTF-8."""
    text, replaced = read_text(path)
    if replaced:
        line = text.count("\n", 0, text.index("\ufffd")) + 1
        raise InputDataError(f"{path}:{line}: not UTF-8 ({replaced} undecodable byte(s) in the "
                             "file); convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)")
    return text


def decode_text(raw, path):
    """UTF-8 (or UTF-16 with a byte-order mark) -> (text, count of undecodable bytes replaced
    by U+FFFD). Refuses input that is mostly undecodable (binary, or another encoding)."""
    if raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        return raw.decode("utf-16", errors="replace"), 0
    if raw.count(0) > len(raw) * UTF16_NUL_SHARE:
        # NUL is valid UTF-8: UTF-16 without a byte-order mark would decode to text with a
        # NUL between the characters of every ASCII word.
        raise InputDataError(
            f"input file {path} is not text: {raw.count(0)} of its {len(raw)} bytes are NUL "
            "(UTF-16 without a byte-order mark, or binary data); convert it to UTF-8 (e.g. "
            "iconv -f UTF-16LE -t UTF-8) or add the byte-order mark")
    text = raw.decode("utf-8-sig" if raw[:3] == codecs.BOM_UTF8 else "utf-8", errors="replace")
    replaced = text.count("\ufffd") - raw.count("\ufffd".encode())
    if replaced > max(MAX_REPLACED_SHARE * len(raw), MAX_REPLACED_BYTES):
        raise InputDataError(
            f"input file {path} is not text: {replaced / len(raw):.1%} of its bytes are not "
            "UTF-8 (binary or compressed data, or another encoding); convert it to UTF-8, or "
            "name a compressed file by its suffix (.gz, .bz2, .xz)")
    return text, replaced
