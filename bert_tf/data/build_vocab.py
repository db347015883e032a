"""Learns a WordPiece vocabulary from text, for pretraining BERT on a new corpus or language.

Text is normalised exactly as bert_tf.data.tokenization does (Google's rules), split into words on
whitespace, punctuation and CJK characters, and Hugging Face `tokenizers`' WordPiece trainer
(in Rust, where tensorflow-text's learner is pure Python) picks the pieces.
Layout as Google's vocabs: [PAD]=0, then up to 99 [unusedN], then [UNK] [CLS] [SEP] [MASK], then
the remaining [unusedN], then the learned pieces.
"""

import dataclasses
import os

from absl import flags
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

import bert_tf
from bert_tf.data.files import InputDataError, expand_patterns
from bert_tf.data.tokenization import normalize_text

LINES_PER_BATCH = 8192


class BuildVocabError(ValueError):
    pass


def reserved_tokens(num_unused_tokens):
    unused = [f"[unused{i}]" for i in range(num_unused_tokens)]
    return ["[PAD]", *unused[:99], "[UNK]", "[CLS]", "[SEP]", "[MASK]", *unused[99:]]


def _normalized_batches(input_files, do_lower_case):
    for path in input_files:
        batch = []
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if line:
                        batch.append(normalize_text(line, do_lower_case))
                    if len(batch) == LINES_PER_BATCH:
                        yield batch
                        batch = []
        except OSError as e:
            raise BuildVocabError(f"cannot read input file {path}: {e.strerror}") from e
        if batch:
            yield batch


def build_vocab(input_files, vocab_size, do_lower_case=True, num_unused_tokens=0,
                min_count=2, max_unique_chars=1000):
    """Returns the vocabulary as a list of tokens (at most vocab_size)."""
    reserved = reserved_tokens(num_unused_tokens)
    if vocab_size <= len(reserved) + 10:
        raise BuildVocabError(f"--vocab_size={vocab_size} leaves no room next to the "
                              f"{len(reserved)} reserved tokens")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # Text arrives normalised; only the CJK splitting of Google's BasicTokenizer remains.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_count, special_tokens=reserved,
        limit_alphabet=max_unique_chars, continuing_subword_prefix="##", show_progress=False)
    tokenizer.train_from_iterator(_normalized_batches(input_files, do_lower_case), trainer)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocab = [token for token, _ in by_id]
    if len(vocab) <= len(reserved):
        raise BuildVocabError(f"no words in {', '.join(input_files)}; is the input empty?")
    assert vocab[:len(reserved)] == reserved, "trainer reordered the reserved tokens"
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


def input_files(patterns: str) -> list[str]:
    try:
        return expand_patterns(patterns)
    except InputDataError as e:
        raise BuildVocabError(f"--input_files: {e}") from None


def run(config: BuildVocabConfig) -> int:
    """Learns the vocab and writes it; BuildVocabError on bad input."""
    vocab = build_vocab(input_files(config.input_files), config.vocab_size,
                        config.do_lower_case, config.num_unused_tokens, config.min_count,
                        config.max_unique_chars)
    write_vocab(vocab, config.vocab_file)
    print(f"wrote {len(vocab)} tokens to {config.vocab_file}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, BuildVocabConfig, run, errors=(BuildVocabError,),
                        error_status=2)
