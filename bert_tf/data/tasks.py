"""Fine-tuning data: task files -> labelled examples -> fixed-length numpy features.

Tasks (`--task_name`):
  - `pos`: Universal Dependencies UPOS tagging from CoNLL-U files (`*train.conllu`,
    `*dev.conllu`, `*test.conllu` in --data_dir); multiword-token ranges and empty nodes are
    skipped by `conllu.read_conllu`. The first word piece of each word carries its tag (BERT's
    NER setup); accuracy is over words.
  - `ner`: named entities from IOB2 token files or KLUE's character files (bert_tf/data/ner.py):
    --data_dir is a directory with train/dev/test `.txt` or `.tsv` files, or one file whose
    first 90% trains and last 10% is dev and test. Each sentence's running text is tokenized
    once (the tokenizer's character offsets align the tags); scored by entity F1.
  - `cola`, `sst-2`, `mrpc`, `mnli`: GLUE TSV files, read with the columns, headers and label
    sets Google's run_classifier.py uses (SST-2 as GLUE distributes it).
  - `tsv`: any TSV with --text_a_column, --text_b_column (-1: none) and --label_column; labels
    are those seen in training.

Bad input: a TSV row whose column count differs from the file's first row, a GLUE file with
another column count than GLUE's (e.g. CoLA files read as SST-2), or a label outside a fixed GLUE
label set, is an error naming file and line. Dev/test labels never seen in training
are counted (and score as errors). Sequences longer than --max_seq_length are split (tagging:
at word boundaries) or truncated (classification), and counted.
"""

import collections
import dataclasses
import glob
import os

import numpy as np

from bert_tf.data import conllu, ner
from bert_tf.data.files import InputDataError, read_exact_text

SPLITS = ("train", "dev", "test")
TAGGING_TASKS = ("pos", "ner")
UNSEEN_LABEL = -1  # label id of a dev/test label training never saw: never predicted


class TaskDataError(ValueError):
    """Task files that cannot be used; the message names the file (and line) and the fix."""


@dataclasses.dataclass
class Example:
    """One sequence (pair) classification example."""

    guid: str
    text_a: str
    text_b: str | None
    label: str


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """How one GLUE task's files are read (Google's run_classifier.py processors)."""

    files: dict  # split -> file name in --data_dir
    header: dict  # split -> whether the first line is a header
    columns: dict  # split -> (text_a, text_b or None, label or None) column indexes
    labels: tuple  # the fixed label set
    test_label: str  # the placeholder label of unlabelled test rows
    # split -> the file's column count as GLUE distributes it: files of another task (whose
    # label column may hold the same 0/1) are refused instead of read by the wrong columns.
    widths: dict


_PLAIN_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
GLUE_TASKS = {
    "cola": GlueTask(_PLAIN_FILES, {"train": False, "dev": False, "test": True},
                     {"train": (3, None, 1), "dev": (3, None, 1), "test": (1, None, None)},
                     ("0", "1"), "0", {"train": 4, "dev": 4, "test": 2}),
    "sst-2": GlueTask(_PLAIN_FILES, {"train": True, "dev": True, "test": True},
                      {"train": (0, None, 1), "dev": (0, None, 1), "test": (1, None, None)},
                      ("0", "1"), "0", {"train": 2, "dev": 2, "test": 2}),
    "mrpc": GlueTask(_PLAIN_FILES, {"train": True, "dev": True, "test": True},
                     {split: (3, 4, None if split == "test" else 0) for split in SPLITS},
                     ("0", "1"), "0", {"train": 5, "dev": 5, "test": 5}),
    # dev has the five annotators' labels before gold_label, so the label is the last column.
    "mnli": GlueTask({"train": "train.tsv", "dev": "dev_matched.tsv",
                      "test": "test_matched.tsv"}, {split: True for split in SPLITS},
                     {split: (8, 9, None if split == "test" else -1) for split in SPLITS},
                     ("contradiction", "entailment", "neutral"), "contradiction",
                     {"train": 12, "dev": 16, "test": 10}),
}
TASK_NAMES = (*TAGGING_TASKS, *GLUE_TASKS, "tsv")


@dataclasses.dataclass(frozen=True)
class TsvColumns:
    """The generic `tsv` task's layout (0-based columns; text_b -1 = single sentences)."""

    text_a: int = 0
    text_b: int = -1
    label: int = 1
    has_header: bool = False


# --------------------------------------------------------------------------- reading


def task_file(task_name: str, data_dir: str, split: str) -> str:
    """The file of `split` for the task in --data_dir (an error if it is missing)."""
    if task_name == "ner":
        if os.path.isfile(data_dir):
            return data_dir
        matches = [os.path.join(data_dir, f"{split}.{ext}") for ext in ("txt", "tsv")]
        matches = [path for path in matches if os.path.isfile(path)]
        if len(matches) != 1:
            raise TaskDataError(f"--data_dir={data_dir}: expected one of {split}.txt or "
                                f"{split}.tsv for --task_name=ner, found {len(matches)} (or "
                                "pass one file: its last 10% is dev and test)")
        return matches[0]
    if task_name in TAGGING_TASKS:
        matches = sorted(glob.glob(os.path.join(data_dir, f"*{split}.conllu")))
        if len(matches) != 1:
            raise TaskDataError(f"--data_dir={data_dir}: expected one file named *{split}.conllu "
                                f"for --task_name={task_name}, found {len(matches)}")
        return matches[0]
    name = GLUE_TASKS[task_name].files[split] if task_name in GLUE_TASKS else f"{split}.tsv"
    path = os.path.join(data_dir, name)
    if not os.path.isfile(path):
        raise TaskDataError(f"--data_dir={data_dir}: no {name} for --task_name={task_name} "
                            f"({split} split)")
    return path


def read_tsv(path: str) -> list[list[str]]:
    """Rows of a tab-separated file (no quoting, as Google reads GLUE); every row must have the
    first row's number of columns."""
    try:
        text = read_exact_text(path)
    except InputDataError as e:
        raise TaskDataError(str(e)) from None
    rows = [line.rstrip("\r").split("\t") for line in text.split("\n") if line.strip()]
    for number, row in enumerate(rows, 1):
        if len(row) != len(rows[0]):
            raise TaskDataError(f"{path}:{number}: {len(row)} tab-separated columns, but the "
                                f"first line has {len(rows[0])}; every line needs the same "
                                "columns (a stray tab in the text?)")
    return rows


def read_examples(task_name: str, data_dir: str, split: str,
                  columns: TsvColumns = TsvColumns()) -> list[Example]:
    """Classification examples of one split (unlabelled test rows get a placeholder label)."""
    path = task_file(task_name, data_dir, split)
    rows = read_tsv(path)
    if task_name in GLUE_TASKS:
        task = GLUE_TASKS[task_name]
        header, (a, b, label) = task.header[split], task.columns[split]
        placeholder = task.test_label
        if rows and len(rows[0]) != task.widths[split]:
            raise TaskDataError(
                f"{path}:1: {len(rows[0])} tab-separated columns, but --task_name={task_name}'s "
                f"{split} file has {task.widths[split]} as GLUE distributes it; are these "
                "another task's files? (--task_name=tsv reads any columns)")
    else:
        header, placeholder = columns.has_header, ""
        a, b = columns.text_a, None if columns.text_b < 0 else columns.text_b
        label = None if split == "test" else columns.label
    rows = rows[1 if header else 0:]
    if not rows:
        raise TaskDataError(f"{path}: no examples (an empty file, or only a header)")
    width = len(rows[0])
    wanted = [c for c in (a, b, label) if c is not None]
    if max(c if c >= 0 else -c - 1 for c in wanted) >= width:
        raise TaskDataError(f"{path}: has {width} columns but --task_name={task_name} reads "
                            f"columns {wanted} (0-based); check --text_a_column, "
                            "--text_b_column, --label_column")
    return [Example(f"{split}-{i}", row[a], None if b is None else row[b],
                    placeholder if label is None else row[label])
            for i, row in enumerate(rows)]


def read_sentences(task_name: str, data_dir: str, split: str, lenient_tags: bool = False
                   ) -> list:
    """Tagged sentences of one split: conllu.ParsedSentence (words, upos) for pos,
    ner.NerSentence (units, tags) for ner. lenient_tags: ner.read_ner_file's `lenient`."""
    path = task_file(task_name, data_dir, split)
    if task_name != "ner":
        return conllu.read_conllu(path, flag="data_dir", require_heads=False)
    sentences = ner.read_ner_file(path, lenient=lenient_tags)
    if path != data_dir:
        return sentences
    train, held_out = ner.split_held_out(sentences)
    return train if split == "train" else held_out


def sentence_tags(sentence) -> list[str]:
    """The gold tags of a tagged sentence (pos or ner)."""
    return sentence.tags if isinstance(sentence, ner.NerSentence) else sentence.upos


def label_list(task_name: str, train_labels, train_file: str) -> list[str]:
    """The task's labels: GLUE's fixed set, else those seen in training (sorted); fewer than
    two is a TaskDataError naming `train_file` (a classifier cannot learn one label)."""
    if task_name in GLUE_TASKS:
        return list(GLUE_TASKS[task_name].labels)
    names = sorted(set(train_labels))
    if len(names) < 2:
        fix = ("tag the entities (B-TYPE, I-TYPE) in it" if task_name == "ner" else
               "check --label_column" if task_name == "tsv" else "check the tags")
        raise TaskDataError(f"{train_file}: every training label is {names[0]!r} (for "
                            f"--task_name={task_name}); a classifier needs at least 2 labels: "
                            f"{fix}, or train on a file that has them")
    return names


def label_ids(labels, label_names: list[str], where: str, strict: bool):
    """Ids of `labels`; returns (ids, Counter of unseen labels). strict: unseen is an error."""
    index = {name: i for i, name in enumerate(label_names)}
    unseen = collections.Counter(label for label in labels if label not in index)
    if unseen and strict:
        raise TaskDataError(f"{where}: label(s) {sorted(unseen)} not in the task's label set "
                            f"{label_names}")
    return [index.get(label, UNSEEN_LABEL) for label in labels], unseen


# --------------------------------------------------------------------------- encoding


@dataclasses.dataclass
class Encoded:
    """Fixed-length features of a split, plus what it took to fit them.

    features: input_ids, input_mask, segment_ids [N, S] int32; label_ids ([N] or [N, S]) int32;
      label_weights float32, 1.0 where a label counts (first word pieces; every real example).
    pieces: for tagging, (sentence index, first word, end word) of each row; else row indexes.
    shortened: sequences split (tagging) or truncated (classification) to fit max_seq_length.
    unseen_labels: Counter of labels training never saw.
    alignments: ner: each sentence's ner.Alignment (its scored units are the "words").
    """

    features: dict
    pieces: list
    shortened: int = 0
    unseen_labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    alignments: list = dataclasses.field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return len(self.features["input_ids"])


def encode_examples(tokenizer, examples: list[Example], label_names: list[str],
                    max_seq_length: int, where: str, strict_labels: bool) -> Encoded:
    """[CLS] A [SEP] (B [SEP]) rows, over-long pairs truncated (Google's rule) and counted."""
    texts_a = [e.text_a for e in examples]
    texts_b = [e.text_b or "" for e in examples]
    ids_a, ids_b = tokenizer.tokenize_batch(texts_a), tokenizer.tokenize_batch(texts_b)
    rows, truncated = [], 0
    for example, a, b in zip(examples, ids_a, ids_b, strict=True):
        features, cut = tokenizer.pack_pair(
            tokenizer.convert_tokens_to_ids(a),
            None if example.text_b is None else tokenizer.convert_tokens_to_ids(b),
            max_seq_length)
        rows.append(features)
        truncated += cut > 0
    ids, unseen = label_ids([e.label for e in examples], label_names, where, strict_labels)
    features = _stack(rows)
    features["label_ids"] = np.maximum(np.array(ids, np.int32), 0)
    features["label_weights"] = (np.array(ids) != UNSEEN_LABEL).astype(np.float32)
    features["eval_label_ids"] = np.array(ids, np.int32)
    return Encoded(features, list(range(len(examples))), truncated, unseen)


def encode_sentences(tokenizer, sentences, label_names: list[str], max_seq_length: int,
                     where: str) -> Encoded:
    """Tagging rows: the first word piece of each word carries its tag. A sentence over
    max_seq_length - 2 pieces is split at word boundaries into several rows (counted)."""
    words = [word for sentence in sentences for word in sentence.words]
    pieces = tokenizer.tokenize_ids_batch(words) if words else None
    flat, splits = pieces if pieces else ([], [0])
    word_ids = [flat[splits[i]:splits[i + 1]].tolist() or [tokenizer.unk_id]
                for i in range(len(words))]
    tags = [tag for sentence in sentences for tag in sentence.upos]
    lengths = [len(sentence.words) for sentence in sentences]
    return _encode_words(tokenizer, word_ids, lengths, tags, label_names, max_seq_length, where)


def encode_ner(tokenizer, sentences, label_names: list[str], max_seq_length: int,
               where: str) -> Encoded:
    """NER rows: each sentence's running text tokenized once (`tokenize_with_offsets`), its
    pieces grouped by the unit their first character lies in (ner.align); the first piece of
    each group carries the unit's tag. Long sentences are split between groups, as for pos."""
    alignments = [ner.align(s, tokenizer.tokenize_with_offsets(s.text)) for s in sentences]
    word_ids = [ids for a in alignments for ids in a.groups]
    tags = [a.sentence.tags[unit] for a in alignments for unit in a.heads]
    encoded = _encode_words(tokenizer, word_ids, [len(a.heads) for a in alignments], tags,
                            label_names, max_seq_length, where)
    encoded.alignments = alignments
    return encoded


def _encode_words(tokenizer, word_ids, lengths, tags, label_names, max_seq_length, where
                  ) -> Encoded:
    """Rows of [CLS] word pieces [SEP] from every sentence's words (`lengths` words each, their
    piece ids in `word_ids`, flat), the first piece of a word carrying its tag."""
    tag_ids, unseen = label_ids(tags, label_names, where, strict=False)
    rows, spans, split_sentences, start = [], [], 0, 0
    for index, length in enumerate(lengths):
        end = start + length
        chunks = _chunks(word_ids[start:end], max_seq_length - 2)
        split_sentences += len(chunks) > 1
        for first, last in chunks:
            rows.append(_tagged_row(tokenizer, word_ids[start + first:start + last],
                                    tag_ids[start + first:start + last], max_seq_length))
            spans.append((index, first, last))
        start = end
    return Encoded(_stack(rows), spans, split_sentences, unseen)


def _chunks(word_ids: list[list[int]], budget: int) -> list[tuple[int, int]]:
    """(first, end) word ranges whose pieces fit `budget` (a longer single word is cut)."""
    chunks, first, used = [], 0, 0
    for i, ids in enumerate(word_ids):
        if used and used + len(ids) > budget:
            chunks.append((first, i))
            first, used = i, 0
        used += len(ids)
    chunks.append((first, len(word_ids)))
    return chunks


def _tagged_row(tokenizer, word_ids, tag_ids, max_seq_length: int) -> dict:
    input_ids, labels, weights = [tokenizer.cls_id], [0], [0.0]
    for ids, tag in zip(word_ids, tag_ids, strict=True):
        input_ids += ids
        labels += [tag] + [0] * (len(ids) - 1)
        weights += [1.0] + [0.0] * (len(ids) - 1)
    budget = max_seq_length - 1
    input_ids, labels, weights = input_ids[:budget], labels[:budget], weights[:budget]
    input_ids.append(tokenizer.sep_id)
    length = len(input_ids)
    padding = max_seq_length - length
    eval_labels = labels + [0] * (padding + 1)
    return {"input_ids": input_ids + [tokenizer.pad_id] * padding,
            "input_mask": [1] * length + [0] * padding,
            "segment_ids": [0] * max_seq_length,
            "label_ids": [max(label, 0) for label in eval_labels],
            "label_weights": [w if lab != UNSEEN_LABEL else 0.0
                              for w, lab in zip(weights + [0.0] * (padding + 1), eval_labels,
                                                strict=True)],
            "eval_label_ids": eval_labels,
            "word_starts": weights + [0.0] * (padding + 1)}


def _stack(rows: list[dict]) -> dict:
    return {name: np.array([row[name] for row in rows],
                           np.float32 if name in ("label_weights", "word_starts") else np.int32)
            for name in rows[0]}


# --------------------------------------------------------------------------- batching


def train_batches(features: dict, batch_size: int, rank: int, num_ranks: int,
                  num_micro_batches: int, seed: int, skip_batches: int = 0):
    """This rank's micro-batches after its first `skip_batches` (a resumed run's input
    position), endlessly (the caller stops after its updates).

    The examples are a stream of shuffled epochs (permutations seeded by `seed` and the epoch);
    update u takes the next batch_size * num_micro_batches * num_ranks of them and rank r its
    r-th share, cut into micro-batches. So the examples of each update depend on the global
    batch only, not on how it is divided among ranks and micro-batches.
    """
    num_rows = len(features["input_ids"])
    per_rank = batch_size * num_micro_batches
    global_batch = per_rank * num_ranks
    order, epoch = np.zeros([0], np.int64), 0
    skip_updates = skip_batches // num_micro_batches  # a position lies between updates
    while True:
        while len(order) < global_batch:
            permutation = np.random.default_rng([seed, epoch]).permutation(num_rows)
            order, epoch = np.concatenate([order, permutation]), epoch + 1
        mine, order = order[rank * per_rank:(rank + 1) * per_rank], order[global_batch:]
        if skip_updates:
            skip_updates -= 1
            continue
        for m in range(num_micro_batches):
            rows = mine[m * batch_size:(m + 1) * batch_size]
            yield {name: values[rows] for name, values in features.items()
                   if name in MODEL_FEATURES}


MODEL_FEATURES = ("input_ids", "input_mask", "segment_ids", "label_ids", "label_weights")
