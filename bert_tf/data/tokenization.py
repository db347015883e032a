"""BERT tokenization: the tokenizer of a vocab file and its spec (bert_tf.data.tokenizer_spec),
with a fast batch path through tensorflow-text, or Hugging Face `tokenizers` where
tensorflow-text is not installed (the same ids).

`load_tokenizer(vocab_file)` is how every command gets its tokenizer: it reads the spec beside
the vocab (casing, normalisation, word splitter and its dictionary, subword model), refuses a
flag or an installed dictionary that contradicts it, and without a spec gives Google's rules
(with a warning naming the missing spec when the vocab evidently was not built for them:
entries Google's split never produces, or many [UNK] in the first batch).
The pipeline: normalisation (bert_tf.data.normalization) -> words (bert_tf.data.word_splitters)
-> pieces (bert_tf.data.subword_models).

Google's rules (a vocab without a spec, or FullTokenizer(vocab_file, do_lower_case)): text is
normalised in Python as Google's BasicTokenizer does (drop control characters and U+FFFD, map
whitespace to a space, and when uncased: lower-case, NFD, drop combining marks, except in kana
and Hangul), then tensorflow-text's FastBertTokenizer splits on whitespace, punctuation and CJK
characters and applies WordPiece. tensorflow-text's own lower-casing is NFKC case folding, which
maps characters such as U+1D35 (modifier letter capital I) to "i" where Google's keeps them, so
it is not used. tensorflow-text has no wheel for some TensorFlow builds (NVIDIA's NGC images run
Python 3.12, for which it publishes no 2.17 wheel); there a regular expression does Google's
splitting and `tokenizers`' WordPiece model the rest.

TensorFlow is imported where a tokenizer is built, not with this module: load_vocab and
normalize_text users (build_vocab, the parent process of a multi-worker create_pretraining_data
run) stay free of its start-up, about 10 CPU-seconds.
"""

import dataclasses
import os
import sys

import numpy as np

from bert_tf.data import subword_models, tokenizer_spec
from bert_tf.data.normalization import CJK_RANGES, MAX_CHARS_PER_WORD, normalize_text
from bert_tf.data.tokenizer_pipeline import Piece, Pipeline
from bert_tf.data.tokenizer_spec import TokenizerSpec, TokenizerSpecError, VocabError

__all__ = ["MAX_CHARS_PER_WORD", "FullTokenizer", "Piece", "TokenizerSpecError", "VocabError",
           "load_tokenizer", "load_vocab", "normalize_text"]

REQUIRED_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# A vocab without a spec is taken for Google's; these say it evidently is not (issue 46):
# this many entries Google's split never produces, or this share of [UNK] in the first
# batch of at least UNKNOWN_CHECK_PIECES pieces (Google's vocabs on English: under 0.4%).
FOREIGN_ENTRIES = 10
UNKNOWN_SHARE = 0.02
UNKNOWN_CHECK_PIECES = 200


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


def google_spec(do_lower_case=True):
    """Google's BasicTokenizer + WordPiece: the spec of a vocab without a spec file."""
    return TokenizerSpec(do_lower_case=do_lower_case, strip_accents=do_lower_case)


def check_vocab_size(tokenizer, vocab_size, source):
    """VocabError unless the tokenizer's vocab has the model's `vocab_size` tokens (`source`
    names where that size comes from, e.g. --bert_config_file=...): a larger vocab gives ids
    past the embedding table, a smaller one a model that means other words by its ids."""
    if tokenizer.vocab_size != vocab_size:
        raise VocabError(f"--vocab_file={tokenizer.vocab_file} has {tokenizer.vocab_size} "
                         f"tokens but {source} says vocab_size={vocab_size}; use the vocab "
                         "file the model was pretrained with")


def resolve_spec(vocab_file, do_lower_case=None, allow_dictionary_mismatch=False,
                 flag="--do_lower_case", check_dictionary=True):
    """The TokenizerSpec of `vocab_file` under a command's flags, checked without building a
    tokenizer (no TensorFlow): the vocab is readable, the flag agrees with the spec, the
    installed dictionary is the spec's. Arguments as load_tokenizer's."""
    vocab = load_vocab(vocab_file)
    spec = tokenizer_spec.read_spec(vocab_file)
    if spec is None:
        if check_dictionary:
            _check_google_entries(vocab, vocab_file)
        return google_spec(True if do_lower_case is None else do_lower_case)
    spec = tokenizer_spec.resolve_casing(spec, vocab_file, do_lower_case, flag)
    if check_dictionary:
        from bert_tf.data import word_splitters

        word_splitters.check_dictionary(spec, f"--vocab_file={vocab_file} (tokenizer spec "
                                              f"{tokenizer_spec.spec_path(vocab_file)})",
                                        allow_dictionary_mismatch)
    return spec


def load_tokenizer(vocab_file, do_lower_case=None, allow_dictionary_mismatch=False,
                   backend=None, flag="--do_lower_case", check_dictionary=True):
    """The tokenizer of `vocab_file`, as its spec says.

    Args:
      vocab_file: the vocab; its spec is read from tokenizer_spec.spec_path(vocab_file).
      do_lower_case: the command's casing flag; None: the spec's (True without a spec). A value
        that contradicts the spec raises TokenizerSpecError naming `flag` and the spec file.
      allow_dictionary_mismatch: use an installed word-splitter dictionary other than the
        spec's (warning) instead of refusing it (TokenizerSpecError).
      backend: WordPiece backend ("tensorflow_text" or "tokenizers"); default: the former
        where it imports.
      flag: the name of the casing flag, for the error message.
      check_dictionary: False where text is not split (ids only: dynamic masking), or where
        the process that started this one has checked it on this host (data workers); also
        whether a vocab without a spec is checked for evidence that it needs one (warnings).

    Returns:
      A FullTokenizer with `.spec`.
    """
    spec = resolve_spec(vocab_file, do_lower_case, allow_dictionary_mismatch, flag,
                        check_dictionary)
    tokenizer = FullTokenizer(vocab_file, backend=backend, spec=spec)
    tokenizer.check_unknown_share = check_dictionary and not os.path.exists(
        tokenizer_spec.spec_path(vocab_file))
    return tokenizer


def _warn_missing_spec(vocab_file, evidence):
    print(f"WARNING: --vocab_file={vocab_file} has no tokenizer spec "
          f"({tokenizer_spec.spec_path(vocab_file)} is missing), so it gets Google's rules "
          f"(BasicTokenizer + WordPiece), but {evidence}: if it was built with another tokenizer "
          "(build_vocab --tokenizer=mecab, mecab-ko, ...), copy its spec beside it",
          file=sys.stderr)


def _never_from_google_split(token):
    """A SentencePiece piece, or two or more characters with a CJK ideograph (Google's split
    makes every ideograph a word of its own)."""
    text = token.removeprefix("##")
    return token.startswith("\u2581") or len(text) > 1 and any(
        lo <= ord(c) <= hi for c in text for lo, hi in CJK_RANGES)


def _check_google_entries(vocab, vocab_file):
    foreign = [t for t in vocab if _never_from_google_split(t)]
    if len(foreign) >= FOREIGN_ENTRIES:
        _warn_missing_spec(vocab_file, f"{len(foreign)} of its entries (e.g. "
                                       f"{', '.join(foreign[:3])}) can never come out of "
                                       "Google's split")


class FullTokenizer:
    """Google's FullTokenizer interface over a TokenizerSpec (default: Google's rules with
    `do_lower_case`); `tokenize_ids_batch` is the fast path. `backend`: "tensorflow_text" or
    "tokenizers" (same ids); default: tensorflow_text where it imports. Commands use
    load_tokenizer, which reads the spec beside the vocab."""

    def __init__(self, vocab_file, do_lower_case=True, backend=None, spec=None):
        self.vocab_file = str(vocab_file)
        self.spec = spec or google_spec(do_lower_case)
        self.do_lower_case = self.spec.do_lower_case
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.vocab_size = max(self.inv_vocab) + 1
        self.pad_id = self.vocab["[PAD]"]
        self.unk_id = self.vocab["[UNK]"]
        self.cls_id = self.vocab["[CLS]"]
        self.sep_id = self.vocab["[SEP]"]
        self.mask_id = self.vocab["[MASK]"]
        self.backend = backend or subword_models.default_backend()
        if self.backend not in subword_models.BACKENDS:
            raise ValueError(f"unknown tokenizer backend {self.backend!r}: one of "
                             f"{subword_models.BACKENDS}")
        google_rules = dataclasses.replace(self.spec, vocab_sha256=None) == google_spec(
            self.spec.do_lower_case)
        # load_tokenizer sets it for a vocab without a spec: warn on a high [UNK] share.
        self.check_unknown_share = False
        self._pipeline = Pipeline(self.spec, self.vocab_file, self.vocab,
                                  [self.inv_vocab.get(i, "[UNK]") for i in range(self.vocab_size)],
                                  self.backend, google_rules)

    def tokenize_ids_batch(self, texts):
        """Token ids of many strings at once -> (flat_ids int32 [N], row_splits int64 [len+1])."""
        flat_ids, row_splits, _ = self.tokenize_words_batch(texts)
        return flat_ids, row_splits

    def tokenize_words_batch(self, texts):
        """(flat_ids int32 [N], row_splits int64 [len+1], word_starts bool [N]): whether each
        piece begins a word of the word splitter (whole-word masking)."""
        texts = list(texts)
        if not texts:
            return np.zeros([0], np.int32), np.zeros([1], np.int64), np.zeros([0], bool)
        batch = self._pipeline.tokenize_batch(texts)
        if self.check_unknown_share and len(batch[0]) >= UNKNOWN_CHECK_PIECES:
            self.check_unknown_share = False  # the first batch only
            share = float(np.mean(batch[0] == self.unk_id))
            if share >= UNKNOWN_SHARE:
                _warn_missing_spec(self.vocab_file, f"{share:.1%} of the first {len(batch[0])} "
                                                    "pieces are [UNK]")
        return batch

    def tokenize_with_offsets(self, text):
        """The pieces of `text` (list of Piece) with offsets into `text` itself."""
        return self._pipeline.tokenize_with_offsets(text)

    def word_start_table(self):
        """bool per vocab id: whether that piece begins a word (in-graph whole-word masking:
        WordPiece and character pieces inside a word carry "##", SentencePiece's word-initial
        pieces "\u2581", so the splitter's word boundaries follow from the ids)."""
        return self._pipeline.word_start.copy()

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
