"""CoNLL-U (Universal Dependencies) sentences: words, UPOS tags and dependency heads.

Multi-word token ranges (`3-4`) and empty nodes (`5.1`) are normal UD and are skipped: the
syntactic words are what the tags and heads describe.
"""

import dataclasses
import os

from bert_tf.data.files import InputDataError, read_exact_text


class ConlluError(ValueError):
    """Malformed CoNLL-U input (the message names the file and line)."""


@dataclasses.dataclass
class ParsedSentence:
    words: list[str]
    heads: list[int]  # 1-based index of each word's syntactic head, 0 = root, -1 = not given
    relations: list[str]  # universal part only (nmod:poss -> nmod)
    upos: list[str] = dataclasses.field(default_factory=list)
    sent_id: str = ""


def read_conllu(path, flag="conllu", require_heads=True):
    """Sentences of a CoNLL-U file.

    Args:
      path: the file.
      flag: the flag that named it, for errors.
      require_heads: whether every word must have a numeric HEAD (gold parses).

    Raises:
      ConlluError naming the file and line.
    """
    sentences, current = [], _new_sentence("")
    line_number = 0
    for line_number, line in enumerate(_lines(path, flag), 1):
        if not line.strip():
            _finish(current, sentences, path, line_number)
            current = _new_sentence("")
        elif line.startswith("# sent_id"):
            current.sent_id = line.partition("=")[2].strip()
        elif not line.startswith("#"):
            _add_word(current, line.split("\t"), path, line_number, require_heads)
    _finish(current, sentences, path, line_number)
    if not sentences:
        raise ConlluError(f"{path}: no sentences found; expected CoNLL-U (10 tab-separated "
                          "fields per word, blank line between sentences)")
    return sentences


def _lines(path, flag):
    """The lines of a UTF-8 CoNLL-U file (a byte-order mark and .gz/.bz2/.xz are fine); a byte
    that is not UTF-8 is an error naming its line (it would change a word)."""
    if not os.path.isfile(path):
        raise ConlluError(f"--{flag}: no such file {path}")
    try:
        text = read_exact_text(path)
    except InputDataError as e:
        raise ConlluError(f"--{flag}: {e}") from None
    return text.removesuffix("\n").split("\n")


def _new_sentence(sent_id):
    return ParsedSentence([], [], [], [], sent_id)


def _add_word(sentence, fields, path, line_number, require_heads):
    if len(fields) != 10:
        raise ConlluError(f"{path}:{line_number}: expected 10 tab-separated CoNLL-U "
                          f"fields, found {len(fields)}")
    word_id = fields[0]
    if "-" in word_id or "." in word_id:  # multi-word token range or empty node
        return
    if not _is_number(word_id) or int(word_id) != len(sentence.words) + 1:
        raise ConlluError(f"{path}:{line_number}: word id {word_id!r}, expected "
                          f"{len(sentence.words) + 1} (ids must count up from 1 in each sentence)")
    if not _is_number(fields[6]) and require_heads:
        raise ConlluError(f"{path}:{line_number}: HEAD field {fields[6]!r} is not a "
                          f"number (this needs gold parses)")
    sentence.words.append(fields[1])
    sentence.upos.append(fields[3])
    sentence.heads.append(int(fields[6]) if _is_number(fields[6]) else -1)
    sentence.relations.append(fields[7].split(":")[0])


def _is_number(field):
    """ASCII digits only: str.isdigit() also accepts '²' or '٣', which int() refuses."""
    return field.isascii() and field.isdigit()


def _finish(sentence, sentences, path, line_number):
    if not sentence.words:
        return
    for i, head in enumerate(sentence.heads):
        if not -1 <= head <= len(sentence.words):
            raise ConlluError(f"{path}: sentence ending at line {line_number}: word {i + 1} "
                              f"has head {head}, outside 0..{len(sentence.words)}")
        if head == i + 1:
            raise ConlluError(f"{path}: sentence ending at line {line_number}: word {i + 1} "
                              "is its own head; a word's HEAD is another word or 0 (root)")
    sentences.append(sentence)
