"""Learns a vocabulary from text, for pretraining BERT on a new corpus or language, and writes
its tokenizer spec beside it (bert_tf.data.tokenizer_spec; --tokenizer picks the recipe:
Google's `bert`, Japanese `mecab` and `character`, Korean `mecab-ko`, or `sentencepiece`).

Text is normalised and split into words exactly as bert_tf.data.tokenization does for that spec,
and Hugging Face `tokenizers`' BPE trainer (in Rust, where tensorflow-text's learner is pure
Python) picks the pieces: WordPiece's vocabulary is BPE's alphabet and merges, with "##" marking
a piece inside a word. `character` keeps the most frequent characters (as a word's first
character and inside words); `sentencepiece` trains a unigram model with the `sentencepiece`
library, whose ids are the vocab's lines.
WordPiece and character vocabs have Google's layout: [PAD]=0, then up to 99 [unusedN], then [UNK] [CLS] [SEP] [MASK], then
the remaining [unusedN], then the learned pieces.

Reproducible: the same input gives the same vocab in every run. The trainer breaks ties between
equally frequent pairs by their symbols' ids, and its WordPiece mode numbers the "##" pieces in
the order of a Rust HashMap (seeded per process: 2799 or 2800 tokens, each run another vocab, on
Alice at --vocab_size=5000). So every (character, inside a word or not) is handed to it as one
private-use character, numbered in first-seen order, and mapped back afterwards.

--initial_alphabet: characters that get both forms (c and ##c) whatever their frequency, so a
word with a character the trainer saw only at a word's start does not become one [UNK] (the
role of cl-tohoku/bert-japanese's make_alphabet_from_unidic.py): `corpus` for every character
of the input, `dictionary` for those of the words of the splitter's dictionary (UniDic's, read
from unidic-lite's compiled sys.dic, which holds what cl-tohoku reads from UniDic's lex.csv), or
a file.
"""

import collections
import dataclasses
import io
import os
import sys

from absl import flags
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import bert_tf
from bert_tf.data import tokenizer_spec, word_splitters
from bert_tf.data.files import (
    InputDataError,
    OutputDirError,
    expand_patterns,
    read_text,
    warn_replaced,
)
from bert_tf.data.normalization import MAX_CHARS_PER_WORD, Normalizer
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir
from bert_tf.data.tokenization import google_spec

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

    def both_forms(self, char):
        """The symbols of `char` at a word's start and inside a word."""
        return [self._code(False, char), self._code(True, char)]

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


def _lines(input_files):
    """The non-blank lines of every input file, in order."""
    for path in input_files:
        try:
            text, replaced = read_text(path)
        except InputDataError as e:
            raise BuildVocabError(str(e)) from None
        warn_replaced("build_vocab", path, replaced)
        lines = [line.strip() for line in text.split("\n")]
        del text
        yield from filter(None, lines)


def normalised_lines(input_files, spec):
    """The lines normalised as the spec says (what the subword model is trained on)."""
    normalizer = Normalizer(spec.normalization == "nfkc", spec.do_lower_case, spec.strip_accents)
    return map(normalizer, _lines(input_files))


def words_of_lines(input_files, spec):
    """Each line's words, as the spec's tokenizer splits them (longer ones than Google's
    max_input_chars_per_word, which become [UNK], left out)."""
    splitter = word_splitters.make_splitter(spec)
    for line in normalised_lines(input_files, spec):
        yield [w for w in splitter.words(line) if len(w) <= MAX_CHARS_PER_WORD]


def _symbol_batches(input_files, spec, symbols):
    """Batches of lines, each the line's words as symbols separated by spaces."""
    batch = []
    for words in words_of_lines(input_files, spec):
        batch.append(" ".join(symbols.word(word) for word in words))
        if len(batch) == LINES_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def alphabet_of(initial_alphabet, input_files, spec):
    """The characters of --initial_alphabet: "" none, "corpus" the input's, "dictionary" the
    word splitter's dictionary's, else a file's (normalised as the spec says)."""
    if not initial_alphabet:
        return []
    if initial_alphabet == "corpus":
        return sorted({c for words in words_of_lines(input_files, spec) for w in words for c in w})
    normalizer = Normalizer(spec.normalization == "nfkc", spec.do_lower_case, spec.strip_accents)
    if initial_alphabet == "dictionary":
        try:
            characters = word_splitters.dictionary_characters(spec.word_tokenizer_type)
        except word_splitters.WordSplitterError as e:
            raise BuildVocabError(f"--initial_alphabet=dictionary: {e}; pass corpus, or a file "
                                  "of characters") from None
        # As make_alphabet_from_unidic.py: each character normalised alone, kept when it stays
        # one printable character (7,012 of unidic-lite's 7,223 under NFKC, cl-tohoku's count).
        return sorted({n for n in map(normalizer, characters) if len(n) == 1 and n.isprintable()})
    try:
        with open(initial_alphabet, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BuildVocabError(f"--initial_alphabet={initial_alphabet}: cannot read it as UTF-8 "
                              f"text ({e}); pass corpus, dictionary, or a file of characters"
                              ) from None
    return sorted(set(normalizer(text)) - {" "})


def _check_size(vocab_size, reserved, **counts):
    """The flags' numbers: `counts` (name -> value) at least 0, vocab_size room enough."""
    for flag, value in {"vocab_size": vocab_size, **counts}.items():
        check_number(flag, value, at_least=1 if flag in ("vocab_size", "max_unique_chars") else 0,
                     integer=True, error=BuildVocabError)
    if vocab_size <= len(reserved) + 10:
        raise BuildVocabError(f"--vocab_size={vocab_size} leaves no room next to the "
                              f"{len(reserved)} reserved tokens")


def build_vocab(input_files, vocab_size, do_lower_case=True, num_unused_tokens=0,
                min_count=2, max_unique_chars=1000, spec=None, initial_alphabet=""):
    """Returns the WordPiece (or, for a character spec, character) vocabulary as a list of
    tokens (at most vocab_size). spec: how text is split (default: Google's rules with
    do_lower_case); initial_alphabet: see the module docstring."""
    spec = spec or google_spec(do_lower_case)
    check_number("num_unused_tokens", num_unused_tokens, at_least=0, integer=True,
                 error=BuildVocabError)
    reserved = reserved_tokens(num_unused_tokens)
    _check_size(vocab_size, reserved, min_count=min_count, max_unique_chars=max_unique_chars)
    alphabet = alphabet_of(initial_alphabet, input_files, spec)
    if spec.subword_tokenizer_type == "character":
        return _character_vocab(input_files, spec, vocab_size, reserved, min_count, alphabet)
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    symbols = _Symbols()
    # A character counts twice towards the alphabet: at a word's start and inside words.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_count, special_tokens=reserved,
        limit_alphabet=2 * max(max_unique_chars, len(alphabet)), show_progress=False,
        initial_alphabet=[code for c in alphabet for code in symbols.both_forms(c)])
    tokenizer.train_from_iterator(_symbol_batches(input_files, spec, symbols), trainer)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocab = [token if i < len(reserved) else symbols.piece(token)
             for i, (token, _) in enumerate(by_id)]
    if len(vocab) <= len(reserved):
        raise BuildVocabError(f"no words in {', '.join(map(str, input_files))}; is the input "
                              "empty?")
    assert vocab[:len(reserved)] == reserved, "trainer reordered the reserved tokens"
    if len(vocab) > vocab_size:  # the trainer keeps every character of the alphabet
        raise BuildVocabError(
            f"--vocab_size={vocab_size} is smaller than the input's alphabet: its characters "
            f"(at a word's start and inside words) and the reserved tokens are already "
            f"{len(vocab)} tokens; raise --vocab_size well above {len(vocab)} (pieces are "
            "learned in the room left) or lower --max_unique_chars")
    return vocab


def _character_vocab(input_files, spec, vocab_size, reserved, min_count, alphabet):
    """The most frequent (character, inside a word?) pairs as c / ##c, alphabet first."""
    counts = collections.Counter()
    for words in words_of_lines(input_files, spec):
        for word in words:
            counts[word[0]] += 1
            counts.update(f"##{c}" for c in word[1:])
    pieces = [p for c in alphabet for p in (c, f"##{c}")]
    chosen = set(pieces)
    pieces += [p for p, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
               if n >= min_count and p not in chosen]
    if not pieces:
        raise BuildVocabError(f"no words in {', '.join(map(str, input_files))}; is the input "
                              "empty?")
    return reserved + pieces[:vocab_size - len(reserved)]


def train_sentencepiece(input_files, vocab_size, spec, num_unused_tokens=0):
    """A SentencePiece unigram model of the normalised lines -> (vocab, model bytes). Its ids
    are the vocab's: [PAD]=0 [UNK]=1 [CLS] [SEP] [MASK] [unusedN]..., then the pieces. The model
    normalises nothing itself (identity rule): the spec's normaliser runs first, in Python, so
    that offsets map back to the original text."""
    import sentencepiece

    check_number("num_unused_tokens", num_unused_tokens, at_least=0, integer=True,
                 error=BuildVocabError)
    reserved = ["[CLS]", "[SEP]", "[MASK]", *[f"[unused{i}]" for i in range(num_unused_tokens)]]
    _check_size(vocab_size, reserved)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=normalised_lines(input_files, spec), model_writer=model,
            vocab_size=vocab_size, model_type="unigram", normalization_rule_name="identity",
            pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]", bos_id=-1, eos_id=-1,
            control_symbols=",".join(reserved), character_coverage=0.9995, num_threads=1,
            hard_vocab_limit=False,
            minloglevel=2)
    except RuntimeError as e:
        raise BuildVocabError(f"sentencepiece could not train on {', '.join(map(str, input_files))}"
                              f" with --vocab_size={vocab_size}: {e}") from None
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    return vocab, model.getvalue()


def _write(path, data):
    """Writes bytes under a temporary name, then renames."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        temporary = f"{path}.tmp"
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except OSError as e:
        raise BuildVocabError(f"--vocab_file {path}: cannot write it ({e.strerror})") from e


def write_vocab(vocab, path):
    _write(path, "".join(f"{token}\n" for token in vocab).encode("utf-8"))


def sentencepiece_model_path(vocab_file):
    """vocab.txt -> vocab.sentencepiece.model."""
    return f"{os.path.splitext(str(vocab_file))[0]}.sentencepiece.model"


@dataclasses.dataclass
class BuildVocabConfig:
    input_files: str  # comma-separated files or globs
    vocab_file: str
    vocab_size: int = 30522
    tokenizer: str = "bert"
    # None: the --tokenizer recipe's (tokenizer_spec.PRESETS).
    do_lower_case: bool | None = None
    strip_accents: bool | None = None
    normalization: str | None = None
    tokenize_chinese_chars: bool | None = None
    initial_alphabet: str = ""
    num_unused_tokens: int = 0
    min_count: int = 2
    max_unique_chars: int = 1000

    def spec(self):
        """The TokenizerSpec of the flags, with the installed dictionary of its splitter."""
        try:
            spec = tokenizer_spec.preset_spec(self.tokenizer, self.do_lower_case,
                                              self.strip_accents, self.normalization,
                                              self.tokenize_chinese_chars)
            if spec.word_tokenizer_type in word_splitters.DICTIONARY_PACKAGES:
                spec = dataclasses.replace(spec, dictionary=word_splitters.dictionary_identity(
                    spec.word_tokenizer_type))
            return spec.validate("the build_vocab flags")
        except (tokenizer_spec.TokenizerSpecError, word_splitters.WordSplitterError) as e:
            raise BuildVocabError(str(e)) from None


def define_flags():
    """Defines the flags (defaults from BuildVocabConfig)."""
    d = {f.name: f.default for f in dataclasses.fields(BuildVocabConfig)}
    flags.DEFINE_string("input_files", None,
                        "Comma-separated files or globs of text (e.g. format_text output).")
    flags.DEFINE_string("vocab_file", None, "Where to write the vocabulary (its tokenizer spec "
                        "goes beside it: vocab.txt -> vocab.tokenizer.json).")
    flags.DEFINE_integer("vocab_size", d["vocab_size"], "Vocabulary size, reserved tokens "
                         "included (smaller when the corpus has too few distinct pieces).")
    flags.DEFINE_enum("tokenizer", d["tokenizer"], list(tokenizer_spec.PRESETS),
                      "The recipe: bert (Google's split + WordPiece), mecab (Japanese, "
                      "cl-tohoku: NFKC, MeCab/unidic-lite words + WordPiece), character "
                      "(MeCab words, one piece per character), mecab-ko (Korean, KLUE: Mecab-ko "
                      "morphemes + WordPiece), sentencepiece (unigram, any language).")
    flags.DEFINE_bool("do_lower_case", d["do_lower_case"],
                      "Lower-case (default: true for --tokenizer=bert, false for the others).")
    flags.DEFINE_bool("strip_accents", d["strip_accents"],
                      "Drop accents (never kana voicing marks or Hangul); default: as "
                      "--do_lower_case for bert, false for the others.")
    flags.DEFINE_enum("normalization", d["normalization"], list(tokenizer_spec.NORMALIZATIONS),
                      "Unicode normalisation (default: nfkc for mecab, character and "
                      "sentencepiece, none for bert and mecab-ko).")
    flags.DEFINE_bool("tokenize_chinese_chars", d["tokenize_chinese_chars"],
                      "Every CJK ideograph its own word (default: true for bert only).")
    flags.DEFINE_string("initial_alphabet", d["initial_alphabet"],
                        "Characters kept in both forms (c, ##c) whatever their frequency: "
                        "'corpus' (every input character), 'dictionary' (those of the words of "
                        "the MeCab dictionary, UniDic: --tokenizer=mecab or character, as "
                        "cl-tohoku) or a file of characters.")
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
    """Learns the vocab and writes it with its tokenizer spec; BuildVocabError on bad input."""
    spec = config.spec()
    files = input_files(config.input_files, config.vocab_file)
    try:  # before the learning, which can take hours
        check_output_dir(os.path.dirname(os.path.abspath(config.vocab_file)), "vocab_file")
    except OutputDirError as e:
        raise BuildVocabError(f"{e} (the directory of {config.vocab_file})") from None
    if spec.subword_tokenizer_type == "sentencepiece":
        vocab, model = train_sentencepiece(files, config.vocab_size, spec,
                                           config.num_unused_tokens)
        model_path = sentencepiece_model_path(config.vocab_file)
        _write(model_path, model)
        spec = dataclasses.replace(spec, sentencepiece_model=os.path.basename(model_path),
                                   sentencepiece_model_sha256=tokenizer_spec.file_sha256(
                                       model_path))
    else:
        vocab = build_vocab(files, config.vocab_size, spec.do_lower_case,
                            config.num_unused_tokens, config.min_count, config.max_unique_chars,
                            spec, config.initial_alphabet)
    write_vocab(vocab, config.vocab_file)
    path = tokenizer_spec.write_spec(spec, config.vocab_file)
    print(f"wrote {len(vocab)} tokens to {config.vocab_file}, tokenizer spec {path}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, BuildVocabConfig, run, errors=(BuildVocabError,),
                        error_status=2)
