"""Export a checkpoint for use outside bert_tf: a SavedModel, a KerasHub preset or ONNX.

    python -m bert_tf export --format=savedmodel --checkpoint=runs/phase2 --output_dir=out/sm
    python -m bert_tf export --format=keras_hub --checkpoint=runs/sst2/best --output_dir=out/kh
    python -m bert_tf export --format=onnx --checkpoint=runs/pos/best --output_dir=out/onnx

--checkpoint is a pretraining checkpoint (the encoder is exported) or a fine-tuning run's
(its classifier or tagger is). bert_config.json, the vocab, the labels and the tokenizer
settings come from the files the run left next to it unless flags name them
(bert_tf/tools/export_source.py). --output_dir must be new or empty; it gets everything or,
if the export fails, nothing. docs/export.md describes each format's files and interface.
"""

import dataclasses
import importlib

from absl import flags

import bert_tf
from bert_tf.data import workers
from bert_tf.data.files import OutputDirError
from bert_tf.data.tokenization import VocabError
from bert_tf.model import devices
from bert_tf.model.checkpoints import CheckpointError
from bert_tf.model.config import BertConfigError
from bert_tf.tools.export_source import ExportError, new_output_dir, resolve_source

# --format -> the module whose export(source, directory, ...) writes it.
FORMATS = {"savedmodel": "bert_tf.tools.export_savedmodel",
           "keras_hub": "bert_tf.tools.export_keras_hub",
           "onnx": "bert_tf.tools.export_onnx"}


@dataclasses.dataclass
class ExportConfig:
    format: str
    checkpoint: str
    output_dir: str
    bert_config_file: str = ""
    vocab_file: str = ""
    do_lower_case: bool | None = None
    max_seq_length: int = 0
    labels: list | None = None
    tagging: bool = False
    jit_compile: bool = False


def define_flags() -> None:
    flags.DEFINE_enum("format", None, list(FORMATS), "What to export to.")
    flags.DEFINE_string("checkpoint", None, "Checkpoint prefix or directory (its latest): a "
                        "pretraining run's (the encoder) or a fine-tuning run's (e.g. OUT/best).")
    flags.DEFINE_string("output_dir", None, "New or empty directory for the export.")
    flags.DEFINE_string("bert_config_file", "", "Default: what the run saved next to "
                        "--checkpoint (finetuned_model.json or bert_config.json).")
    flags.DEFINE_string("vocab_file", "", "Default: the fine-tuning run's --vocab_file, or "
                        "vocab.txt next to --checkpoint.")
    flags.DEFINE_bool("do_lower_case", None, "Default: the fine-tuning run's, else the vocab's tokenizer spec (true for a "
                      "vocab without one).")
    flags.DEFINE_integer("max_seq_length", 0, "Longest input in word pieces (text is cut to "
                         "it). Default: the fine-tuning run's, else 128.")
    flags.DEFINE_list("labels", None, "A fine-tuned model's label names in id order, for runs "
                      "without finetuned_model.json.")
    flags.DEFINE_bool("tagging", False, "With --labels: the model tags words (token "
                      "classification).")
    flags.DEFINE_bool("jit_compile", False, "savedmodel: compile the model with XLA when "
                      "served (faster at a fixed shape; bench/README.md, inference).")
    for name in ("format", "checkpoint", "output_dir"):
        flags.mark_flag_as_required(name)


def run(config: ExportConfig) -> int:
    """Exports as the config says; returns the exit status."""
    devices.use_one_gpu()
    source = resolve_source(config.checkpoint, config.bert_config_file, config.vocab_file,
                            config.do_lower_case, config.max_seq_length, config.labels,
                            config.tagging)
    exporter = importlib.import_module(FORMATS[config.format])
    options = {"jit_compile": config.jit_compile} if config.format == "savedmodel" else {}
    try:
        with new_output_dir(config.output_dir) as directory:
            exporter.export(source, directory, **options)
    except workers.Interrupted as e:
        return workers.stopped_status(
            "export", e, f"nothing was left in --output_dir={config.output_dir}")
    what = source.kind + (f" ({len(source.labels)} labels)" if source.labels else "")
    print(f"exported the {what} of {source.checkpoint} as {config.format} -> "
          f"{config.output_dir}")
    if config.format == "keras_hub":
        note = exporter.loading_note(source.bert_config.hidden_act, config.output_dir)
        if note:
            print(note)
    if not source.raw_text:
        print(f"note: the {source.word_splitter} word splitter runs in Python only: the export "
              "takes token ids, not text")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, ExportConfig, run, errors=(
        ExportError, BertConfigError, VocabError, CheckpointError, OutputDirError))
