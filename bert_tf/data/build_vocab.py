"""Learns a WordPiece vocabulary from text, for pretraining BERT on a new corpus or language.

Text is normalised exactly as bert_tf.data.tokenization does (Google's rules), split into words on
whitespace, punctuation and CJK characters, and Hugging Face `tokenizers`' BPE trainer (in Rust,
where tensorflow-text's learner is pure Python) picks the pieces: WordPiece's vocabulary is BPE's
alphabet and merges, with "##" marking a piece inside a word.
Layout as Google's vocabs: [PAD]=0, then up to 99 [unusedN], then [UNK] [CLS] [SEP] [MASK], then
the remaining [unusedN], then the learned pieces.

Reproducible: the same input gives the same vocab in every run. The trainer breaks ties between
equally frequent pairs by their symbols' ids, and its WordPiece mode numbers the "##" pieces in
the order of a Rust HashMap (seeded per process: 2799 or 2800 tokens, each run another vocab, on
Alice at --vocab_size=5000). So every (character, inside a word or not) is handed to it as one
private-use character, numbered in first-seen order, and mapped back afterwards.
"""

import dataclasses
import os
import sys

from absl import flags
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

import bert_tf
from bert_tf.data.files import InputDataError, expand_patterns, read_text
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.tokenization import normalize_text

LINES_PER_BATCH = 8192
# Unicode's supplementary private-use planes 15 and 16: the trainer's symbols.
_SYMBOL_BLOCKS = ((0xF0000, 0xFFFFE), (0x100000, 0x10FFFE))
MAX_SYMBOLS = sum(end - start for start, end in _SYMBOL_BLOCKS)


class BuildVocabError(ValueError):
    pass


def reserved_tokens(num_unused_tokens):
    unused = [f"[unused{i}]" for i in range(num_unused_tokens)]
    return ["[PAD]", *unused[:99], "[UNK]", "[CLS]", "[SEP]", "[MASK]", *unused[99:]]


class _Symbols:
    """(inside a word?, character) <-> one private-use character, numbered as first seen."""

    def __init__(self):
        self.code_of, self.key_of = {}, {}

    def word(self, word):
        return "".join(self._code(i > 0, c) for i, c in enumerate(word))

    def _code(self, inside, char):
        code = self.code_of.get((inside, char))
        if code is None:
            code = chr(_code_point(len(self.code_of)))
            self.code_of[(inside, char)] = code
            self.key_of[code] = (inside, char)
        return code

    def piece(self, symbols):
        """The WordPiece token of a learned piece ("##" when it starts inside a word)."""
        keys = [self.key_of[c] for c in symbols]
        return ("##" if keys[0][0] else "") + "".join(char for _, char in keys)


def _code_point(n):
    for start, end in _SYMBOL_BLOCKS:
        if n < end - start:
            return start + n
        n -= end - start
    raise BuildVocabError(f"the input has more than {MAX_SYMBOLS // 2} distinct characters; "
                          "is it text?")


def _words_as_symbols(input_files, do_lower_case, symbols):
    """Batches of lines, each the line's words as symbols separated by spaces."""
    # Text arrives normalised; only the CJK splitting of Google's BasicTokenizer remains.
    cjk = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                     strip_accents=False, lowercase=False)
    splitter = pre_tokenizers.BertPreTokenizer()
    for path in input_files:
        try:
            text, replaced = read_text(path)
        except InputDataError as e:
            raise BuildVocabError(str(e)) from None
        if replaced:
            print(f"build_vocab: warning: {path}: {replaced} undecodable byte(s) replaced by "
                  "U+FFFD (the file is not valid UTF-8)", file=sys.stderr)
        lines = [line.strip() for line in text.split("\n")]
        del text
        batch = []
        for line in filter(None, lines):
            words = splitter.pre_tokenize_str(cjk.normalize_str(normalize_text(line,
                                                                               do_lower_case)))
            batch.append(" ".join(symbols.word(word) for word, _ in words))
            if len(batch) == LINES_PER_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch


def build_vocab(input_files, vocab_size, do_lower_case=True, num_unused_tokens=0,
                min_count=2, max_unique_chars=1000):
    """Returns the vocabulary as a list of tokens (at most vocab_size)."""
    for flag, value, least in (("vocab_size", vocab_size, 1), ("num_unused_tokens",
                               num_unused_tokens, 0), ("min_count", min_count, 0),
                               ("max_unique_chars", max_unique_chars, 1)):
        check_number(flag, value, at_least=least, integer=True, error=BuildVocabError)
    reserved = reserved_tokens(num_unused_tokens)
    if vocab_size <= len(reserved) + 10:
        raise BuildVocabError(f"--vocab_size={vocab_size} leaves no room next to the "
                              f"{len(reserved)} reserved tokens")
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # A character counts twice towards the alphabet: at a word's start and inside words.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_count, special_tokens=reserved,
        limit_alphabet=2 * max_unique_chars, show_progress=False)
    symbols = _Symbols()
    tokenizer.train_from_iterator(_words_as_symbols(input_files, do_lower_case, symbols),
                                  trainer)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocab = [token if i < len(reserved) else symbols.piece(token)
             for i, (token, _) in enumerate(by_id)]
    if len(vocab) <= len(reserved):
        raise BuildVocabError(f"no words in {', '.join(input_files)}; is the input empty?")
    assert vocab[:len(reserved)] == reserved, "trainer reordered the reserved tokens"
    if len(vocab) > vocab_size:  # the trainer keeps every character of the alphabet
        raise BuildVocabError(
            f"--vocab_size={vocab_size} is smaller than the input's alphabet: its characters "
            f"(at a word's start and inside words) and the reserved tokens are already "
            f"{len(vocab)} tokens; raise --vocab_size well above {len(vocab)} (pieces are "
            "learned in the room left) or lower --max_unique_chars")
    return vocab


def write_vocab(vocab, path):
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            f.write("".join(f"{token}\n" for token in vocab))
        os.replace(temporary, path)
    except OSError as e:
        raise BuildVocabError(f"--vocab_file {path}: cannot write it ({e.strerror})") from e


@dataclasses.dataclass
class BuildVocabConfig:
    input_files: str  # comma-separated files or globs
    vocab_file: str
    vocab_size: int = 30522
    do_lower_case: bool = True
    num_unused_tokens: int = 0
    min_count: int = 2
    max_unique_chars: int = 1000


def define_flags():
    """Defines the flags (defaults from BuildVocabConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(BuildVocabConfig)}
    flags.DEFINE_string("input_files", None,
                        "Comma-separated files or globs of text (e.g. format_text output).")
    flags.DEFINE_string("vocab_file", None, "Where to write the vocabulary.")
    flags.DEFINE_integer("vocab_size", d["vocab_size"], "Vocabulary size, reserved tokens "
                         "included (smaller when the corpus has too few distinct pieces).")
    flags.DEFINE_bool("do_lower_case", d["do_lower_case"],
                      "Uncased vocab (lower-case, strip accents); --nodo_lower_case for cased "
                      "vocabs and for Japanese (accent stripping drops dakuten).")
    flags.DEFINE_integer("num_unused_tokens", d["num_unused_tokens"],
                         "[unusedN] placeholders (Google's vocabs have 994).")
    flags.DEFINE_integer("min_count", d["min_count"], "Minimum frequency of a merged piece.")
    flags.DEFINE_integer("max_unique_chars", d["max_unique_chars"],
                         "Alphabet size: rarer characters become [UNK] (raise for CJK).")
    flags.mark_flags_as_required(["input_files", "vocab_file"])


def input_files(patterns: str, vocab_file: str) -> list[str]:
    """The files of --input_files, less --vocab_file (an earlier vocab matched by the glob
    would be learned from as text)."""
    try:
        files = expand_patterns(patterns)
    except InputDataError as e:
        raise BuildVocabError(f"--input_files: {e}") from None
    kept = [f for f in files if os.path.realpath(f) != os.path.realpath(vocab_file)]
    if len(kept) < len(files):
        print(f"build_vocab: note: not reading --vocab_file={vocab_file}, which --input_files "
              "matches (an earlier vocab is not text to learn from)", file=sys.stderr)
    if not kept:
        raise BuildVocabError(f"--input_files={patterns} matches only --vocab_file; name the "
                              "text files")
    return kept


def run(config: BuildVocabConfig) -> int:
    """Learns the vocab and writes it; BuildVocabError on bad input."""
    vocab = build_vocab(input_files(config.input_files, config.vocab_file), config.vocab_size,
                        config.do_lower_case, config.num_unused_tokens, config.min_count,
                        config.max_unique_chars)
    write_vocab(vocab, config.vocab_file)
    print(f"wrote {len(vocab)} tokens to {config.vocab_file}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, BuildVocabConfig, run, errors=(BuildVocabError,),
                        error_status=2)
