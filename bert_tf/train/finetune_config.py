"""run_finetuning flags (defined once, Google's run_classifier.py names) and the plain
`FinetuningConfig` they become. The flags shared with pretraining (--precision, --use_xla, ...)
are defined once, in bert_tf/train/config.py (define_common_training_flags)."""

import dataclasses

from absl import flags

import bert_tf
from bert_tf.data import shared_flags
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.tasks import TASK_NAMES
from bert_tf.train.config import PRECISIONS, define_common_training_flags


class FinetuningConfigError(ValueError):
    """A flag value that cannot work; the message names the flag."""


@dataclasses.dataclass
class FinetuningConfig:
    task_name: str
    data_dir: str
    bert_config_file: str
    vocab_file: str
    output_dir: str
    init_checkpoint: str = ""
    reinit_top_layers: int = 0  # docs/budget.md, "Fine-tuning a budget checkpoint"
    rescale_embeddings: bool = False
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    max_seq_length: int = 128
    train_batch_size: int = 32
    eval_batch_size: int = 64
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    precision: str = "fp32"
    use_xla: bool = False
    num_accumulation_steps: int = 1
    fp16_allreduce: bool = False
    deterministic: bool = False
    weight_decay_rate: float = 0.01
    adam_bias_correction: bool = False  # Google's fine-tuning rule; docs/budget.md
    text_a_column: int = 0
    text_b_column: int = -1
    label_column: int = 1
    tsv_has_header: bool = False
    ner_lenient_tags: bool = False
    log_every_n_steps: int = 10
    seed: int = 12345
    max_nonfinite_updates: int = 25
    peer_timeout_seconds: float = 900.0
    # Google's fine-tuning rule; not flags. The step counts follow from the data and the
    # epochs (`with_schedule`).
    optimizer_type: str = "adamw"
    learning_rate_schedule: str = "poly"
    max_train_time: str = ""
    num_train_steps: int = 0
    num_warmup_steps: int = 0

    def validate(self) -> None:
        def fail(flag, problem):
            raise FinetuningConfigError(f"--{flag} {problem}")

        if not (self.do_train or self.do_eval or self.do_predict):
            fail("do_train", "or --do_eval or --do_predict must be set (nothing to do)")
        for name in ("task_name", "data_dir", "bert_config_file", "vocab_file", "output_dir"):
            if not getattr(self, name):
                fail(name, "is required")
        if self.task_name not in TASK_NAMES:
            fail("task_name", f"must be one of {', '.join(TASK_NAMES)}, got {self.task_name!r}")
        if self.precision not in PRECISIONS:
            fail("precision", f"must be one of {', '.join(PRECISIONS)}")
        if min(self.text_a_column, self.label_column) < 0:
            fail("text_a_column", "and --label_column must be >= 0")
        if (self.reinit_top_layers or self.rescale_embeddings) and not self.init_checkpoint:
            flag = "reinit_top_layers" if self.reinit_top_layers else "rescale_embeddings"
            fail(flag, "changes what --init_checkpoint loads; pass --init_checkpoint too (a "
                 "random initialisation has nothing to re-draw or rescale)")
        self._validate_numbers()

    def _validate_numbers(self) -> None:
        error = FinetuningConfigError
        for name in ("train_batch_size", "eval_batch_size", "num_accumulation_steps",
                     "log_every_n_steps", "max_nonfinite_updates"):
            check_number(name, getattr(self, name), at_least=1, integer=True, error=error)
        check_number("reinit_top_layers", self.reinit_top_layers, at_least=0, integer=True,
                     error=error)
        # [CLS], a token, [SEP]
        check_number("max_seq_length", self.max_seq_length, at_least=3, integer=True,
                     error=error)
        check_number("num_train_epochs", self.num_train_epochs, above=0, error=error)
        check_number("warmup_proportion", self.warmup_proportion, at_least=0, below=1,
                     error=error)
        check_number("learning_rate", self.learning_rate, above=0, error=error)
        check_number("weight_decay_rate", self.weight_decay_rate, at_least=0, error=error)
        check_number("peer_timeout_seconds", self.peer_timeout_seconds, at_least=0,
                     error=error)

    def global_batch_size(self, num_ranks: int) -> int:
        return self.train_batch_size * self.num_accumulation_steps * num_ranks

    def with_schedule(self, num_train_examples: int, num_ranks: int) -> "FinetuningConfig":
        """This config with Google's step counts: int(examples * epochs / global batch)
        updates, the first --warmup_proportion of them warming up."""
        steps = int(num_train_examples * self.num_train_epochs
                    / self.global_batch_size(num_ranks))
        if steps < 1:
            raise FinetuningConfigError(
                f"--num_train_epochs={self.num_train_epochs} of {num_train_examples} training "
                f"rows is less than one update of {self.global_batch_size(num_ranks)} (all "
                "ranks); lower --train_batch_size or add data")
        return dataclasses.replace(self, num_train_steps=steps,
                                   num_warmup_steps=int(steps * self.warmup_proportion))


def define_finetuning_flags() -> None:
    """Defines every run_finetuning flag (call once, before parsing)."""
    d = bert_tf.flag_defaults(FinetuningConfig)
    define_common_training_flags(d)
    flags.DEFINE_enum("task_name", None, TASK_NAMES, "The task: pos (CoNLL-U UPOS tagging), "
                      "ner (IOB2 token or KLUE character files), GLUE cola/sst-2/mrpc/mnli, or "
                      "tsv (see --text_a_column).")
    flags.DEFINE_string("data_dir", None, "Directory with the task's train/dev/test files "
                        "(train.tsv ... or *train.conllu ...); ner: also one file, its first "
                        "90% train and last 10% dev and test.")
    flags.DEFINE_bool("ner_lenient_tags", d["ner_lenient_tags"],
                      "--task_name=ner: read an I-X that continues no X as B-X (conlleval) "
                      "instead of refusing the file.")
    shared_flags.define_tokenizer_flags(d)
    _define_init_flags(d)
    flags.DEFINE_float("num_train_epochs", d["num_train_epochs"],
                       "Passes over the training data.")
    flags.DEFINE_float("warmup_proportion", d["warmup_proportion"],
                       "Share of the updates with linear warmup (then linear decay to 0).")
    flags.DEFINE_bool("do_predict", d["do_predict"], "Write predictions for the test split.")
    _define_tsv_flags(d)


def _define_init_flags(d: dict) -> None:
    flags.DEFINE_integer("reinit_top_layers", d["reinit_top_layers"],
                         "Leave the pooler and the top N encoder layers at BERT's random "
                         "initialisation instead of loading them from --init_checkpoint (Re-init, "
                         "Zhang et al. 2021, 'Revisiting Few-sample BERT Fine-tuning'; "
                         "docs/budget.md).")
    flags.DEFINE_bool("rescale_embeddings", d["rescale_embeddings"],
                      "Scale the loaded word, position and token-type embeddings so the word "
                      "table's RMS is initializer_range; the outputs do not change (LayerNorm "
                      "follows), AdamW then moves them as fast as a fresh model's "
                      "(docs/budget.md).")


def _define_tsv_flags(d: dict) -> None:
    flags.DEFINE_integer("text_a_column", d["text_a_column"],
                         "--task_name=tsv: 0-based column of the text.")
    flags.DEFINE_integer("text_b_column", d["text_b_column"],
                         "--task_name=tsv: column of the second text of a pair; -1: none.")
    flags.DEFINE_integer("label_column", d["label_column"],
                         "--task_name=tsv: column of the label (test.tsv needs none).")
    flags.DEFINE_bool("tsv_has_header", d["tsv_has_header"],
                      "--task_name=tsv: skip the first line of each file.")


# FinetuningConfig's fields that are Google's fine-tuning rule, not flags.
NOT_FLAGS = ("optimizer_type", "learning_rate_schedule", "max_train_time", "num_train_steps",
             "num_warmup_steps")


def finetuning_config_from_flags(flag_values) -> FinetuningConfig:
    """A FinetuningConfig from parsed absl flags (call .validate() to check it)."""
    names = [f.name for f in dataclasses.fields(FinetuningConfig) if f.name not in NOT_FLAGS]
    return FinetuningConfig(**{name: getattr(flag_values, name) for name in names})
