"""Running data jobs (one per input shard) over MPI ranks and worker processes, and
assembling their temporary outputs; shared by create_pretraining_data and prepare_dataset."""

import collections
import os
import sys

from bert_tf.data import workers


def mpi_comm():
    """The MPI world communicator when launched by mpirun with more than one rank, else None."""
    size_vars = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE")
    if not any(int(os.environ.get(v, "1")) > 1 for v in size_vars):
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


def single_threaded_cpu_tensorflow():
    """Worker processes already fill the cores; TF's own thread pools would oversubscribe them.
    They compute on the CPU: on a GPU node each would otherwise create a context on every GPU,
    and TensorFlow reserve most of their memory. Before the worker's first op: CUDA reads the
    variable when TensorFlow initialises it."""
    workers.hide_gpus()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def remove_files(paths):
    """Removes those of `paths` that exist."""
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def run_jobs(jobs, num_workers, progress, num_inputs, run, desc=None):
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
            pool = workers.pool(min(num_workers, len(jobs)), single_threaded_cpu_tensorflow,
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


def concatenate(parts, output):
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
        remove_files([temporary])
        raise
    os.replace(temporary, output)
    remove_files(parts)


