"""How a vocab's tokenizer splits text: its words, pieces and ids.

    python -m bert_tf tokenize --vocab_file=vocab.txt "パッケージをインストールします。"
    python -m bert_tf tokenize --vocab_file=vocab.txt --input_file=sentences.txt --json

The tokenizer is the one every command uses (load_tokenizer: the vocab's tokenizer spec, or
Google's rules without one). Each text prints its spec once, then per text: the splitter's
words, the pieces (each word's pieces joined by spaces, words by " | ") and the ids; --json
prints one object per text with every piece's token, id, character offsets and word index.
"""

import dataclasses
import json

from absl import flags

import bert_tf
from bert_tf.data import shared_flags
from bert_tf.data.files import InputDataError, read_text, warn_replaced
from bert_tf.data.tokenization import VocabError, load_tokenizer


class TokenizeError(ValueError):
    """No text to tokenize, or an unreadable --input_file."""


@dataclasses.dataclass
class TokenizeConfig:
    vocab_file: str
    text: list[str] = dataclasses.field(default_factory=list)  # the positional arguments
    input_file: str = ""
    do_lower_case: bool | None = None
    allow_dictionary_mismatch: bool = False
    json: bool = False


def define_flags() -> None:
    d = bert_tf.flag_defaults(TokenizeConfig)
    flags.DEFINE_string("vocab_file", None, "The vocab (its tokenizer spec is read beside it).")
    flags.DEFINE_string("input_file", d["input_file"], "Tokenize every non-blank line of this "
                        "file (besides the texts given as arguments).")
    shared_flags.define_tokenizer_flags(d)
    flags.DEFINE_bool("json", d["json"], "One JSON object per text instead of lines.")
    flags.mark_flag_as_required("vocab_file")


def texts_of(config: TokenizeConfig) -> list[str]:
    texts = list(config.text)
    if config.input_file:
        try:
            content, replaced = read_text(config.input_file)
        except InputDataError as e:
            raise TokenizeError(f"--input_file: {e}") from None
        warn_replaced("tokenize", config.input_file, replaced)
        texts += [line for line in content.split("\n") if line.strip()]
    if not texts:
        raise TokenizeError("nothing to tokenize: give texts as arguments or --input_file")
    return texts


def describe(tokenizer, text) -> dict:
    """{text, words, pieces: [{token, id, start, end, word}]} of one text."""
    pieces = tokenizer.tokenize_with_offsets(text)
    words = {}
    for piece in pieces:
        start, end = words.get(piece.word, (piece.start, piece.end))
        words[piece.word] = (min(start, piece.start), max(end, piece.end))
    return {"text": text, "words": [text[start:end] for start, end in words.values()],
            "pieces": [dataclasses.asdict(p) for p in pieces]}


def format_lines(description) -> str:
    by_word = {}
    for piece in description["pieces"]:
        by_word.setdefault(piece["word"], []).append(piece["token"])
    return "\n".join([
        f"text:   {description['text']}",
        f"words:  {' | '.join(description['words'])}",
        f"pieces: {' | '.join(' '.join(tokens) for tokens in by_word.values())}",
        f"ids:    {' '.join(str(p['id']) for p in description['pieces'])}"])


def run(config: TokenizeConfig) -> int:
    texts = texts_of(config)
    tokenizer = load_tokenizer(config.vocab_file, config.do_lower_case,
                               config.allow_dictionary_mismatch)
    if not config.json:
        print(f"spec:   {json.dumps(tokenizer.spec.to_json(), ensure_ascii=False)}")
    for text in texts:
        description = describe(tokenizer, text)
        print(json.dumps(description, ensure_ascii=False) if config.json
              else format_lines(description))
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, TokenizeConfig, run, errors=(TokenizeError, VocabError),
                        error_status=2, positional="text")
