"""What `python -m bert_tf export` exports, whatever the format: the model (an encoder from a
pretraining checkpoint, or a fine-tuned classifier or tagger), its config, vocab, tokenizer
settings and labels; and the output directory, written all at once or not at all.

A fine-tuning run's OUTPUT_DIR holds finetuned_model.json (bert_tf/train/finetune.py
write_model_info) with the task, labels, vocab and bert_config; a pretraining run's holds
bert_config.json. The export finds them next to --checkpoint (or in its parent directory, for
a fine-tuning run's `best/`), unless flags name them.
"""

import contextlib
import dataclasses
import json
import os
import shutil

import tensorflow as tf

import bert_tf
from bert_tf.data.graph_tokenization import graph_word_splitter, needs_python_word_splitter
from bert_tf.data.output_dir import new_files_in
from bert_tf.data.shards import file_sha256
from bert_tf.data.tokenization import load_vocab, resolve_spec
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.model.modeling import BertModel, variables_by_name
from bert_tf.model.tasks import BertForSequenceClassification, BertForTokenClassification

MODEL_INFO = "finetuned_model.json"  # bert_tf.train.finetune.MODEL_INFO (not imported: Horovod)
BERT_CONFIG = "bert_config.json"
VOCAB = "vocab.txt"
EXPORT_INFO = "export.json"
DEFAULT_MAX_SEQ_LENGTH = 128  # fine-tuning's default
KINDS = ("encoder", "classifier", "tagger")
HEAD_VARIABLE = "output_weights"  # tasks._Classifier's head: a fine-tuned checkpoint has it


class ExportError(ValueError):
    """Input that cannot be exported (the message names the flag or file and the fix)."""


@dataclasses.dataclass
class ExportSource:
    """A model to export, resolved from the flags and the files next to the checkpoint."""

    checkpoint: str  # the checkpoint prefix
    bert_config: BertConfig
    vocab_file: str
    do_lower_case: bool
    max_seq_length: int
    kind: str  # one of KINDS
    labels: list  # label names in id order (empty for an encoder)
    task_name: str = ""
    word_splitter: str = "bert"  # graph_tokenization.graph_word_splitter: "bert" = Google's

    @property
    def vocab(self) -> list[str]:
        """The tokens in id order, gaps as [UNK] (as FullTokenizer fills them)."""
        by_id = {i: t for t, i in load_vocab(self.vocab_file).items()}
        return [by_id.get(i, "[UNK]") for i in range(max(by_id) + 1)]

    @property
    def raw_text(self) -> bool:
        """Whether text can be tokenized inside the exported graph."""
        return not needs_python_word_splitter(self.word_splitter)

    def build_model(self):
        """Our model (float32) with every variable restored from the checkpoint."""
        if self.kind == "encoder":
            model = BertModel(self.bert_config)
        else:
            head = BertForTokenClassification if self.kind == "tagger" else (
                BertForSequenceClassification)
            model = head(self.bert_config, len(self.labels))
        checkpoints.restore(self.checkpoint, variables_by_name(model), require_all=True)
        return model

    def info(self, export_format: str) -> dict:
        """export.json: what was exported, from what, and how its inputs are made."""
        vocab_sha256 = file_sha256(self.vocab_file)
        return {
            "format": export_format, "bert_tf_version": bert_tf.__version__,
            "checkpoint": os.path.abspath(self.checkpoint), "kind": self.kind,
            "task_name": self.task_name, "labels": self.labels,
            "bert_config": self.bert_config.to_dict(),
            "tokenizer": {"vocab": VOCAB, "vocab_sha256": vocab_sha256,
                          "do_lower_case": self.do_lower_case,
                          "word_splitter": self.word_splitter,
                          "max_seq_length": self.max_seq_length,
                          "raw_text_in_graph": self.raw_text},
        }


def _read_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ExportError(f"{path}: cannot be read ({e})") from None


def _near(prefix: str, name: str) -> str | None:
    """`name` in the checkpoint's directory or its parent (a fine-tuning run's best/)."""
    directory = os.path.dirname(os.path.abspath(prefix))
    for place in (directory, os.path.dirname(directory)):
        if os.path.isfile(os.path.join(place, name)):
            return os.path.join(place, name)
    return None


def resolve_source(checkpoint: str, bert_config_file: str = "", vocab_file: str = "",
                   do_lower_case: bool | None = None, max_seq_length: int = 0,
                   labels: list | None = None, tagging: bool = False) -> ExportSource:
    """The ExportSource of --checkpoint: flags first, then finetuned_model.json, then
    bert_config.json / vocab.txt next to the checkpoint.

    Args:
      checkpoint: a checkpoint prefix or a directory (its latest checkpoint).
      bert_config_file, vocab_file, do_lower_case, max_seq_length: override what the run saved.
      labels, tagging: a fine-tuned checkpoint's labels (id order) and task type, for runs
        made before finetuned_model.json existed.

    Returns:
      The ExportSource; ExportError if something it needs cannot be found.
    """
    prefix = checkpoints.resolve_checkpoint(checkpoint)
    info_path = _near(prefix, MODEL_INFO)
    info = _read_json(info_path) if info_path else {}
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    fine_tuned = HEAD_VARIABLE in shapes
    labels = labels or info.get("labels") or []
    if fine_tuned and not labels:
        raise ExportError(f"--checkpoint={checkpoint} is a fine-tuned model but no {MODEL_INFO} "
                          "was found next to it (or its parent): pass --labels=NAME,... in the "
                          "order of the fine-tuning run's label ids (and --tagging for a tagger)")
    if fine_tuned and len(labels) != shapes[HEAD_VARIABLE][0]:
        raise ExportError(f"--checkpoint={checkpoint} has {shapes[HEAD_VARIABLE][0]} labels, "
                          f"but {len(labels)} were given: {labels}")
    config = _bert_config(prefix, bert_config_file, info)
    vocab = vocab_file or info.get("vocab_file") or _near(prefix, VOCAB)
    if not vocab:
        raise ExportError(f"no vocab for --checkpoint={checkpoint}: pass --vocab_file")
    if len(load_vocab(vocab)) > config.vocab_size:
        raise ExportError(f"--vocab_file={vocab} has more tokens than vocab_size="
                          f"{config.vocab_size} of the model's bert_config.json")
    kind = "encoder" if not fine_tuned else (
        "tagger" if info.get("tagging", tagging) else "classifier")
    length = max_seq_length or info.get("max_seq_length") or min(
        DEFAULT_MAX_SEQ_LENGTH, config.max_position_embeddings)
    if length > config.max_position_embeddings:
        raise ExportError(f"--max_seq_length={length} exceeds the model's "
                          f"max_position_embeddings={config.max_position_embeddings}")
    lower = info.get("do_lower_case") if do_lower_case is None else do_lower_case
    spec = resolve_spec(vocab, lower, check_dictionary=False)
    return ExportSource(prefix, config, vocab, spec.do_lower_case, length, kind,
                        list(labels) if fine_tuned else [], info.get("task_name", ""),
                        graph_word_splitter(spec))


def _bert_config(prefix: str, bert_config_file: str, info: dict) -> BertConfig:
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    if info.get("bert_config"):
        return BertConfig.from_dict(info["bert_config"], source=MODEL_INFO)
    found = _near(prefix, BERT_CONFIG)
    if not found:
        raise ExportError(f"no {BERT_CONFIG} next to checkpoint {prefix}: pass "
                          "--bert_config_file")
    return BertConfig.from_json_file(found)


def write_common_files(source: ExportSource, directory: str, export_format: str) -> None:
    """export.json, bert_config.json and vocab.txt, which every format records."""
    with open(os.path.join(directory, EXPORT_INFO), "w", encoding="utf-8") as f:
        json.dump(source.info(export_format), f, indent=2)
        f.write("\n")
    source.bert_config.to_json_file(os.path.join(directory, BERT_CONFIG))
    shutil.copyfile(source.vocab_file, os.path.join(directory, VOCAB))


@contextlib.contextmanager
def new_output_dir(output_dir: str):
    """Yields a staging directory inside --output_dir to write the export into; on success its
    files move up into --output_dir; on failure, SIGTERM or a full disk nothing is left, and
    another export or convert writing there at the same time is refused
    (output_dir.new_files_in). A non-empty or unwritable --output_dir is refused before
    anything is written."""
    with new_files_in(output_dir, "output_dir", "the export") as staging:
        yield staging
