"""Learns a WordPiece vocabulary from text, for pretraining BERT on a new corpus or language.

Text is normalised exactly as bert_tf.tokenization does (Google's rules), split into words on
whitespace, punctuation and CJK characters, and Hugging Face `tokenizers`' WordPiece trainer
(Rust; tensorflow-text's Python learner took minutes on a 1 MB corpus) picks the pieces.
Layout as Google's vocabs: [PAD]=0, then up to 99 [unusedN], then [UNK] [CLS] [SEP] [MASK], then
the remaining [unusedN], then the learned pieces.
"""

import argparse
import glob
import os
import sys

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bert_tf.tokenization import normalize_text

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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bert_tf.build_vocab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input_files", required=True,
                        help="comma-separated files or globs of text (e.g. format_text output)")
    parser.add_argument("--vocab_file", required=True, help="where to write the vocabulary")
    parser.add_argument("--vocab_size", type=int, default=30522,
                        help="vocabulary size, reserved tokens included (smaller when the "
                             "corpus has too few distinct pieces)")
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True,
                        help="uncased vocab (lower-case, strip accents); use --no-do_lower_case "
                             "for cased vocabs and for Japanese (accent stripping drops dakuten)")
    parser.add_argument("--num_unused_tokens", type=int, default=0,
                        help="[unusedN] placeholders (Google's vocabs have 994)")
    parser.add_argument("--min_count", type=int, default=2,
                        help="minimum frequency of a merged piece")
    parser.add_argument("--max_unique_chars", type=int, default=1000,
                        help="alphabet size: rarer characters become [UNK] (raise for CJK)")
    args = parser.parse_args(argv)
    files = []
    for pattern in (p.strip() for p in args.input_files.split(",")):
        if pattern:
            matches = sorted(glob.glob(pattern))
            if not matches:
                print(f"build_vocab: error: --input_files: nothing matches {pattern!r}",
                      file=sys.stderr)
                return 2
            files.extend(matches)
    try:
        vocab = build_vocab(files, args.vocab_size, args.do_lower_case, args.num_unused_tokens,
                            args.min_count, args.max_unique_chars)
        write_vocab(vocab, args.vocab_file)
    except BuildVocabError as e:
        print(f"build_vocab: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(vocab)} tokens to {args.vocab_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
