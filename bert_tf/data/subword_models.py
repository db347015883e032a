"""Subword models: words (or whole normalised texts, for SentencePiece) -> vocab ids.

WordPiece runs in tensorflow-text's FastBertTokenizer, or Hugging Face `tokenizers` where
tensorflow-text is not installed (the same ids); SentencePiece in the `sentencepiece` library.
TensorFlow is imported when a model is built, not with this module.
"""

import re

import numpy as np

from bert_tf.data.normalization import MAX_CHARS_PER_WORD, UNK_CHAR
from bert_tf.data.tokenizer_spec import VocabError

BACKENDS = ("tensorflow_text", "tokenizers")


def default_backend():
    """tensorflow_text where it imports, else tokenizers."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        return "tokenizers"
    return "tensorflow_text"


def _row_splits(lengths):
    splits = np.zeros([len(lengths) + 1], np.int64)
    np.cumsum(lengths, out=splits[1:])
    return splits


def tf_text_wordpiece(vocab_list, pretokenized):
    """texts -> (flat ids, row splits) with tensorflow-text's FastBertTokenizer: Google's split
    of normalised texts, or (pretokenized) each text taken as one word."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    tokenizer = tf_text.FastBertTokenizer(
        vocab=vocab_list, token_out_type=tf.int32, unknown_token="[UNK]",
        no_pretokenization=pretokenized, lower_case_nfd_strip_accents=False,
        max_bytes_per_word=4 * MAX_CHARS_PER_WORD)

    def tokenize(texts):
        ragged = tokenizer.tokenize(texts)
        return ragged.flat_values.numpy(), ragged.row_splits.numpy()
    return tokenize


def hf_wordpiece(vocab_list, pretokenized, bert_words=None):
    """texts -> (flat ids, row splits): `bert_words` (text -> its words; Google's split) or
    (pretokenized) each text as one word, then `tokenizers`' WordPiece."""
    from tokenizers import Tokenizer, models

    vocab = {}
    for index, token in enumerate(vocab_list):
        vocab.setdefault(token, index)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                           max_input_chars_per_word=MAX_CHARS_PER_WORD))

    def tokenize(texts):
        words = [[t] for t in texts] if pretokenized else [bert_words(t) for t in texts]
        encodings = tokenizer.encode_batch(words, is_pretokenized=True, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        splits = _row_splits([len(i) for i in ids])
        return np.fromiter((i for row in ids for i in row), np.int32, splits[-1]), splits
    return tokenize


class WordPieceModel:
    """Words -> WordPiece ids; a word over MAX_CHARS_PER_WORD characters is one [UNK]
    (Google's max_input_chars_per_word)."""

    def __init__(self, vocab_list, backend):
        build = tf_text_wordpiece if backend == "tensorflow_text" else hf_wordpiece
        self._tokenize = build(vocab_list, pretokenized=True)

    def ids_of_words(self, words):
        """-> (flat ids int32, row splits int64 [len(words)+1]); every word gets >= 1 piece."""
        if not words:
            return np.zeros([0], np.int32), np.zeros([1], np.int64)
        return self._tokenize([w if len(w) <= MAX_CHARS_PER_WORD else UNK_CHAR for w in words])

    @staticmethod
    def piece_lengths(tokens, word):
        """Characters of `word` each of its pieces covers ([UNK]: all of it)."""
        if len(tokens) == 1 and tokens[0] == "[UNK]":
            return [len(word)]
        return [len(t) - 2 if t.startswith("##") else len(t) for t in tokens]


class CharacterModel:
    """One piece per character: the first of a word as it is, the others with "##"
    (cl-tohoku's character tokenizer, so that Google's whole-word rule still works); a
    character missing from the vocab is [UNK] alone."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.unk_id = vocab["[UNK]"]

    def ids_of_words(self, words):
        ids = [self.vocab.get(("##" if i else "") + c, self.unk_id)
               for word in words for i, c in enumerate(word)]
        return np.asarray(ids, np.int32), _row_splits([len(w) for w in words])

    @staticmethod
    def piece_lengths(tokens, word):
        return [1] * len(word)


WORD_START = "\u2581"  # SentencePiece's "▁": the piece starts a whitespace-separated word


class SentencePieceModel:
    """Normalised texts -> SentencePiece ids and [start, end) character offsets; the model
    file's ids are the vocab's (build_vocab makes them agree).

    The `sentencepiece` library does both, not tensorflow-text's in-graph SentencepieceTokenizer:
    that op bundles another SentencePiece build, which breaks ties between equally scored
    segmentations differently (12 of 400 held-out lines of the Japanese corpus, all runs of
    "-", tests/test_tokenizer_modes.py), and ids and offsets must come from one engine."""

    def __init__(self, model_path):
        import sentencepiece

        try:
            self.processor = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
        except (OSError, RuntimeError) as e:
            raise VocabError(f"cannot load the SentencePiece model {model_path} named by the "
                             f"vocab's tokenizer spec: {e}") from None

    def ids_of_texts(self, texts):
        """-> (flat ids int32, row splits int64)."""
        ids = self.processor.encode(list(texts))
        return (np.fromiter((i for row in ids for i in row), np.int32, sum(map(len, ids))),
                _row_splits([len(i) for i in ids]))

    def pieces_with_offsets(self, text):
        """[(id, start, end)] with [start, end) character offsets into `text`, leading spaces
        (SentencePiece's "▁") left out of a piece's span."""
        proto = self.processor.encode(text, return_type="proto")
        char_of_byte = np.zeros([len(text.encode("utf-8")) + 1], np.int64)
        byte_ends = np.cumsum([len(c.encode("utf-8")) for c in text], dtype=np.int64)
        char_of_byte[byte_ends] = 1
        char_of_byte = np.cumsum(char_of_byte)
        out = []
        for piece in proto.pieces:
            start, end = int(char_of_byte[piece.begin]), int(char_of_byte[piece.end])
            while start < end and text[start] == " ":
                start += 1
            out.append((piece.id, start, end))
        return out


# Scripts written without spaces between words (Han, kana, Thai, Lao, Myanmar, Khmer): there a
# SentencePiece "word" (the text between spaces) is a phrase or a whole sentence.
_UNSPACED_SCRIPT = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3005-\u3007"
                              "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                              "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]")


def is_word_start(token, subword_tokenizer_type):
    """Whether a piece begins a word, the unit of whole-word masking: not a "##" continuation
    (WordPiece, character: the splitter's words), or for SentencePiece a "▁" piece or one
    holding a character of a script written without spaces, whose SentencePiece "words" are
    whole sentences: such pieces are units of their own, as in ALBERT's
    create_pretraining_data.py (_is_start_piece_sp: every piece with a character outside a-z
    and punctuation), but Korean and other spaced scripts keep their whitespace words.
    SentencePiece's [UNK] stands for characters inside a word; so does character mode's, where
    an unknown character is a bare [UNK] inside a word or at its start: taking it for a start
    cut words in two, taking it for a continuation joins a word to the one before
    (docs/tokenizers.md, "Whole-word masking")."""
    if subword_tokenizer_type == "sentencepiece":
        return token.startswith(WORD_START) or bool(_UNSPACED_SCRIPT.search(token))
    if subword_tokenizer_type == "character" and token == "[UNK]":
        return False
    return not token.startswith("##")
