"""The flags that the data commands share (`python -m bert_tf prepare_dataset` and
create_pretraining_data.py; the tokenizer flags also fine-tuning, predict and the analyses),
Google's names: each defined here once, with its help text and
type, and the default of the calling command's config (bert_tf.flag_defaults)."""

from absl import flags


def define_vocab_flags(defaults: dict) -> None:
    """--vocab_file, --do_lower_case and --allow_dictionary_mismatch: how text becomes pieces
    (the vocab's tokenizer spec decides; bert_tf.data.tokenizer_spec)."""
    flags.DEFINE_string("vocab_file", defaults["vocab_file"],
                        "The vocabulary file (one token per line); its tokenizer spec "
                        "(vocab.txt -> vocab.tokenizer.json, written by build_vocab) says how "
                        "text is split.")
    define_tokenizer_flags(defaults)


def define_tokenizer_flags(defaults: dict) -> None:
    """--do_lower_case and --allow_dictionary_mismatch, for every command that tokenizes
    (bert_tf.data.tokenization.load_tokenizer takes them)."""
    flags.DEFINE_bool("do_lower_case", defaults["do_lower_case"],
                      "Lower-case and strip accents (True for uncased vocabs, False for cased). "
                      "Default: as the vocab's tokenizer spec says (True without a spec); a "
                      "value that contradicts the spec is an error.")
    flags.DEFINE_bool("allow_dictionary_mismatch", defaults["allow_dictionary_mismatch"],
                      "Tokenize with the installed word-splitter dictionary even if it is not "
                      "the one the vocab's tokenizer spec was made with (MeCab modes).")


def define_instance_flags(defaults: dict) -> None:
    """How sequences are drawn and masked (Google's create_pretraining_data.py flags)."""
    flags.DEFINE_integer("dupe_factor", defaults["dupe_factor"],
                         "Passes over the input data, each with different masks.")
    flags.DEFINE_float("masked_lm_prob", defaults["masked_lm_prob"], "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", defaults["short_seq_prob"],
                       "Probability of creating sequences which are shorter than the maximum "
                       "length.")
    define_whole_word_mask_flag(defaults)
    flags.DEFINE_integer("random_seed", defaults["random_seed"],
                         "Random seed for data generation.")


def define_whole_word_mask_flag(defaults: dict) -> None:
    """--do_whole_word_mask: also run_pretraining.py's, with --dynamic_masking."""
    flags.DEFINE_bool("do_whole_word_mask", defaults["do_whole_word_mask"],
                      "Mask whole words (all pieces of a word of the vocab's word splitter: MeCab "
                      "words in Japanese mode) instead of single pieces.")


def define_next_sentence_flag(defaults: dict) -> None:
    """--next_sentence_prediction: create_pretraining_data.py's records and run_pretraining.py's
    loss (docs/budget.md)."""
    flags.DEFINE_bool("next_sentence_prediction", defaults["next_sentence_prediction"],
                      "Google's next-sentence prediction. false: create_pretraining_data.py "
                      "writes each record as one full-length window of a document's tokens "
                      "([CLS] tokens [SEP], RoBERTa's DOC-SENTENCES), and run_pretraining.py "
                      "trains the masked LM alone (the next-sentence head stays in the "
                      "checkpoint, untrained).")


def define_worker_flags(defaults: dict) -> None:
    """--num_workers and --progress: how the work runs on this machine."""
    flags.DEFINE_integer("num_workers", defaults["num_workers"],
                         "Worker processes on this machine (one input shard each at a time).")
    flags.DEFINE_bool("progress", defaults["progress"], "Show progress bars on stderr.")
