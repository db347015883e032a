"""FullTokenizer's ids computed inside a TensorFlow graph, for exported models that take raw text.

bert_tf.data.normalization normalises text in Python (Google BasicTokenizer's cleaning,
lower-casing, NFD and accent stripping, over-long words -> [UNK]) and then runs
tensorflow-text's FastBertTokenizer. A SavedModel cannot call Python, so `GraphTokenizer` does
each normalisation step with TensorFlow string ops instead (RE2 regular expressions on Unicode
categories, ICU lower-casing and NFD from tensorflow-text) and feeds the same FastBertTokenizer.
tests/test_export.py checks that both give the same ids on real text and on the edge cases
(control characters, accents, Greek final sigma, over-long words).

Only vocabularies whose words are found by Google's rules (whitespace, punctuation, CJK
characters) can be tokenized in a graph. A tokenizer that needs a Python word splitter (MeCab
for Japanese, say) cannot: `needs_python_word_splitter` is the hook that tells exporters to give
such models the id-level signature only.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.data.normalization import CJK_RANGES, MAX_CHARS_PER_WORD, UNK_CHAR

# Google's BasicTokenizer ends a word at ASCII punctuation (normalization.splits_word), any
# Unicode punctuation (category P) and CJK ideographs; as an RE2 character class body.
_ASCII_PUNCTUATION = r"\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}"
SPLIT_CLASS = _ASCII_PUNCTUATION + r"\p{P}" + "".join(
    rf"\x{{{lo:X}}}-\x{{{hi:X}}}" for lo, hi in CJK_RANGES)
# Whitespace as Google's _is_whitespace, and what _is_control drops (Cc, Cf, NUL, U+FFFD).
_WHITESPACE = r"[\t\n\r\p{Zs}]"
_DROPPED = r"[\p{Cc}\p{Cf}\x{FFFD}]"
# What separates the words normalization._mark_overlong_words measures.
_WORD_BOUNDARY = rf"[ {SPLIT_CLASS}]"
# The word splitters exporters can run in a graph (Google's BasicTokenizer rules).
GRAPH_WORD_SPLITTERS = ("bert",)


def needs_python_word_splitter(word_splitter: str) -> bool:
    """Whether a tokenizer whose words are found by `word_splitter` cannot run in a graph.

    The hook for tokenizer specs other than Google's (e.g. MeCab for Japanese): an exporter
    asks this and, when true, exports the id-level signature only.
    """
    return word_splitter not in GRAPH_WORD_SPLITTERS


def graph_word_splitter(spec) -> str:
    """The word splitter an exporter records for a TokenizerSpec (tokenizer_spec.py): "bert"
    only for what GraphTokenizer reproduces (Google's rules, WordPiece, no NFKC, accents
    stripped exactly when lower-casing, CJK split); anything else names what needs Python."""
    google = (spec.word_tokenizer_type == "bert" and spec.subword_tokenizer_type == "wordpiece"
              and spec.normalization == "none" and spec.strip_accents == spec.do_lower_case
              and spec.tokenize_chinese_chars)
    return "bert" if google else f"{spec.word_tokenizer_type}/{spec.subword_tokenizer_type}"


def normalize_text(texts: tf.Tensor, do_lower_case: bool) -> tf.Tensor:
    """normalization.normalize_text on a string tensor, in graph ops.

    Args:
      texts: tf.string tensor of any shape (UTF-8).
      do_lower_case: lower-case, NFD and drop combining marks (Mn), as an uncased vocab needs.

    Returns:
      The normalised strings, same shape.
    """
    texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
    texts = tf.strings.regex_replace(texts, _DROPPED, "")
    if do_lower_case:
        texts = tf_text.normalize_utf8(tf.strings.lower(texts, encoding="utf-8"), "NFD")
        texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    return _mark_overlong_words(texts)


def _mark_overlong_words(texts: tf.Tensor) -> tf.Tensor:
    """Each word of over MAX_CHARS_PER_WORD characters -> UNK_CHAR, as tokenization does.

    Split and rejoined rather than one regex_replace of `[^ ...]{201,}`: RE2 runs out of DFA
    memory on that repetition of a large class and falls back to its slow NFA."""
    shape = tf.shape(texts)
    parts = tf_text.regex_split(tf.reshape(texts, [-1]), _WORD_BOUNDARY, _WORD_BOUNDARY)
    long = tf.strings.length(parts.flat_values, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
    parts = parts.with_flat_values(tf.where(long, UNK_CHAR, parts.flat_values))
    return tf.reshape(tf.strings.reduce_join(parts, axis=-1), shape)


class GraphTokenizer(tf.Module):
    """Raw strings -> FullTokenizer's word-piece ids, in graph ops (a tf.Module, so that a
    SavedModel tracks its vocabulary table)."""

    def __init__(self, vocab: list[str], do_lower_case: bool):
        """vocab: the tokens in id order (tokenization.load_vocab's file, gaps as [UNK])."""
        super().__init__()
        self.do_lower_case = do_lower_case
        self.vocab_size = len(vocab)
        self.wordpiece = tf_text.FastBertTokenizer(
            vocab=vocab, token_out_type=tf.int32, unknown_token="[UNK]",
            no_pretokenization=False, lower_case_nfd_strip_accents=False,
            max_bytes_per_word=4 * MAX_CHARS_PER_WORD)
        self.unk_id = vocab.index("[UNK]")

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] strings -> [B, (pieces)] int32 ids, as FullTokenizer.tokenize_ids_batch."""
        return self.wordpiece.tokenize(normalize_text(texts, self.do_lower_case))

    def split_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[B] strings -> [B, (words)] of Google BasicTokenizer's words (whitespace-separated
        runs, each punctuation or CJK character a word of its own), normalised."""
        texts = normalize_text(texts, self.do_lower_case)
        return tf_text.regex_split(texts, rf"[ \x{{2028}}\x{{2029}}]|[{SPLIT_CLASS}]",
                                   rf"[{SPLIT_CLASS}]")

    def tokenize_words(self, words: tf.RaggedTensor) -> tf.RaggedTensor:
        """[B, (words)] strings -> [B, (words), (pieces)] ids; a word with no pieces (only
        characters the cleaning drops) becomes [UNK], as tasks.encode_sentences does."""
        pieces = self.wordpiece.tokenize(normalize_text(words.flat_values, self.do_lower_case))
        empty = pieces.row_lengths() == 0
        unk = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], self.unk_id),
            tf.cast(empty, tf.int64))
        pieces = tf.concat([pieces, unk], axis=1)  # unk has one id in empty rows, else none
        return words.with_flat_values(pieces)
