"""The steps of a tokenizer spec run in order: normalise, split words, subword model; ids in
batches (with the splitter's word starts) or one text's pieces with offsets into the original.

Google's rules (the spec of a vocab without a spec file) take tensorflow-text's fused path:
FastBertTokenizer splits and applies WordPiece in one call, 10.7 M characters per CPU-second
against 1.5 for the same work in `tokenizers` (../shared/notes/japanese-korean-bert.md).
"""

import dataclasses
import functools

import numpy as np

from bert_tf.data import subword_models
from bert_tf.data.normalization import Normalizer, normalize_text
from bert_tf.data.tokenizer_spec import sentencepiece_model_file


@dataclasses.dataclass(frozen=True)
class Piece:
    """One piece of a text: its token and id, the [start, end) character offsets of what it
    covers in the original (un-normalised) text, and the index of the splitter word it belongs
    to (pieces of one word share it: whole-word masking, label alignment)."""

    token: str
    id: int
    start: int
    end: int
    word: int


class Pipeline:
    """normalizer -> word splitter -> subword model for one vocab."""

    def __init__(self, spec, vocab_file, vocab, tokens, backend, google_rules):
        """tokens: the token of every id; google_rules: spec is Google's (fused fast path)."""
        self.spec = spec
        self.vocab_file = vocab_file
        self.normalizer = Normalizer(spec.normalization == "nfkc", spec.do_lower_case,
                                     spec.strip_accents)
        self.vocab = vocab
        self.tokens = tokens
        self.backend = backend
        self.google_rules = google_rules
        self.word_start = np.array([subword_models.is_word_start(t, spec.subword_tokenizer_type)
                                    for t in tokens], bool)

    @functools.cached_property
    def splitter(self):
        from bert_tf.data.word_splitters import make_splitter

        return make_splitter(self.spec)

    @functools.cached_property
    def model(self):
        kind = self.spec.subword_tokenizer_type
        if kind == "wordpiece":
            return subword_models.WordPieceModel(self.tokens, self.backend)
        if kind == "character":
            return subword_models.CharacterModel(self.vocab)
        return subword_models.SentencePieceModel(
            sentencepiece_model_file(self.spec, self.vocab_file))

    @functools.cached_property
    def _google_fused(self):
        if self.backend == "tensorflow_text":
            return subword_models.tf_text_wordpiece(self.tokens, pretokenized=False)
        from bert_tf.data.word_splitters import BertSplitter

        return subword_models.hf_wordpiece(self.tokens, pretokenized=False,
                                           bert_words=BertSplitter(True).words)

    def tokenize_batch(self, texts):
        """-> (flat ids int32, row splits int64, word_starts bool) of non-empty `texts`."""
        if self.google_rules:
            ids, splits = self._google_fused(
                [normalize_text(t, self.spec.do_lower_case) for t in texts])
            return ids, splits, self.word_start[ids]
        normalised = [self.normalizer(t) for t in texts]
        if self.spec.subword_tokenizer_type == "sentencepiece":
            ids, splits = self.model.ids_of_texts(normalised)
            return ids, splits, self.word_start[ids]
        words = [self.splitter.words(text) for text in normalised]
        ids, word_splits = self.model.ids_of_words([w for text in words for w in text])
        word_counts = np.zeros([len(words) + 1], np.int64)
        np.cumsum([len(w) for w in words], out=word_counts[1:])
        word_starts = np.zeros([len(ids)], bool)
        word_starts[word_splits[:-1][np.diff(word_splits) > 0]] = True
        return ids, word_splits[word_counts], word_starts

    def tokenize_with_offsets(self, text):
        """The Pieces of one text."""
        normalised, starts, ends = self.normalizer.with_offsets(text)

        def original(begin, end):
            if end > begin:
                return starts[begin], ends[end - 1]
            at = starts[begin] if begin < len(starts) else len(text)
            return at, at

        if self.spec.subword_tokenizer_type == "sentencepiece":
            out, word = [], -1
            for piece_id, begin, end in self.model.pieces_with_offsets(normalised):
                word += bool(self.word_start[piece_id]) or word < 0
                out.append(Piece(self.tokens[piece_id], piece_id, *original(begin, end), word))
            return out
        spans = self.splitter.spans(normalised)
        words = [normalised[begin:end] for begin, end in spans]
        ids, word_splits = self.model.ids_of_words(words)
        out = []
        for index, ((begin, _), word) in enumerate(zip(spans, words, strict=True)):
            word_ids = ids[word_splits[index]:word_splits[index + 1]].tolist()
            tokens = [self.tokens[i] for i in word_ids]
            position = begin
            for token, piece_id, length in zip(tokens, word_ids,
                                               self.model.piece_lengths(tokens, word),
                                               strict=True):
                out.append(Piece(token, piece_id, *original(position, position + length), index))
                position += length
        return out
