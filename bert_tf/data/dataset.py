"""Wikipedia dumps and/or text shards -> phase-1 and phase-2 pretraining TFRecords, in one
resumable command:

    python -m bert_tf prepare_dataset --input_files='dumps/enwiki-*-pages-articles*.xml.bz2' \
        --output_dir=data/enwiki --vocab_file=vocab.txt --num_workers=64

Stages, each with a progress bar:
1. documents/: every dump (a name containing ".xml") is streamed into document shards of about
   --shard_mb (so the shard count follows the corpus size); other inputs are taken as they are:
   text already one sentence per line with blank lines between documents (format_text output).
2. phase1_seq128/ and phase2_seq512/ (--phases): one TFRecord file per document shard, with
   create_pretraining_data's algorithm and NVIDIA's settings (dupe factor 5, seq 128 with 20
   predictions and seq 512 with 80, masked_lm_prob 0.15, seed 12345: the defaults of
   NVIDIA DeepLearningExamples TensorFlow2/LanguageModeling/BERT/data/bertPrep.py, whose
   create_datasets_from_start.sh runs it once per phase).

Every shard is written under a temporary name and renamed when complete (bert_tf.data.shards);
a rerun skips the finished shards and writes the same bytes as an uninterrupted run. manifest.json
records the inputs (by sha256), the settings, the vocab's sha256, the counts per shard and the
bert_tf version; a rerun with other inputs or settings is refused, naming what changed, and so is
a second run in the same directory at once. Dumps are checked to be complete (not cut short)
before anything is written. Under mpirun every rank
takes every size-th dump and shard (a shared file system is needed); --num_workers processes per
rank.
"""

import collections
import dataclasses
import os

from absl import flags

import bert_tf
from bert_tf.data import (
    pretraining_data,
    shard_jobs,
    shards,
    shared_flags,
    tokenizer_spec,
    wikipedia,
    workers,
)
from bert_tf.data.files import InputDataError, OutputDirError, expand_patterns
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir


class DatasetError(ValueError):
    """Bad flags or inputs, or an output directory made with other settings."""


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    input_files: str
    output_dir: str
    vocab_file: str
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    # (max_seq_length, max_predictions_per_seq) per phase: NVIDIA's phase 1 and phase 2.
    phases: tuple = ((128, 20), (512, 80))
    dupe_factor: int = 5
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    random_seed: int = 12345
    shard_mb: float = 64.0
    num_workers: int = 1
    progress: bool = True

    def settings(self):
        """What the output depends on (not where it goes, nor how many processes make it)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("input_files", "output_dir", "vocab_file", "num_workers",
                             "progress", "allow_dictionary_mismatch")} | {"phases": [list(p) for p in self.phases]}

    def instance_config(self, max_seq_length, max_predictions_per_seq):
        return pretraining_data.InstanceConfig(
            max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
            dupe_factor=self.dupe_factor, do_whole_word_mask=self.do_whole_word_mask,
            random_seed=self.random_seed)


def is_dump(path):
    return ".xml" in os.path.basename(path)


def expected_manifest(config, input_files, spec):
    """What the output depends on; `spec`: the vocab's TokenizerSpec, recorded when the vocab
    has a spec file (a Google vocab's manifest stays as it was, so older runs resume)."""
    expected = {
        "inputs": shards.input_identities(input_files),
        "settings": config.settings() | {"do_lower_case": spec.do_lower_case},
        "vocab_sha256": shards.file_sha256(config.vocab_file),
    }
    if tokenizer_spec.read_spec(config.vocab_file) is not None:
        expected["tokenizer_spec"] = spec.to_json()
    return expected


# --------------------------------------------------------------------------- stages


def document_shards(document_dir, prefixes):
    """The finished document shards of every dump, in dump order."""
    paths = []
    for prefix in prefixes.values():
        index = 0
        while shards.is_done(path := wikipedia.shard_path(document_dir, prefix, index)):
            paths.append(path)
            index += 1
    return paths


def _phase_job(shard_index, input_path, output_path, vocab_file, do_lower_case, config,
               allow_dictionary_mismatch):
    """One input shard -> one finished TFRecord file (counts recorded, renamed). The installed
    dictionary was checked by validate() on this host: the worker does not hash it again."""
    stats = pretraining_data.process_shard(shard_index, input_path,
                                           [shards.temporary_path(output_path)], vocab_file,
                                           do_lower_case, config, allow_dictionary_mismatch,
                                           check_dictionary=False)
    counts = {k: stats[k] for k in ("documents", "sentences", "input_tokens", "instances",
                                    "tokens", "replaced_bytes")}
    shards.finish(output_path, counts | {"input": os.path.basename(input_path)})
    return stats


def write_phase(inputs, phase_dir, config, instance_config, rank=0, size=1):
    """Stage 2/3: every input shard not yet done -> PHASE_DIR/part-NNNNN.tfrecord."""
    os.makedirs(phase_dir, exist_ok=True)
    outputs = [os.path.join(phase_dir, f"part-{i:05d}.tfrecord") for i in range(len(inputs))]
    jobs = [(i, path, outputs[i], config.vocab_file, config.do_lower_case, instance_config,
             config.allow_dictionary_mismatch)
            for i, path in enumerate(inputs) if not shards.is_done(outputs[i])]
    shard_jobs.run_jobs(jobs[rank::size], config.num_workers, config.progress and rank == 0,
                        len(inputs), run=_phase_job_tuple, desc=os.path.basename(phase_dir))
    return outputs


def _phase_job_tuple(job):
    return _phase_job(*job)


def phase_dir_name(index, max_seq_length):
    return f"phase{index + 1}_seq{max_seq_length}"


# --------------------------------------------------------------------------- the whole job


def validate(config):
    check_number("num_workers", config.num_workers, at_least=1, integer=True,
                 error=DatasetError)
    check_number("shard_mb", config.shard_mb, above=0, error=DatasetError)
    for seq, predictions in config.phases:
        config.instance_config(seq, predictions).validate()
    try:
        input_files = expand_patterns(config.input_files)
    except InputDataError as e:
        raise DatasetError(f"--input_files: {e}") from e
    from bert_tf.data.tokenization import resolve_spec

    # Fail early on a bad vocab, or flags or a dictionary that contradict its spec.
    spec = resolve_spec(config.vocab_file, config.do_lower_case, config.allow_dictionary_mismatch)
    try:
        check_output_dir(config.output_dir, "output_dir", create=True)
    except OutputDirError as e:
        raise DatasetError(str(e)) from e
    return input_files, spec


def prepare_dataset(config):
    """The whole job; returns the manifest (on MPI rank 0; other ranks return None)."""
    input_files, spec = validate(config)
    dumps = [p for p in input_files if is_dump(p)]
    for dump in dumps:
        wikipedia.check_complete(dump)
    expected = expected_manifest(config, input_files, spec)
    comm = shard_jobs.mpi_comm()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm else (0, 1)
    shards.check_manifest(config.output_dir, expected)  # every rank fails alike
    _barrier(comm)
    with shards.claimed_output_dir(config.output_dir, expected, enabled=rank == 0,
                                   input_paths=input_files, stages={}):
        _barrier(comm)
        document_dir = os.path.join(config.output_dir, "documents")
        prefixes = wikipedia.extract_dumps(dumps, document_dir, config.shard_mb * 1e6,
                                           config.num_workers, config.progress and rank == 0,
                                           rank, size)
        _barrier(comm)
        inputs = document_shards(document_dir, prefixes) + [p for p in input_files
                                                            if not is_dump(p)]
        stages = {"documents": _stage_counts(inputs)}
        for index, (seq, predictions) in enumerate(config.phases):
            phase_dir = os.path.join(config.output_dir, phase_dir_name(index, seq))
            outputs = write_phase(inputs, phase_dir, config,
                                  config.instance_config(seq, predictions), rank, size)
            _barrier(comm)
            stages[os.path.basename(phase_dir)] = _stage_counts(outputs)
    if rank != 0:
        return None
    shards.write_manifest(config.output_dir, expected, input_paths=input_files, stages=stages)
    return {**expected, "stages": stages}


def _barrier(comm):
    if comm is not None:
        comm.barrier()


def _stage_counts(paths):
    """{"shards": {name: counts}, "total": summed counts} of finished shards (text inputs that
    were given as they are have no counts)."""
    per_shard = {os.path.basename(p): (shards.read_counts(p) if shards.is_done(p) else {})
                 for p in paths}
    total = collections.Counter()
    for counts in per_shard.values():
        total.update({k: v for k, v in counts.items() if isinstance(v, int)})
    return {"shards": per_shard, "total": dict(total)}


# --------------------------------------------------------------------------- command line


def define_flags():
    """Defines the flags (defaults from DatasetConfig)."""
    d = bert_tf.flag_defaults(DatasetConfig)
    flags.DEFINE_string("input_files", None, "Comma-separated files or globs: Wikipedia dumps "
                        "(*.xml, *.xml.bz2, ...) and/or sentence-per-line text shards.")
    flags.DEFINE_string("output_dir", None, "Where documents/, phase*/ and manifest.json go.")
    shared_flags.define_vocab_flags(d)
    flags.DEFINE_list("phases", [f"{seq}:{predictions}" for seq, predictions in d["phases"]],
                      "max_seq_length:max_predictions_per_seq per phase (NVIDIA's 2 phases).")
    shared_flags.define_instance_flags(d)
    flags.DEFINE_float("shard_mb", d["shard_mb"], "Size of a document shard (the unit of "
                       "parallel work and of memory use): the shard count follows the corpus "
                       "size.")
    shared_flags.define_worker_flags(d)
    flags.mark_flags_as_required(["input_files", "output_dir", "vocab_file"])


def parse_phases(values):
    try:
        phases = tuple(tuple(int(x) for x in v.split(":")) for v in values)
        if not phases or any(len(phase) != 2 for phase in phases):
            raise ValueError(values)
        return phases
    except ValueError:
        raise DatasetError(f"--phases={','.join(values)}: use max_seq_length:max_predictions "
                           "pairs such as 128:20,512:80") from None


def config_from_flags(flag_values):
    """The DatasetConfig of the parsed flags (--phases as (seq, predictions) pairs);
    DatasetError on a malformed --phases."""
    return bert_tf.config_from_flags(DatasetConfig, flag_values,
                                     phases=parse_phases(flag_values["phases"].value))


def run(config: DatasetConfig) -> int:
    """Prepares the dataset and prints its counts; returns the exit status (128 + the signal
    when interrupted). DatasetError, InputDataError, PretrainingDataError, VocabError on bad
    input."""
    # Also when this process makes the records itself (--num_workers=1, or one input file).
    workers.hide_gpus()
    try:
        with workers.interruptible():
            manifest = prepare_dataset(config)
    except workers.Interrupted as e:
        return workers.stopped_status("prepare_dataset", e, "finished shards are kept")
    if manifest is not None:
        for stage, counts in manifest["stages"].items():
            print(f"{stage}: {len(counts['shards'])} shards, {counts['total']}")
        print(f"manifest: {os.path.join(config.output_dir, shards.MANIFEST)}")
    return 0


if __name__ == "__main__":
    from bert_tf.data.tokenization import VocabError

    bert_tf.run_command(define_flags, config_from_flags, run, errors=(
        DatasetError, InputDataError, OutputDirError, pretraining_data.PretrainingDataError,
        VocabError), error_status=2)
