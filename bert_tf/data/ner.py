"""Named-entity recognition data: readers, label alignment to word pieces, entity F1.

Two input formats, told apart by their first line:
  - IOB2 token files (CoNLL style, e.g. the shared Japanese corpus): one token a line, any
    feature columns, the IOB2 tag in the last column (tab-separated, or space-separated when a
    line has no tab), a blank line between sentences. Japanese tokens are written without
    spaces between them, so a sentence's running text is its tokens concatenated.
  - KLUE-NER's character files: `## ` comment lines (a header, and `## id<TAB>marked sentence`
    before each sentence), then one character a line (`CHAR<TAB>TAG`, spaces included), a blank
    line between sentences. The running text is the characters concatenated.
Either way the tokens or characters are the sentence's *units*, tagged IOB2 (O, B-TYPE, I-TYPE
continuing an entity of the same TYPE); anything else is an error naming the file and line.

The running text is tokenized once, exactly as in pretraining, and labels are aligned by
character offsets: a piece's label is the label of the unit holding its first character, and
only the first piece that starts in a unit is scored (BERT's first-word-piece rule; later pieces
of the same unit carry no label). Units with no piece starting in them (inside a piece that began
in an earlier unit, or spaces the tokenizer drops) continue the entity of the unit before them.
A gold entity whose first or last character boundary falls inside a piece cannot be labelled
exactly; `align` counts them.

Entity F1 is seqeval's default convention (that of conlleval): an entity is a maximal run of
B-X I-X ... of one type with exact start, end and type; in predictions an I-X that does not
continue an X starts a new entity.
"""

import collections
import dataclasses
import re

from bert_tf.data.files import InputDataError, read_text

OUTSIDE = "O"
_TAG = re.compile(r"(O|[BI]-\S+)\Z")
KLUE, IOB2 = "klue", "iob2"
HELD_OUT_SHARE = 0.1  # a single file: its last 10% is dev and test (hironsancorpus' own split)


class NerDataError(ValueError):
    """NER input that cannot be used; the message names the file and line."""


@dataclasses.dataclass
class NerSentence:
    """One sentence: units (tokens or characters), their IOB2 tags and the lines it came from."""

    units: list[str]
    tags: list[str]
    lines: list[str]  # the input lines (KLUE: with its `## id` line), to write folds back
    line_number: int  # of its first unit in the file

    @property
    def text(self) -> str:
        """The running text: the units concatenated (no separator)."""
        return "".join(self.units)

    def starts(self) -> list[int]:
        """Character offset of each unit in `text`."""
        offsets, position = [], 0
        for unit in self.units:
            offsets.append(position)
            position += len(unit)
        return offsets


# --------------------------------------------------------------------------- reading


def read_ner_file(path: str, lenient: bool = False) -> list[NerSentence]:
    """Sentences of an IOB2 token file or a KLUE character file (see the module docstring).

    Args:
      path: the file.
      lenient: read an I-X that continues no X as B-X (conlleval's reading) instead of refusing
        it. The shared hironsancorpus file has 2 (an entity continued across a closing quote).

    Raises:
      NerDataError naming the file and line: a missing tag column, a tag that is not IOB2, an
      I- tag that continues no entity of its type, or no sentences at all.
    """
    try:
        text, replaced = read_text(path)
    except (InputDataError, OSError) as e:
        raise NerDataError(f"NER data {path}: {e}") from None
    if replaced:
        line = text.count("\n", 0, text.index("\ufffd")) + 1
        raise NerDataError(f"{path}:{line}: not UTF-8; convert the file to UTF-8 (iconv)")
    lines = text.removesuffix("\n").split("\n")
    first = next((line for line in lines if line.strip()), "")
    style = KLUE if first.startswith("## ") else IOB2
    sentences, current, comments = [], None, []
    for number, line in enumerate(lines, 1):
        line = line.removesuffix("\r")
        if style == KLUE and line.startswith("## "):
            comments.append(line)
        elif not line.strip():
            _finish(current, sentences, path, lenient)
            current, comments = None, []
        else:
            if current is None:
                current = NerSentence([], [], comments, number)
            unit, tag = _unit_and_tag(line, style, path, number)
            current.units.append(unit)
            current.tags.append(tag)
            current.lines.append(line)
    _finish(current, sentences, path, lenient)
    if not sentences:
        raise NerDataError(f"{path}: no sentences; expected one token a line with its IOB2 tag "
                           "in the last column (or KLUE's CHAR<TAB>TAG lines)")
    return sentences


def _unit_and_tag(line: str, style: str, path: str, number: int) -> tuple[str, str]:
    if style == KLUE:
        fields = line.split("\t")
        if len(fields) != 2 or len(fields[0]) != 1:
            raise NerDataError(f"{path}:{number}: expected KLUE's CHAR<TAB>TAG (one character, "
                               f"a tab, its tag), got {line!r}")
    else:
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) < 2 or not fields[0]:
            raise NerDataError(f"{path}:{number}: no tag column in {line!r}; each token line "
                               "needs the token, then the IOB2 tag in the last column")
    tag = fields[-1].strip()
    if not _TAG.match(tag):
        raise NerDataError(f"{path}:{number}: tag {tag!r} is not IOB2 (O, B-TYPE or I-TYPE)")
    return fields[0], tag


def _finish(sentence, sentences, path, lenient) -> None:
    if sentence is None:
        return
    previous = OUTSIDE
    for offset, tag in enumerate(sentence.tags):
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            if not lenient:
                raise NerDataError(
                    f"{path}:{sentence.line_number + offset}: {tag} follows {previous}: an I- "
                    f"tag must continue a B-{tag[2:]} or I-{tag[2:]} (IOB2); fix the file, or "
                    f"pass --ner_lenient_tags to read it as B-{tag[2:]} (conlleval's rule)")
            tag = sentence.tags[offset] = "B-" + tag[2:]
        previous = tag
    sentences.append(sentence)


def split_held_out(sentences: list, share: float = HELD_OUT_SHARE) -> tuple[list, list]:
    """(first 1 - share, last share) of the sentences: hironsancorpus' own split (90/10)."""
    cut = len(sentences) - max(1, round(share * len(sentences)))
    return sentences[:cut], sentences[cut:]


def write_sentences(sentences: list[NerSentence], path: str) -> None:
    """Writes sentences in the format they were read in (e.g. cross-validation folds)."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines("\n".join(s.lines) + "\n\n" for s in sentences)


# --------------------------------------------------------------------------- entities and F1


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, first unit, end unit) of each entity; an I-X that continues no X starts one."""
    found, current = [], None
    for i, tag in enumerate([*tags, OUTSIDE]):
        kind = tag[2:]
        if current and (tag == OUTSIDE or tag.startswith("B-") or kind != current[0]):
            found.append((current[0], current[1], i))
            current = None
        if tag != OUTSIDE and current is None:
            current = (kind, i)
    return found


def entity_f1(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Micro precision, recall and F1 over exact (type, start, end) entities, and per type.

    Args:
      gold, predicted: per sentence, one tag per unit.
    """
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> gold, predicted, correct
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        gold_set, predicted_set = set(entities(gold_tags)), set(entities(predicted_tags))
        for kind, *_ in gold_set:
            counts[kind][0] += 1
        for kind, *_ in predicted_set:
            counts[kind][1] += 1
        for kind, *_ in gold_set & predicted_set:
            counts[kind][2] += 1
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    return {**_prf(*total), "per_type": {kind: _prf(*c) for kind, c in sorted(counts.items())}}


def _prf(gold: int, predicted: int, correct: int) -> dict:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "gold": gold,
            "predicted": predicted, "correct": correct}


# --------------------------------------------------------------------------- alignment


@dataclasses.dataclass
class Alignment:
    """How one sentence's pieces map onto its units.

    groups: piece ids of each scored unit (the pieces whose first character lies in it), in
      text order; the first carries the unit's tag.
    heads: the unit index of each group.
    covered: per unit, whether its first character lies inside some piece.
    boundaries_inside: gold entities with a start or end boundary strictly inside a piece.
    """

    sentence: NerSentence
    groups: list[list[int]]
    heads: list[int]
    covered: list[bool]
    boundaries_inside: int


def align(sentence: NerSentence, pieces) -> Alignment:
    """Aligns the pieces of `sentence.text` (objects with .id, .start, .end character offsets)
    to its units."""
    starts, length = sentence.starts(), len(sentence.text)
    unit_of = [0] * length
    for unit, (start, text) in enumerate(zip(starts, sentence.units, strict=True)):
        unit_of[start:start + len(text)] = [unit] * len(text)
    covered, inside = [False] * (length + 1), [False] * (length + 1)
    groups, heads = [], []
    for piece in sorted(pieces, key=lambda p: p.start):
        if piece.end <= piece.start:
            continue
        covered[piece.start:piece.end] = [True] * (piece.end - piece.start)
        inside[piece.start + 1:piece.end] = [True] * (piece.end - piece.start - 1)
        unit = unit_of[piece.start]
        if heads and heads[-1] == unit:
            groups[-1].append(piece.id)
        else:
            groups.append([piece.id])
            heads.append(unit)
    cut = 0
    for _, first, end in entities(sentence.tags):
        last = starts[end - 1] + len(sentence.units[end - 1])
        cut += inside[starts[first]] or inside[last]
    return Alignment(sentence, groups, heads, [covered[s] for s in starts], cut)


def unit_tags(alignment: Alignment, head_tags: list[str]) -> list[str]:
    """One predicted tag per unit from the tags of the scored units (`alignment.heads`).

    A unit inside a piece that began in an earlier unit continues that unit's entity; a unit no
    piece covers (a dropped space) continues it only if the next scored unit does too.
    """
    by_unit = dict(zip(alignment.heads, head_tags, strict=True))
    tags, previous = [], OUTSIDE
    for unit in range(len(alignment.sentence.units)):
        if unit in by_unit:
            tag = by_unit[unit]
        elif previous == OUTSIDE:
            tag = OUTSIDE
        elif alignment.covered[unit]:
            tag = "I-" + previous[2:]
        else:
            following = next((by_unit[u] for u in alignment.heads if u > unit), OUTSIDE)
            tag = following if following == "I-" + previous[2:] else OUTSIDE
        tags.append(tag)
        previous = tag
    return tags
