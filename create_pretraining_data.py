"""Creates BERT pretraining TFRecords from text (one sentence per line, blank line between
documents): Google's flags and algorithm, plus --num_workers; run under mpirun to spread input
files over machines. See docs/data.md."""

import dataclasses
import sys

from absl import flags

import bert_tf
from bert_tf.data import pretraining_data, shared_flags, workers


@dataclasses.dataclass
class CreatePretrainingDataConfig:
    input_file: str  # comma-separated files or globs
    output_file: str  # comma-separated, or one name with a {shard} field
    vocab_file: str
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    do_whole_word_mask: bool = False
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    num_workers: int = 1
    dynamic_masking: bool = False
    next_sentence_prediction: bool = True
    progress: bool = True

    def instance_config(self) -> pretraining_data.InstanceConfig:
        return pretraining_data.InstanceConfig(
            max_seq_length=self.max_seq_length,
            max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
            dupe_factor=self.dupe_factor, do_whole_word_mask=self.do_whole_word_mask,
            random_seed=self.random_seed, dynamic_masking=self.dynamic_masking,
            next_sentence_prediction=self.next_sentence_prediction)


def define_flags():
    """Google's flags, defaults from CreatePretrainingDataConfig, plus --num_workers."""
    d = bert_tf.flag_defaults(CreatePretrainingDataConfig)
    flags.DEFINE_string("input_file", None,
                        "Input text file(s): comma-separated list of files or globs. Each file "
                        "is one shard: the unit of parallel work and of memory use.")
    flags.DEFINE_string("output_file", None,
                        "Output TFRecord file(s): comma-separated list, or one name with a "
                        "{shard} field (e.g. out/part-{shard:05d}.tfrecord) for one output per "
                        "input file.")
    shared_flags.define_vocab_flags(d)
    flags.DEFINE_integer("max_seq_length", d["max_seq_length"], "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", d["max_predictions_per_seq"],
                         "Maximum number of masked LM predictions per sequence.")
    shared_flags.define_instance_flags(d)
    shared_flags.define_next_sentence_flag(d)
    flags.DEFINE_bool("dynamic_masking", d["dynamic_masking"],
                      "Write unmasked records (masked_lm_* all zero) for masking in the input "
                      "pipeline at every step (RoBERTa style, input_pipeline.DynamicMasking).")
    shared_flags.define_worker_flags(d)
    flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])


def run(config: CreatePretrainingDataConfig) -> int:
    """Writes the records and prints their summary; returns the exit status (128 + the signal
    when interrupted). PretrainingDataError, VocabError on bad input."""
    # Also when this process makes the records itself (--num_workers=1, or one input file).
    workers.hide_gpus()
    try:
        with workers.interruptible():
            summary = pretraining_data.create_pretraining_data(
                config.input_file, config.output_file, config.vocab_file, config.do_lower_case,
                config.instance_config(), num_workers=config.num_workers,
                progress=config.progress,
                allow_dictionary_mismatch=config.allow_dictionary_mismatch)
    except workers.Interrupted as e:
        print(f"create_pretraining_data: {e}: workers stopped, temporary files removed, no "
              "output written; rerun the command to start again", file=sys.stderr)
        return 128 + e.signum
    if summary is not None:
        print(pretraining_data.format_summary(summary))
    return 0


if __name__ == "__main__":
    from bert_tf.data.tokenization import VocabError

    bert_tf.run_command(define_flags, CreatePretrainingDataConfig, run,
                        errors=(pretraining_data.PretrainingDataError, VocabError),
                        error_status=2)
