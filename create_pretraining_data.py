"""Creates BERT pretraining TFRecords from text (one sentence per line, blank line between
documents): Google's flags and algorithm, plus --num_workers; run under mpirun to spread input
files over machines. See docs/data.md."""

import dataclasses
import sys

from absl import app, flags

import bert_tf
from bert_tf.data import pretraining_data, workers


@dataclasses.dataclass
class CreatePretrainingDataConfig:
    input_file: str  # comma-separated files or globs
    output_file: str  # comma-separated, or one name with a {shard} field
    vocab_file: str
    do_lower_case: bool = True
    do_whole_word_mask: bool = False
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    num_workers: int = 1
    dynamic_masking: bool = False
    progress: bool = True

    def instance_config(self) -> pretraining_data.InstanceConfig:
        return pretraining_data.InstanceConfig(
            max_seq_length=self.max_seq_length,
            max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
            dupe_factor=self.dupe_factor, do_whole_word_mask=self.do_whole_word_mask,
            random_seed=self.random_seed, dynamic_masking=self.dynamic_masking)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CreatePretrainingDataConfig)}

flags.DEFINE_string("input_file", None,
                    "Input text file(s): comma-separated list of files or globs. Each file is one "
                    "shard: the unit of parallel work and of memory use.")
flags.DEFINE_string("output_file", None,
                    "Output TFRecord file(s): comma-separated list, or one name with a {shard} "
                    "field (e.g. out/part-{shard:05d}.tfrecord) for one output per input file.")
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary file (one token per line).")
flags.DEFINE_bool("do_lower_case", _DEFAULTS["do_lower_case"],
                  "Lower-case and strip accents (True for uncased vocabs, False for cased).")
flags.DEFINE_bool("do_whole_word_mask", _DEFAULTS["do_whole_word_mask"],
                  "Mask whole words (all WordPieces of a word) instead of single WordPieces.")
flags.DEFINE_integer("max_seq_length", _DEFAULTS["max_seq_length"], "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", _DEFAULTS["max_predictions_per_seq"],
                     "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", _DEFAULTS["random_seed"], "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", _DEFAULTS["dupe_factor"],
                     "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", _DEFAULTS["masked_lm_prob"], "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", _DEFAULTS["short_seq_prob"],
                   "Probability of creating sequences which are shorter than the maximum length.")
flags.DEFINE_integer("num_workers", _DEFAULTS["num_workers"],
                     "Worker processes on this machine (one input file each).")
flags.DEFINE_bool("dynamic_masking", _DEFAULTS["dynamic_masking"],
                  "Write unmasked records (masked_lm_* all zero) for masking in the input "
                  "pipeline at every step (RoBERTa style, input_pipeline.DynamicMasking).")
flags.DEFINE_bool("progress", _DEFAULTS["progress"], "Show a progress bar on stderr.")
flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from bert_tf.data.tokenization import VocabError

    config = bert_tf.config_from_flags(CreatePretrainingDataConfig, flags.FLAGS)
    try:
        with workers.interruptible():
            summary = pretraining_data.create_pretraining_data(
                config.input_file, config.output_file, config.vocab_file, config.do_lower_case,
                config.instance_config(), num_workers=config.num_workers,
                progress=config.progress)
    except (pretraining_data.PretrainingDataError, VocabError) as e:
        print(f"create_pretraining_data: error: {e}", file=sys.stderr)
        return 2
    except workers.Interrupted as e:
        print(f"create_pretraining_data: {e}: workers stopped, temporary files removed, no "
              "output written; rerun the command to start again", file=sys.stderr)
        return 128 + e.signum
    if summary is not None:
        print(pretraining_data.format_summary(summary))
    return 0


if __name__ == "__main__":
    app.run(main)
