"""The flags that the data commands share (`python -m bert_tf prepare_dataset` and
create_pretraining_data.py), Google's names: each defined here once, with its help text and
type, and the default of the calling command's config (bert_tf.flag_defaults)."""

from absl import flags


def define_vocab_flags(defaults: dict) -> None:
    """--vocab_file and --do_lower_case: how text becomes WordPieces."""
    flags.DEFINE_string("vocab_file", defaults["vocab_file"],
                        "The WordPiece vocabulary file (one token per line).")
    flags.DEFINE_bool("do_lower_case", defaults["do_lower_case"],
                      "Lower-case and strip accents (True for uncased vocabs, False for cased).")


def define_instance_flags(defaults: dict) -> None:
    """How sequences are drawn and masked (Google's create_pretraining_data.py flags)."""
    flags.DEFINE_integer("dupe_factor", defaults["dupe_factor"],
                         "Passes over the input data, each with different masks.")
    flags.DEFINE_float("masked_lm_prob", defaults["masked_lm_prob"], "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", defaults["short_seq_prob"],
                       "Probability of creating sequences which are shorter than the maximum "
                       "length.")
    flags.DEFINE_bool("do_whole_word_mask", defaults["do_whole_word_mask"],
                      "Mask whole words (all WordPieces of a word) instead of single WordPieces.")
    flags.DEFINE_integer("random_seed", defaults["random_seed"],
                         "Random seed for data generation.")


def define_worker_flags(defaults: dict) -> None:
    """--num_workers and --progress: how the work runs on this machine."""
    flags.DEFINE_integer("num_workers", defaults["num_workers"],
                         "Worker processes on this machine (one input shard each at a time).")
    flags.DEFINE_bool("progress", defaults["progress"], "Show progress bars on stderr.")
