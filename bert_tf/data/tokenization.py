"""BERT tokenization (basic + WordPiece) with a fast batch path through tensorflow-text, or
Hugging Face `tokenizers` where tensorflow-text is not installed (the same ids).

Text is normalised in Python exactly as Google's BasicTokenizer does (drop control characters
and U+FFFD, map whitespace to a space, and when uncased: lower-case, NFD, drop combining marks),
then tensorflow-text's FastBertTokenizer splits on whitespace, punctuation and CJK characters and
applies WordPiece. tensorflow-text's own lower-casing is NFKC case folding, which maps characters
such as U+1D35 (modifier letter capital I) to "i" where Google's keeps them, so it is not used.
tensorflow-text has no wheel for some TensorFlow builds (NVIDIA's NGC images run Python 3.12,
for which it publishes no 2.17 wheel); there a regular expression does Google's splitting and
`tokenizers`' WordPiece model the rest.

TensorFlow is imported where a FullTokenizer is built, not with this module: load_vocab and
normalize_text users (build_vocab, the parent process of a multi-worker create_pretraining_data
run) stay free of its start-up, about 10 CPU-seconds.
"""

import functools
import re
import sys
import unicodedata

import numpy as np

REQUIRED_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Google's WordPiece maps a word longer than this many characters to [UNK]: 200 in Google's
# tokenization.py (WordpieceTokenizer's max_input_chars_per_word), which the TFRecords must match
# (Hugging Face's tokenizers use 100). tensorflow-text counts bytes instead, so it gets 4 bytes
# per character and such words are replaced beforehand.
MAX_CHARS_PER_WORD = 200
# A private-use character: never in a vocab, so the word made of it alone becomes [UNK].
_UNK_CHAR = "\ue000"


class VocabError(ValueError):
    """The vocabulary file is missing, unreadable or lacks a special token."""


def load_vocab(vocab_file):
    """Reads a vocab file (one token per line, id = line number) into a dict token -> id."""
    try:
        # utf-8-sig: a byte-order mark (some editors write one) is not part of token 0.
        with open(vocab_file, encoding="utf-8-sig") as f:
            tokens = [line.rstrip("\n").strip() for line in f]
    except OSError as e:
        raise VocabError(f"cannot read vocab file {vocab_file}: {e.strerror}; pass an existing "
                         "WordPiece vocab with --vocab_file (or build one with "
                         "python -m bert_tf build_vocab)") from e
    except UnicodeDecodeError as e:
        raise VocabError(f"vocab file {vocab_file} is not UTF-8 ({e})") from e
    while tokens and not tokens[-1]:
        tokens.pop()
    vocab = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise VocabError(f"vocab file {vocab_file} lacks the special token(s) {', '.join(missing)}; "
                         "a BERT vocab needs [PAD] [UNK] [CLS] [SEP] [MASK] (build one with "
                         "python -m bert_tf build_vocab)")
    if all(t.startswith("[") and t.endswith("]") or not t for t in vocab):
        raise VocabError(f"vocab file {vocab_file} holds only special tokens ([PAD], [UNK], "
                         "...), no word pieces to tokenize text with; pass the vocab the model "
                         "was trained with (or build one with python -m bert_tf build_vocab)")
    return vocab


def check_vocab_size(tokenizer, vocab_size, source):
    """VocabError unless the tokenizer's vocab has the model's `vocab_size` tokens (`source`
    names where that size comes from, e.g. --bert_config_file=...): a larger vocab gives ids
    past the embedding table, a smaller one a model that means other words by its ids."""
    if tokenizer.vocab_size != vocab_size:
        raise VocabError(f"--vocab_file={tokenizer.vocab_file} has {tokenizer.vocab_size} "
                         f"tokens but {source} says vocab_size={vocab_size}; use the vocab "
                         "file the model was pretrained with")


@functools.cache
def _clean_table(strip_accents):
    """str.translate table: Google's _clean_text (drop NUL, U+FFFD and control/format characters,
    whitespace -> space), plus dropping combining marks (category Mn) when stripping accents."""
    table = {}
    for cp in range(sys.maxunicode + 1):
        char = chr(cp)
        if char in "\t\n\r":
            table[cp] = " "
            continue
        category = unicodedata.category(char)
        if cp == 0 or cp == 0xFFFD or category in ("Cc", "Cf"):
            table[cp] = None
        elif category == "Zs":
            table[cp] = " "
        elif strip_accents and category == "Mn":
            table[cp] = None
    return table


_ASCII_CONTROL = str.maketrans({cp: None for cp in [*range(0, 9), 11, 12, *range(14, 32), 127]}
                               | {9: " ", 10: " ", 13: " "})


def _splits_word(char):
    """Whether Google's BasicTokenizer ends a word at `char` (punctuation or a CJK ideograph)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P") or any(
        lo <= cp <= hi for lo, hi in _CJK_RANGES)


_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _mark_overlong_words(text):
    """Replaces each word over MAX_CHARS_PER_WORD characters by _UNK_CHAR (rare, so plain Python)."""
    out = []
    for chunk in text.split(" "):
        if len(chunk) > MAX_CHARS_PER_WORD:
            word_start = 0
            pieces = []
            for i, char in enumerate([*chunk, " "]):
                if char == " " or _splits_word(char):
                    word = chunk[word_start:i]
                    pieces.append(_UNK_CHAR if len(word) > MAX_CHARS_PER_WORD else word)
                    pieces.append(char if char != " " else "")
                    word_start = i + 1
            chunk = "".join(pieces)
        out.append(chunk)
    return " ".join(out)


def normalize_text(text, do_lower_case):
    """Google BasicTokenizer's character-level normalisation of one string."""
    if text.isascii():
        text = text.translate(_ASCII_CONTROL)
        if do_lower_case:
            text = text.lower()
    elif not do_lower_case:
        text = text.translate(_clean_table(False))
    else:
        text = text.translate(_clean_table(False)).lower()
        text = unicodedata.normalize("NFD", text).translate(_clean_table(True))
    if len(text) > MAX_CHARS_PER_WORD and max(map(len, text.split())) > MAX_CHARS_PER_WORD:
        text = _mark_overlong_words(text)
    return text


_BACKENDS = ("tensorflow_text", "tokenizers")


def default_backend():
    """tensorflow_text where it imports, else tokenizers."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        return "tokenizers"
    return "tensorflow_text"


def _tf_text_wordpiece(vocab_list):
    """normalised texts -> (flat ids, row splits) with tensorflow-text's FastBertTokenizer."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    tokenizer = tf_text.FastBertTokenizer(
        vocab=vocab_list, token_out_type=tf.int32, unknown_token="[UNK]",
        no_pretokenization=False, lower_case_nfd_strip_accents=False,
        max_bytes_per_word=4 * MAX_CHARS_PER_WORD)

    def tokenize(texts):
        ragged = tokenizer.tokenize(texts)
        return ragged.flat_values.numpy(), ragged.row_splits.numpy()
    return tokenize


@functools.cache
def _word_pattern():
    """A word of Google's BasicTokenizer in normalised text: one splitting character
    (punctuation or CJK, as _splits_word) or a run of others. Words end at what Python's
    str.split() (Google's whitespace_tokenize) splits on that normalize_text leaves: the space
    and the line and paragraph separators U+2028 and U+2029."""
    ranges = [(lo, hi) for lo, hi in _CJK_RANGES]
    for cp in range(128, sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith("P"):
            if ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    ascii_punctuation = [chr(cp) for cp in range(33, 127) if _splits_word(chr(cp))]
    split_class = "".join(map(re.escape, ascii_punctuation)) + "".join(
        f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in ranges)
    return re.compile(f"[{split_class}]|[^ \u2028\u2029{split_class}]+")


def _hf_wordpiece(vocab_list):
    """normalised texts -> (flat ids, row splits): our split, `tokenizers`' WordPiece."""
    from tokenizers import Tokenizer, models

    vocab = {}
    for index, token in enumerate(vocab_list):
        vocab.setdefault(token, index)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                           max_input_chars_per_word=MAX_CHARS_PER_WORD))
    pattern = _word_pattern()

    def tokenize(texts):
        encodings = tokenizer.encode_batch([pattern.findall(t) for t in texts],
                                           is_pretokenized=True, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        row_splits = np.zeros([len(ids) + 1], np.int64)
        np.cumsum([len(i) for i in ids], out=row_splits[1:])
        return np.fromiter((i for row in ids for i in row), np.int32, row_splits[-1]), row_splits
    return tokenize


class FullTokenizer:
    """Google's FullTokenizer interface; `tokenize_ids_batch` is the fast path. `backend`:
    "tensorflow_text" or "tokenizers" (same ids); default: tensorflow_text where it imports."""

    def __init__(self, vocab_file, do_lower_case=True, backend=None):
        self.vocab_file = str(vocab_file)
        self.do_lower_case = do_lower_case
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.vocab_size = max(self.inv_vocab) + 1
        self.pad_id = self.vocab["[PAD]"]
        self.unk_id = self.vocab["[UNK]"]
        self.cls_id = self.vocab["[CLS]"]
        self.sep_id = self.vocab["[SEP]"]
        self.mask_id = self.vocab["[MASK]"]
        self.backend = backend or default_backend()
        if self.backend not in _BACKENDS:
            raise ValueError(f"unknown tokenizer backend {self.backend!r}: one of {_BACKENDS}")
        build = _tf_text_wordpiece if self.backend == "tensorflow_text" else _hf_wordpiece
        self._wordpiece = build([self.inv_vocab.get(i, "[UNK]") for i in range(self.vocab_size)])

    def tokenize_ids_batch(self, texts):
        """Token ids of many strings at once -> (flat_ids int32 [N], row_splits int64 [len+1])."""
        if not texts:
            return np.zeros([0], np.int32), np.zeros([1], np.int64)
        return self._wordpiece([normalize_text(t, self.do_lower_case) for t in texts])

    def tokenize_ids(self, text):
        flat_ids, _ = self.tokenize_ids_batch([text])
        return flat_ids.tolist()

    def tokenize_batch(self, texts):
        flat_ids, row_splits = self.tokenize_ids_batch(list(texts))
        tokens = self.convert_ids_to_tokens(flat_ids.tolist())
        return [tokens[row_splits[i]:row_splits[i + 1]] for i in range(len(row_splits) - 1)]

    def tokenize(self, text):
        return self.tokenize_batch([text])[0]

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        return [self.inv_vocab[i] for i in ids]

    def encode_pair(self, text_a, text_b=None, max_seq_length=128):
        """[CLS] A [SEP] (B [SEP]) as fixed-length id lists, zero padded.

        Over-long pairs lose tokens from the end of the longer segment, one at a time, as
        Google's run_classifier does. text_b=None gives a single segment; text_b="" gives
        "[CLS] A [SEP] [SEP]" (how Hugging Face encodes an empty second text).
        """
        ids_a = self.tokenize_ids(text_a)
        ids_b = None if text_b is None else self.tokenize_ids(text_b)
        features, _ = self.pack_pair(ids_a, ids_b, max_seq_length)
        return features

    def pack_pair(self, ids_a, ids_b=None, max_seq_length=128):
        """encode_pair on token ids: returns (features, number of tokens cut).

        ids_a, ids_b: lists of token ids (not changed); ids_b=None: a single segment.
        """
        ids_a = list(ids_a)
        ids_b = None if ids_b is None else list(ids_b)
        budget = max_seq_length - (2 if ids_b is None else 3)
        if budget < 1:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for tokens")
        cut = 0
        while len(ids_a) + len(ids_b or []) > budget:
            (ids_a if ids_b is None or len(ids_a) > len(ids_b) else ids_b).pop()
            cut += 1
        input_ids = [self.cls_id, *ids_a, self.sep_id]
        segment_ids = [0] * len(input_ids)
        if ids_b is not None:
            input_ids += [*ids_b, self.sep_id]
            segment_ids += [1] * (len(ids_b) + 1)
        padding = [0] * (max_seq_length - len(input_ids))
        return {
            "input_ids": input_ids + [self.pad_id] * len(padding),
            "input_mask": [1] * len(input_ids) + padding,
            "segment_ids": segment_ids + padding,
        }, cut
