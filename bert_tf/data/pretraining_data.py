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
"""

import collections
import dataclasses
import functools
import os
import random
import sys
import time

import numpy as np

from bert_tf.data import workers
from bert_tf.data.files import (
    InputDataError,
    OutputDirError,
    check_writable,
    expand_patterns,
    read_text,
)
from bert_tf.data.records import feature_lengths, num_to_predict, serialize_examples

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

    def validate(self):
        if self.max_seq_length < 5:
            raise PretrainingDataError(
                f"--max_seq_length={self.max_seq_length} is too small: [CLS] A [SEP] B [SEP] "
                "needs at least 5 positions")
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length - 3:
            raise PretrainingDataError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be between 1 and "
                f"max_seq_length-3={self.max_seq_length - 3} (the tokens a sequence can mask)")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise PretrainingDataError(f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise PretrainingDataError(f"--short_seq_prob={self.short_seq_prob} must be in [0, 1]")
        if self.dupe_factor < 1:
            raise PretrainingDataError(f"--dupe_factor={self.dupe_factor} must be at least 1")
        if self.dynamic_masking and (self.do_whole_word_mask or self.masked_lm_prob != 0.15):
            # The records carry no masks: training chooses them with input_pipeline's
            # DynamicMasking, which masks single WordPieces at 15%, so these would be ignored.
            raise PretrainingDataError(
                "--dynamic_masking writes unmasked records, and run_pretraining.py "
                "--dynamic_masking masks single WordPieces with probability 0.15: it cannot honour "
                f"--do_whole_word_mask={self.do_whole_word_mask} / "
                f"--masked_lm_prob={self.masked_lm_prob}. Drop those flags, or write masked "
                "records (without --dynamic_masking) to use them")


# --------------------------------------------------------------------------- reading + tokenizing


def read_documents(path, tokenizer, stats):
    """Tokenizes one input file -> (flat token ids, sentence [start, end) offsets into them,
    document [first, last+1) sentence ranges). Undecodable bytes are replaced and counted."""
    try:
        text, replaced = read_text(path)
    except InputDataError as e:
        raise PretrainingDataError(str(e)) from e
    stats["input_bytes"] += os.path.getsize(path)  # on disk (compressed), as the progress bar
    stats["replaced_bytes"] += replaced
    lines = [line.strip() for line in text.split("\n")]
    del text
    nonblank = [line for line in lines if line]
    flat_parts, length_parts = [], []
    for i in range(0, len(nonblank), TOKENIZE_BATCH_LINES):
        ids, splits = tokenizer.tokenize_ids_batch(nonblank[i:i + TOKENIZE_BATCH_LINES])
        flat_parts.append(ids)
        length_parts.append(np.diff(splits))
    flat = np.concatenate(flat_parts) if flat_parts else np.zeros([0], np.int32)
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
    return flat, starts[keep], ends[keep], doc_ranges


# --------------------------------------------------------------------------- instance creation


def create_pairs(sentence_starts, sentence_ends, doc_ranges, config, rng, stats):
    """Google's segment-pair algorithm over one shard's documents, `dupe_factor` passes.

    Returns int64 array [n, 5]: a_start, a_end, b_start, b_end (offsets into the shard's flat
    token ids, after truncation) and is_random_next.
    """
    max_num_tokens = config.max_seq_length - 3
    lengths = (sentence_ends - sentence_starts).tolist()
    starts, ends = sentence_starts.tolist(), sentence_ends.tolist()
    stats["long_sentences"] += sum(n > max_num_tokens for n in lengths)
    pairs = []
    num_docs = len(doc_ranges)
    for _ in range(config.dupe_factor):
        for doc_index, (first, stop) in enumerate(doc_ranges):
            target = max_num_tokens
            if rng.random() < config.short_seq_prob:
                target = rng.randint(2, max_num_tokens)
            chunk_first, chunk_length, i = first, 0, first
            while i < stop:
                chunk_length += lengths[i]
                if i == stop - 1 or chunk_length >= target:
                    num_chunk = i - chunk_first + 1
                    a_sentences = rng.randint(1, num_chunk - 1) if num_chunk >= 2 else 1
                    a_start, a_end = starts[chunk_first], ends[chunk_first + a_sentences - 1]
                    if num_chunk == 1 or rng.random() < 0.5:
                        is_random_next = 1
                        target_b = target - (a_end - a_start)
                        for _ in range(10):
                            other = rng.randint(0, num_docs - 1)
                            if other != doc_index:
                                break
                        other_first, other_stop = doc_ranges[other]
                        j = rng.randint(other_first, other_stop - 1)
                        b_start, b_end = starts[j], ends[j]
                        while b_end - b_start < target_b and j + 1 < other_stop:
                            j += 1
                            b_end = ends[j]
                        # The chunk's unused sentences start the next chunk.
                        i -= num_chunk - a_sentences
                    else:
                        is_random_next = 0
                        b_start, b_end = ends[chunk_first + a_sentences - 1], ends[i]
                    pairs.append(_truncate_pair(a_start, a_end, b_start, b_end, is_random_next,
                                                max_num_tokens, rng, stats))
                    chunk_first, chunk_length = i + 1, 0
                i += 1
    return np.asarray(pairs, np.int64).reshape(-1, 5)


def _truncate_pair(a_start, a_end, b_start, b_end, is_random_next, max_num_tokens, rng, stats):
    """Google's truncate_seq_pair in closed form: tokens leave the longer segment (B on ties) one
    at a time, each from its front or back with probability 1/2."""
    len_a, len_b = a_end - a_start, b_end - b_start
    excess = len_a + len_b - max_num_tokens
    if excess > 0:
        stats["truncated_instances"] += 1
        stats["truncated_tokens"] += excess
        first = min(excess, abs(len_a - len_b))
        rest = excess - first
        cut_a = rest // 2 + (first if len_a > len_b else 0)
        cut_b = rest - rest // 2 + (0 if len_a > len_b else first)
        front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
        front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
        a_start, a_end = a_start + front_a, a_end - (cut_a - front_a)
        b_start, b_end = b_start + front_b, b_end - (cut_b - front_b)
    return a_start, a_end, b_start, b_end, is_random_next


def assemble_tokens(flat, pairs, tokenizer, max_seq_length):
    """[CLS] A [SEP] B [SEP] + padding for every pair at once -> (input_ids, segment_ids,
    lengths) with input_ids/segment_ids int64 [n, S]."""
    position = np.arange(max_seq_length)[None, :]
    a_start, a_end, b_start, b_end = (pairs[:, k:k + 1] for k in range(4))
    len_a, len_b = a_end - a_start, b_end - b_start
    in_a = (position >= 1) & (position <= len_a)
    in_b = (position >= len_a + 2) & (position <= len_a + len_b + 1)
    source = np.where(in_a, a_start + position - 1, np.where(in_b, b_start + position - len_a - 2, 0))
    input_ids = np.where(in_a | in_b, flat[np.minimum(source, max(flat.size - 1, 0))],
                         tokenizer.pad_id).astype(np.int64)
    input_ids[:, 0] = tokenizer.cls_id
    rows = np.arange(len(pairs))
    input_ids[rows, len_a[:, 0] + 1] = tokenizer.sep_id
    input_ids[rows, (len_a + len_b)[:, 0] + 2] = tokenizer.sep_id
    lengths = (len_a + len_b + 3)[:, 0]
    segment_ids = ((position >= len_a + 2) & (position < lengths[:, None])).astype(np.int64)
    return input_ids, segment_ids, lengths


def choose_masks(input_ids, lengths, segment_lengths_a, config, tokenizer, word_starts, rng):
    """Google's create_masked_lm_predictions for a batch of instances.

    Returns (masked input_ids, positions [n, P], label ids [n, P], weights [n, P], counts) where
    counts tallies the 80/10/10 decisions. word_starts (bool per vocab id, for whole-word masking)
    is None for per-token masking.
    """
    n, seq_length = input_ids.shape
    max_predictions = config.max_predictions_per_seq
    position = np.arange(seq_length)[None, :]
    len_a = segment_lengths_a[:, None]
    candidate = ((position >= 1) & (position <= len_a)) | (
        (position >= len_a + 2) & (position < lengths[:, None] - 1))
    num_to_mask = num_to_predict(lengths, config.masked_lm_prob, max_predictions).astype(np.int64)
    keys = rng.random((n, seq_length))
    if word_starts is None:
        order = np.argsort(np.where(candidate, keys, 2.0), axis=1)[:, :max_predictions]
        chosen = np.arange(max_predictions)[None, :] < np.minimum(
            num_to_mask, candidate.sum(1))[:, None]
        positions = np.sort(np.where(chosen, order, seq_length), axis=1)
    else:
        positions = _choose_whole_words(input_ids, candidate, keys, num_to_mask, word_starts,
                                        max_predictions, seq_length)
    valid = positions < seq_length
    positions = np.where(valid, positions, 0)
    rows = np.arange(n)[:, None]
    labels = np.where(valid, input_ids[rows, positions], 0)
    decision = rng.random(positions.shape)
    random_ids = rng.integers(0, tokenizer.vocab_size, positions.shape)
    replacement = np.where(decision < 0.8, tokenizer.mask_id,
                           np.where(decision < 0.9, labels, random_ids))
    masked = input_ids.copy()
    masked[np.broadcast_to(rows, positions.shape)[valid], positions[valid]] = replacement[valid]
    counts = {
        "masked": int(valid.sum()),
        "masked_as_mask": int((valid & (decision < 0.8)).sum()),
        "masked_kept": int((valid & (decision >= 0.8) & (decision < 0.9)).sum()),
        "masked_random": int((valid & (decision >= 0.9)).sum()),
    }
    return masked, positions, labels, valid.astype(np.float32), counts


def _choose_whole_words(input_ids, candidate, keys, num_to_mask, word_starts, max_predictions,
                        seq_length):
    """Whole words in random order, skipping a word that would overflow num_to_mask (Google)."""
    continues = candidate & ~word_starts[input_ids]
    continues[:, 1:] &= candidate[:, :-1]
    positions = np.full((len(input_ids), max_predictions), seq_length, np.int64)
    for row in range(len(input_ids)):
        token_positions = np.flatnonzero(candidate[row])
        word_first = token_positions[~continues[row, token_positions]]
        word_ends = np.append(word_first[1:], seq_length)
        chosen = []
        limit = num_to_mask[row]
        for w in np.argsort(keys[row, :len(word_first)]):
            if len(chosen) >= limit:
                break
            word = token_positions[(token_positions >= word_first[w])
                                   & (token_positions < word_ends[w])]
            if len(chosen) + len(word) <= limit:
                chosen.extend(word.tolist())
        positions[row, :len(chosen)] = sorted(chosen)
    return positions


# --------------------------------------------------------------------------- one shard


@functools.cache
def _tokenizer(vocab_file, do_lower_case):
    from bert_tf.data.tokenization import FullTokenizer

    return FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def process_shard(shard_index, input_path, part_paths, vocab_file, do_lower_case, config):
    """Input file -> instances written round-robin to part_paths (temporary names). Returns
    a Counter of statistics."""
    import tensorflow as tf

    stats = collections.Counter(shards=1)
    started = time.perf_counter()
    tokenizer = _tokenizer(vocab_file, do_lower_case)
    flat, sentence_starts, sentence_ends, doc_ranges = read_documents(input_path, tokenizer, stats)
    rng = random.Random(f"{config.random_seed}:{shard_index}")
    np_rng = np.random.default_rng([config.random_seed, shard_index])
    pairs = (create_pairs(sentence_starts, sentence_ends, doc_ranges, config, rng, stats)
             if doc_ranges else np.zeros([0, 5], np.int64))
    pairs = pairs[np_rng.permutation(len(pairs))]
    word_starts = None
    if config.do_whole_word_mask:
        word_starts = np.array([not tokenizer.inv_vocab.get(i, "").startswith("##")
                                for i in range(tokenizer.vocab_size)])
    lengths_by_name = feature_lengths(config.max_seq_length, config.max_predictions_per_seq)
    writers = [tf.io.TFRecordWriter(path) for path in part_paths]
    try:
        written = 0
        for begin in range(0, len(pairs), ENCODE_BATCH):
            batch = pairs[begin:begin + ENCODE_BATCH]
            input_ids, segment_ids, lengths = assemble_tokens(flat, batch, tokenizer,
                                                              config.max_seq_length)
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
            check_writable(directory, "output_file")
        except OutputDirError as e:
            raise PretrainingDataError(str(e)) from e


def mpi_comm():
    """The MPI world communicator when launched by mpirun with more than one rank, else None."""
    size_vars = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE")
    if not any(int(os.environ.get(v, "1")) > 1 for v in size_vars):
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _single_threaded_cpu_tensorflow():
    """Worker processes already fill the cores; TF's own thread pools would oversubscribe them.
    They compute on the CPU: on a GPU node each would otherwise create a context on every GPU,
    and TensorFlow reserve most of their memory. Before the worker's first op: CUDA reads the
    variable when TensorFlow initialises it."""
    workers.hide_gpus()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


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


def plan_jobs(input_file, output_file, vocab_file, do_lower_case, config):
    """Validates the flags -> (input files, output files, process_shard jobs, parts of each
    output in input order)."""
    from bert_tf.data.tokenization import load_vocab

    config.validate()
    input_files = _input_files(input_file)
    load_vocab(vocab_file)  # fail early on a bad vocab
    outputs = resolve_output_files(output_file, len(input_files))
    if not outputs:
        raise PretrainingDataError("--output_file is empty")
    check_output_dirs(outputs)
    targets = assign_parts(len(input_files), len(outputs))
    jobs = [(i, path, [_part_path(outputs[j], i) for j in targets[i]], vocab_file,
             do_lower_case, config) for i, path in enumerate(input_files)]
    parts = [[_part_path(output, i) for i in range(len(input_files)) if j in targets[i]]
             for j, output in enumerate(outputs)]
    return input_files, outputs, jobs, parts


def create_pretraining_data(input_file, output_file, vocab_file, do_lower_case=True,
                            config=InstanceConfig(), num_workers=1, progress=True):
    """The whole run: validates, spreads input shards over MPI ranks and worker processes,
    writes outputs under temporary names and renames them when all are complete. Returns the
    summary dict (on MPI rank 0 the totals; other ranks return None)."""
    if num_workers < 1:
        raise PretrainingDataError(f"--num_workers={num_workers} must be at least 1")
    input_files, outputs, jobs, parts = plan_jobs(input_file, output_file, vocab_file,
                                                  do_lower_case, config)
    comm = mpi_comm()
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
            _concatenate(output_parts, output)
    except BaseException:
        _remove([p for output_parts in parts for p in output_parts])
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
        stats = run_jobs(my_jobs, num_workers, progress, num_inputs)
        failed = None
    except BaseException as e:  # remove our parts, then re-raise (also on KeyboardInterrupt)
        failed = e
    if comm is not None:
        all_failed = comm.allgather(failed is not None)
        all_stats = comm.gather(stats, root=0)
    else:
        all_failed, all_stats = [failed is not None], [stats]
    if any(all_failed):
        _remove([part for job in my_jobs for part in job[2]])
        if failed is not None:
            raise failed
        raise PretrainingDataError("another MPI rank failed; see its error")
    return all_stats


def _remove(paths):
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def run_jobs(jobs, num_workers, progress, num_inputs, run=_run_shard, desc=None):
    """Runs `run(job)` for every job (job[1] is its input file), in `num_workers` processes that
    die with this one; returns the summed statistics."""
    from tqdm import tqdm

    total = collections.Counter()
    bar = tqdm(total=sum(os.path.getsize(job[1]) for job in jobs), unit="B", unit_scale=True,
               disable=not progress, file=sys.stderr,
               desc=f"{desc + ': ' if desc else ''}{len(jobs)} of {num_inputs} shards")
    with bar:
        if num_workers == 1 or len(jobs) <= 1:
            results = map(run, jobs)
            pool = None
        else:
            # A fork of a process that has run TensorFlow ops is not safe, and a spawned worker
            # pays TensorFlow's ~10 CPU-s import each. The forkserver is a fresh process that
            # imports TensorFlow once, runs nothing, and forks every worker from there.
            pool = workers.pool(min(num_workers, len(jobs)), _single_threaded_cpu_tensorflow,
                                "forkserver", ["tensorflow", "tensorflow_text",
                                               "bert_tf.data.pretraining_data"])
            results = pool.imap_unordered(run, jobs)
        try:
            for stats in results:
                total += stats
                bar.update(stats["input_bytes"])
                bar.set_postfix(instances=total["instances"])
        finally:
            if pool is not None:
                pool.terminate()
    return total


def _concatenate(parts, output):
    """TFRecord files concatenate byte-wise; written to a temporary name, then renamed."""
    if len(parts) == 1:
        os.replace(parts[0], output)
        return
    temporary = f"{output}.tmp"
    try:
        with open(temporary, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 24):
                        out.write(chunk)
    except BaseException:
        _remove([temporary])
        raise
    os.replace(temporary, output)
    _remove(parts)


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
