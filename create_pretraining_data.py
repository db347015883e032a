"""Creates BERT pretraining TFRecords from text (one sentence per line, blank line between
documents): Google's flags and algorithm, plus --num_workers; run under mpirun to spread input
files over machines. See docs/data.md."""

import sys

from absl import app, flags

from bert_tf.data import pretraining_data, workers

flags.DEFINE_string("input_file", None,
                    "Input text file(s): comma-separated list of files or globs. Each file is one "
                    "shard: the unit of parallel work and of memory use.")
flags.DEFINE_string("output_file", None,
                    "Output TFRecord file(s): comma-separated list, or one name with a {shard} "
                    "field (e.g. out/part-{shard:05d}.tfrecord) for one output per input file.")
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary file (one token per line).")
flags.DEFINE_bool("do_lower_case", True,
                  "Lower-case and strip accents (True for uncased vocabs, False for cased).")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Mask whole words (all WordPieces of a word) instead of single WordPieces.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10,
                     "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of creating sequences which are shorter than the maximum length.")
flags.DEFINE_integer("num_workers", 1, "Worker processes on this machine (one input file each).")
flags.DEFINE_bool("dynamic_masking", False,
                  "Write unmasked records (masked_lm_* all zero) for masking in the input "
                  "pipeline at every step (RoBERTa style, input_pipeline.DynamicMasking).")
flags.DEFINE_bool("progress", True, "Show a progress bar on stderr.")
flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from bert_tf.data.tokenization import VocabError

    config = pretraining_data.InstanceConfig(
        max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor, do_whole_word_mask=FLAGS.do_whole_word_mask,
        random_seed=FLAGS.random_seed, dynamic_masking=FLAGS.dynamic_masking)
    try:
        with workers.interruptible():
            summary = pretraining_data.create_pretraining_data(
                FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_file, FLAGS.do_lower_case,
                config, num_workers=FLAGS.num_workers, progress=FLAGS.progress)
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
