"""What a run checks and prepares before its first update, pretraining and fine-tuning alike:
--output_dir claimed, --bert_config_file, --precision=amp; and pretraining's data: the vocab for
--dynamic_masking, the records of --input_files/--eval_files and the training batches.
"""

import contextlib

import tensorflow as tf

from bert_tf.data import input_pipeline, records
from bert_tf.data.files import InputDataError, expand_patterns
from bert_tf.data.tokenization import load_tokenizer
from bert_tf.model.config import BertConfig
from bert_tf.train import distributed, faults, precision
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.faults import TrainingError
from bert_tf.train.report import Reporter


@contextlib.contextmanager
def claimed_output_dir(output_dir: str, check_shared: bool = True):
    """Rank 0 holds --output_dir's lock (faults.claimed_output_dir) for the block; every rank
    checks it sees rank 0's files (unless not `check_shared`). Yields the run's Reporter."""
    is_chief = distributed.rank() == 0
    with (faults.claimed_output_dir(output_dir, enabled=is_chief) as notes,
          Reporter(output_dir, enabled=is_chief) as report):
        for note in notes:
            report.log(note)
        if check_shared:
            distributed.check_shared_output_dir(output_dir)
        yield report


def enable_amp(config: PretrainingConfig, report: Reporter) -> None:
    """--precision=amp: Grappler's mixed-precision rewrite on (XLA bypasses it: says so)."""
    if config.precision != "amp":
        return
    option = precision.enable_auto_mixed_precision(precision.has_gpu())
    report.log(f"--precision=amp: Grappler rewrite {option} on")
    if config.use_xla:
        report.log("warning: --use_xla compiles forward/backward without the AMP rewrite (XLA "
                   "bypasses Grappler): that part runs in float32")


def load_bert_config(path: str, max_seq_length: int) -> BertConfig:
    """--bert_config_file, checked to have a position for each of --max_seq_length tokens."""
    if not tf.io.gfile.exists(path):
        raise TrainingError(f"--bert_config_file={path} does not exist")
    bert_config = BertConfig.from_json_file(path)
    if max_seq_length > bert_config.max_position_embeddings:
        raise TrainingError(
            f"--max_seq_length={max_seq_length} is longer than the model's "
            f"max_position_embeddings={bert_config.max_position_embeddings} in "
            f"--bert_config_file={path}; use --max_seq_length={bert_config.max_position_embeddings}"
            " or less")
    return bert_config


def load_dynamic_masking(config: PretrainingConfig,
                         bert_config: BertConfig) -> input_pipeline.DynamicMasking:
    """[MASK], the special ids, the random-token range and (--do_whole_word_mask) the
    word-initial ids from --vocab_file and its tokenizer spec (the records are already
    tokenized: its word splitter's dictionary is not needed)."""
    tokenizer = load_tokenizer(config.vocab_file, check_dictionary=False)
    if tokenizer.vocab_size != bert_config.vocab_size:
        raise TrainingError(
            f"--vocab_file={config.vocab_file} has {tokenizer.vocab_size} tokens but vocab_size "
            f"is {bert_config.vocab_size} in --bert_config_file={config.bert_config_file}; "
            "--dynamic_masking needs the vocab file the data was made with and the "
            "bert_config.json made for it")
    return input_pipeline.DynamicMasking.from_tokenizer(
        tokenizer, masked_lm_prob=config.masked_lm_prob, whole_word=config.do_whole_word_mask)


def validated_files(config: PretrainingConfig, flag: str, bert_config: BertConfig,
                    split_over_ranks: bool = True) -> list[str]:
    """The non-empty files of --input_files or --eval_files, checked once (records.
    check_records): split over the ranks (`check_share`), each rank checking every size-th file,
    so that a rank's start-up reads do not grow with the number of files (each of 64 ranks
    checking all 1,472 files of NVIDIA's phase 1 read ~100 GiB in all); every rank then raises
    the first problem any rank found. Not `split_over_ranks`: every rank checks every file,
    with no collective (elastic Horovod before its first sync)."""
    try:
        files = expand_patterns(getattr(config, flag))
    except InputDataError as e:
        raise InputDataError(f"--{flag}: {e}") from None
    rank, size = (distributed.rank(), distributed.size()) if split_over_ranks else (0, 1)
    findings = distributed.gathered(check_share(files, rank, size, config, flag, bert_config),
                                    name=f"checked_{flag}")
    problems = [finding for finding in findings if isinstance(finding, str)]
    if problems:
        raise InputDataError(problems[0])
    nonempty = set().union(*findings)
    kept = [f for f in files if f in nonempty]
    if not kept:
        raise InputDataError(records.all_empty_message(files, flag))
    return kept


def check_share(files, rank: int, size: int, config: PretrainingConfig, flag: str,
                bert_config: BertConfig) -> list[str] | str:
    """Rank `rank` of `size`'s part of the check: files[rank::size]; returns the non-empty ones,
    or the message of the first problem."""
    try:
        return records.check_records(files[rank::size], config.max_seq_length,
                                     config.max_predictions_per_seq,
                                     vocab_size=bert_config.vocab_size,
                                     masked=not config.dynamic_masking, flag=flag)
    except InputDataError as e:
        return str(e)


def train_dataset(config: PretrainingConfig, files, rank, num_ranks, masking=None,
                  skip_batches=0):
    """This rank's training micro-batches after the first `skip_batches` (a resumed run's input
    position); with `masking`, masks are chosen per batch, seeded by its index."""
    return input_pipeline.pretraining_dataset(
        files, batch_size=config.train_batch_size, max_seq_length=config.max_seq_length,
        max_predictions_per_seq=config.max_predictions_per_seq, is_training=True,
        rank=rank, num_ranks=num_ranks, seed=config.seed, dynamic_masking=masking,
        skip_batches=skip_batches, batches_per_update=config.num_accumulation_steps)
