"""Raw text (one sentence per line, blank line between documents) -> pretraining TFRecords.

Google's create_pretraining_data.py algorithm (segment pairs from consecutive sentences up to a
target length, 50% random next segment from another document, longest-first pair truncation from a
random end, 15% masking 80/10/10, optional whole-word masking, dupe_factor passes, instances
shuffled) and Google's TFRecord schema. Differences, for speed and bounded memory:

- The unit of work is one input file (a shard): its documents are tokenized in batches through
  tensorflow-text, instances are drawn with random next segments from documents of the same
  shard, and the shard's instances are shuffled and written. Memory is bounded by the largest
  shard (make shards with `python -m bert_tf format_text --num_shards`).
- Each shard's random streams are seeded from (random_seed, shard index), so the output is the
  same whatever the number of worker processes or MPI ranks.
- Masking is drawn with numpy over all instances of a shard at once, and records are serialized
  by a vectorised encoder of the fixed tf.train.Example layout (parsed back identically by TF).
- Whole-word masking never joins a "##" piece at the start of segment B to the last word of A.

Pairs and their id arrays: bert_tf.data.instances; masking: bert_tf.data.masking; running the
shards over ranks and workers: bert_tf.data.shard_jobs.
"""

import collections
import dataclasses
import functools
import os
import random
import time

import numpy as np

from bert_tf.data import shard_jobs
from bert_tf.data.files import (
    InputDataError,
    OutputDirError,
    expand_patterns,
    read_text,
)
from bert_tf.data.instances import assemble_tokens, create_pairs, create_windows
from bert_tf.data.masking import choose_masks
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir
from bert_tf.data.records import feature_lengths, serialize_examples

# Lines tokenized per tensorflow-text call: large batches amortise the per-call overhead.
TOKENIZE_BATCH_LINES = 8192
# Instances masked and serialized per numpy batch (bounds temporary arrays).
ENCODE_BATCH = 16384


class PretrainingDataError(ValueError):
    """Bad flags or inputs; the message names the flag or file and what to do."""


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    do_whole_word_mask: bool = False
    random_seed: int = 12345
    # True: write unmasked records (masked_lm_* all zero) for input_pipeline.DynamicMasking.
    dynamic_masking: bool = False
    # False: full-length windows of each document, one segment (instances.create_windows).
    next_sentence_prediction: bool = True

    def validate(self):
        if self.max_seq_length < 5:
            raise PretrainingDataError(
                f"--max_seq_length={self.max_seq_length} is too small: [CLS] A [SEP] B [SEP] "
                "needs at least 5 positions")
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length - 3:
            raise PretrainingDataError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be between 1 and "
                f"max_seq_length-3={self.max_seq_length - 3} (the tokens a sequence can mask)")
        error = PretrainingDataError
        check_number("masked_lm_prob", self.masked_lm_prob, above=0, below=1, error=error)
        check_number("short_seq_prob", self.short_seq_prob, at_least=0, at_most=1, error=error)
        check_number("dupe_factor", self.dupe_factor, at_least=1, integer=True, error=error)
        if self.dynamic_masking and (self.do_whole_word_mask or self.masked_lm_prob != 0.15):
            # The records carry no masks: training chooses them (input_pipeline's
            # DynamicMasking), so these would be ignored.
            raise PretrainingDataError(
                "--dynamic_masking writes unmasked records, which run_pretraining.py "
                "--dynamic_masking masks: here it cannot honour "
                f"--do_whole_word_mask={self.do_whole_word_mask} / "
                f"--masked_lm_prob={self.masked_lm_prob}. Pass those flags to "
                "run_pretraining.py instead, or write masked records (without "
                "--dynamic_masking) to use them here")


# --------------------------------------------------------------------------- reading + tokenizing


def read_documents(path, tokenizer, stats):
    """Tokenizes one input file -> (flat token ids, whether each begins a word of the word
    splitter, sentence [start, end) offsets into them, document [first, last+1) sentence
    ranges). Undecodable bytes are replaced and counted."""
    try:
        text, replaced = read_text(path)
    except InputDataError as e:
        raise PretrainingDataError(str(e)) from e
    stats["input_bytes"] += os.path.getsize(path)  # on disk (compressed), as the progress bar
    stats["replaced_bytes"] += replaced
    lines = [line.strip() for line in text.split("\n")]
    del text
    nonblank = [line for line in lines if line]
    flat_parts, start_parts, length_parts = [], [], []
    for i in range(0, len(nonblank), TOKENIZE_BATCH_LINES):
        ids, splits, word_starts = tokenizer.tokenize_words_batch(
            nonblank[i:i + TOKENIZE_BATCH_LINES])
        flat_parts.append(ids)
        start_parts.append(word_starts)
        length_parts.append(np.diff(splits))
    flat = np.concatenate(flat_parts) if flat_parts else np.zeros([0], np.int32)
    word_starts = np.concatenate(start_parts) if start_parts else np.zeros([0], bool)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros([0], np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # Document boundaries: blank lines. Lines with no tokens are dropped, as Google does.
    keep, doc_ranges = [], []
    sentence, doc_first, doc_has_lines = 0, 0, False
    for line in [*lines, ""]:
        if line:
            doc_has_lines = True
            if lengths[sentence] > 0:
                keep.append(sentence)
            sentence += 1
            continue
        if len(keep) > doc_first:
            doc_ranges.append((doc_first, len(keep)))
        elif doc_has_lines:
            stats["empty_documents"] += 1
        doc_first, doc_has_lines = len(keep), False
    keep = np.asarray(keep, np.int64)
    stats["documents"] += len(doc_ranges)
    stats["sentences"] += len(keep)
    stats["input_tokens"] += int(flat.size)
    return flat, word_starts, starts[keep], ends[keep], doc_ranges


# --------------------------------------------------------------------------- one shard


@functools.cache
def _tokenizer(vocab_file, do_lower_case, allow_dictionary_mismatch, check_dictionary):
    from bert_tf.data.tokenization import load_tokenizer

    return load_tokenizer(vocab_file, do_lower_case, allow_dictionary_mismatch,
                          check_dictionary=check_dictionary)


def process_shard(shard_index, input_path, part_paths, vocab_file, do_lower_case, config,
                  allow_dictionary_mismatch=False, check_dictionary=True):
    """Input file -> instances written round-robin to part_paths (temporary names). Returns
    a Counter of statistics. do_lower_case None: the vocab's tokenizer spec decides.
    check_dictionary False: the caller has checked the installed word-splitter dictionary
    against the vocab's spec on this host (plan_jobs): a worker then does not hash it again
    (unidic-lite: 260 MB, 0.2 CPU-s here)."""
    import tensorflow as tf

    stats = collections.Counter(shards=1)
    started = time.perf_counter()
    tokenizer = _tokenizer(vocab_file, do_lower_case, allow_dictionary_mismatch,
                           check_dictionary)
    flat, flat_word_starts, sentence_starts, sentence_ends, doc_ranges = read_documents(
        input_path, tokenizer, stats)
    rng = random.Random(f"{config.random_seed}:{shard_index}")
    np_rng = np.random.default_rng([config.random_seed, shard_index])
    if not doc_ranges:
        pairs = np.zeros([0, 5], np.int64)
    elif config.next_sentence_prediction:
        pairs = create_pairs(sentence_starts, sentence_ends, doc_ranges, config, rng, stats)
    else:
        pairs = create_windows(sentence_starts, sentence_ends, doc_ranges, config, rng)
    pairs = pairs[np_rng.permutation(len(pairs))]
    lengths_by_name = feature_lengths(config.max_seq_length, config.max_predictions_per_seq)
    writers = [tf.io.TFRecordWriter(path) for path in part_paths]
    try:
        written = 0
        for begin in range(0, len(pairs), ENCODE_BATCH):
            batch = pairs[begin:begin + ENCODE_BATCH]
            input_ids, segment_ids, lengths, word_starts = assemble_tokens(
                flat, batch, tokenizer, config.max_seq_length,
                flat_word_starts if config.do_whole_word_mask else None)
            n = len(batch)
            predictions = lengths_by_name["masked_lm_positions"]
            if config.dynamic_masking:
                positions = labels = np.zeros([n, predictions], np.int64)
                weights = np.zeros([n, predictions], np.float32)
            else:
                input_ids, positions, labels, weights, counts = choose_masks(
                    input_ids, lengths, batch[:, 1] - batch[:, 0], config, tokenizer,
                    word_starts, np_rng)
                stats.update(counts)
            stats["instances"] += n
            stats["tokens"] += int(lengths.sum())
            stats["random_next"] += int(batch[:, 4].sum())
            records = serialize_examples({
                "input_ids": input_ids,
                "input_mask": (np.arange(config.max_seq_length)[None, :]
                               < lengths[:, None]).astype(np.int64),
                "segment_ids": segment_ids,
                "masked_lm_positions": positions,
                "masked_lm_ids": labels,
                "masked_lm_weights": weights,
                "next_sentence_labels": batch[:, 4:5],
            })
            for record in records:
                writers[written % len(writers)].write(record)
                written += 1
    finally:
        for writer in writers:
            writer.close()
    stats["seconds"] = time.perf_counter() - started
    return stats


# --------------------------------------------------------------------------- whole run


def resolve_output_files(output_file, num_inputs):
    """--output_file: comma-separated files, or one name containing "{shard}" (a str.format
    field, e.g. out/part-{shard:05d}.tfrecord) for one output per input file."""
    if "{shard" in output_file:
        try:
            return [output_file.format(shard=i) for i in range(num_inputs)]
        except (KeyError, IndexError, ValueError) as e:
            raise PretrainingDataError(f"--output_file={output_file!r} is not a valid pattern "
                                       "(use a {shard} field such as {shard:05d})") from e
    return [p.strip() for p in output_file.split(",") if p.strip()]


def assign_parts(num_inputs, num_outputs):
    """Which outputs each input shard's instances go to (round-robin), so that output j is the
    concatenation of its parts in input order. Inputs >= outputs: input i -> output i % N.
    Fewer inputs: input i is spread over outputs j with j % num_inputs == i."""
    if num_inputs >= num_outputs:
        return [[i % num_outputs] for i in range(num_inputs)]
    return [list(range(i, num_outputs, num_inputs)) for i in range(num_inputs)]


def _part_path(output_path, shard_index):
    return f"{output_path}.part-{shard_index:05d}.tmp"


def check_output_dirs(output_files):
    for directory in sorted({os.path.dirname(os.path.abspath(p)) for p in output_files}):
        try:
            check_output_dir(directory, "output_file", create=True)
        except OutputDirError as e:
            raise PretrainingDataError(str(e)) from e


def _check_not_an_input(outputs, input_files, vocab_file) -> None:
    """An output that is an input file or the vocab would replace it with records."""
    inputs = {os.path.realpath(p): "--input_file" for p in input_files}
    inputs[os.path.realpath(vocab_file)] = "--vocab_file"
    for output in outputs:
        flag = inputs.get(os.path.realpath(output))
        if flag:
            raise PretrainingDataError(f"--output_file={output} is also {flag}: writing records "
                                       "there would replace that file; choose another "
                                       "--output_file")


def _run_shard(job):
    return process_shard(*job)


def _input_files(input_file):
    """--input_file -> the list of input files, none of them empty."""
    try:
        input_files = expand_patterns(input_file)
    except ValueError as e:
        raise PretrainingDataError(f"--input_file: {e}") from e
    for path in input_files:
        if os.path.getsize(path) == 0:
            raise PretrainingDataError(f"input file {path} is empty; remove it from --input_file")
    return input_files


def plan_jobs(input_file, output_file, vocab_file, do_lower_case, config,
              allow_dictionary_mismatch=False):
    """Validates the flags -> (input files, output files, process_shard jobs, parts of each
    output in input order)."""
    from bert_tf.data.tokenization import resolve_spec

    config.validate()
    input_files = _input_files(input_file)
    # Fail early on a bad vocab, or flags or a dictionary that contradict its spec. Every MPI
    # rank runs this on its host before its jobs, whose workers (on the same host) skip the
    # dictionary check.
    resolve_spec(vocab_file, do_lower_case, allow_dictionary_mismatch)
    outputs = resolve_output_files(output_file, len(input_files))
    if not outputs:
        raise PretrainingDataError("--output_file is empty")
    check_output_dirs(outputs)
    _check_not_an_input(outputs, input_files, vocab_file)
    targets = assign_parts(len(input_files), len(outputs))
    jobs = [(i, path, [_part_path(outputs[j], i) for j in targets[i]], vocab_file,
             do_lower_case, config, allow_dictionary_mismatch, False)
            for i, path in enumerate(input_files)]
    parts = [[_part_path(output, i) for i in range(len(input_files)) if j in targets[i]]
             for j, output in enumerate(outputs)]
    return input_files, outputs, jobs, parts


def create_pretraining_data(input_file, output_file, vocab_file, do_lower_case=None,
                            config=InstanceConfig(), num_workers=1, progress=True,
                            allow_dictionary_mismatch=False):
    """The whole run: validates, spreads input shards over MPI ranks and worker processes,
    writes outputs under temporary names and renames them when all are complete. Returns the
    summary dict (on MPI rank 0 the totals; other ranks return None)."""
    if num_workers < 1:
        raise PretrainingDataError(f"--num_workers={num_workers} must be at least 1")
    input_files, outputs, jobs, parts = plan_jobs(input_file, output_file, vocab_file,
                                                  do_lower_case, config,
                                                  allow_dictionary_mismatch)
    comm = shard_jobs.mpi_comm()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm else (0, 1)
    my_jobs = jobs[rank::size]
    started = time.perf_counter()
    all_stats = _run_everywhere(comm, my_jobs, num_workers, progress and rank == 0,
                                len(input_files))
    if rank != 0:
        comm.barrier()
        return None
    try:
        for output, output_parts in zip(outputs, parts, strict=True):
            shard_jobs.concatenate(output_parts, output)
    except BaseException:
        shard_jobs.remove_files([p for output_parts in parts for p in output_parts])
        raise
    if comm is not None:
        comm.barrier()
    total = sum(all_stats, collections.Counter())
    return summarize(total, time.perf_counter() - started, outputs)


def _run_everywhere(comm, my_jobs, num_workers, progress, num_inputs):
    """Runs this rank's jobs; if any rank failed (or we were interrupted) removes our parts and
    raises. Returns every rank's statistics on rank 0."""
    stats = collections.Counter()
    try:
        stats = shard_jobs.run_jobs(my_jobs, num_workers, progress, num_inputs, _run_shard)
        failed = None
    except BaseException as e:  # remove our parts, then re-raise (also on KeyboardInterrupt)
        failed = e
    if comm is not None:
        all_failed = comm.allgather(failed is not None)
        all_stats = comm.gather(stats, root=0)
    else:
        all_failed, all_stats = [failed is not None], [stats]
    if any(all_failed):
        shard_jobs.remove_files([part for job in my_jobs for part in job[2]])
        if failed is not None:
            raise failed
        raise PretrainingDataError("another MPI rank failed; see its error")
    return all_stats


def summarize(stats, seconds, outputs):
    instances = stats["instances"]
    masked = stats["masked"]
    summary = {
        "output_files": len(outputs),
        "input_shards": stats["shards"],
        "input_mb": stats["input_bytes"] / 1e6,
        "documents": stats["documents"],
        "sentences": stats["sentences"],
        "instances": instances,
        "tokens": stats["tokens"],
        "seconds": seconds,
        "instances_per_second": instances / max(seconds, 1e-9),
        "input_mb_per_second": stats["input_bytes"] / 1e6 / max(seconds, 1e-9),
        "masked_fraction": masked / max(stats["tokens"], 1),
        "masked_as_mask_fraction": stats["masked_as_mask"] / max(masked, 1),
        "masked_random_fraction": stats["masked_random"] / max(masked, 1),
        "masked_kept_fraction": stats["masked_kept"] / max(masked, 1),
        "nsp_random_fraction": stats["random_next"] / max(instances, 1),
        "truncated_instances": stats["truncated_instances"],
        "truncated_tokens": stats["truncated_tokens"],
        "long_sentences": stats["long_sentences"],
        "empty_documents": stats["empty_documents"],
        "replaced_bytes": stats["replaced_bytes"],
    }
    return summary


def format_summary(summary):
    lines = [f"{key:>24}: {value:.4g}" if isinstance(value, float) else f"{key:>24}: {value}"
             for key, value in summary.items()]
    warnings = []
    if summary["replaced_bytes"]:
        warnings.append(f"WARNING: {summary['replaced_bytes']} undecodable input bytes were "
                        "replaced by U+FFFD; the input is not valid UTF-8")
    if summary["empty_documents"]:
        warnings.append(f"WARNING: {summary['empty_documents']} document(s) had no tokens and "
                        "were skipped")
    if summary["long_sentences"]:
        warnings.append(f"WARNING: {summary['long_sentences']} line(s) are longer than "
                        "max_seq_length-3 tokens and were truncated; is the input one sentence "
                        "per line (python -m bert_tf format_text)?")
    if not summary["instances"]:
        warnings.append("WARNING: no instances were written: the input has no documents")
    return "\n".join(lines + warnings)
