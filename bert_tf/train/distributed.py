"""The one Horovod wrapper: the only module that imports Horovod.

Works with horovodrun, mpirun, or no launcher at all (one process, size 1).
A dead peer must not leave the others hanging in a collective: a
`Watchdog` ends this process with an error when no update completes for a bounded time
(--peer_timeout_seconds, 900 s by default). Horovod's own stall shutdown stays off, its default
(horovod/common/stall_inspector.h: stall_shutdown_time_seconds = 0) and what NVIDIA's TF2 BERT
runs with (its run.sub and scripts set no HOROVOD_STALL_*): it would end a job whose ranks
wait for rank 0 writing and re-reading a ~4 GB BERT-large LAMB checkpoint on shared storage,
or for a slow rank's XLA compile or file checks at start. Horovod's stall warning (after 60 s)
stays on and names the ranks that have not submitted a tensor; HOROVOD_STALL_SHUTDOWN_TIME_SECONDS
set by the user is honoured.
"""

import os
import secrets
import socket
import sys
import threading
import time

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HorovodInternalError

from bert_tf.model import devices
from bert_tf.train.report import OutputDirError


def init() -> None:
    """Initialises Horovod once (idempotent)."""
    if hvd.is_initialized():
        return
    hvd.init()


def build_info() -> dict:
    """What this Horovod was built with (the doctor reports it)."""
    return {"TensorFlow": True, "Gloo": bool(hvd.gloo_built()), "MPI": bool(hvd.mpi_built()),
            "NCCL": bool(hvd.nccl_built())}


def pin_gpu_to_local_rank(deterministic: bool = False) -> None:
    """One GPU per process, the local rank's (the usual Horovod layout); nothing on a CPU
    machine. Before any TensorFlow op (model/devices.py, which says what `deterministic` does)."""
    devices.use_one_gpu(hvd.local_rank(), deterministic)


def rank() -> int:
    return hvd.rank()


def size() -> int:
    return hvd.size()


def local_rank() -> int:
    """This process's index among the ranks on its node (its GPU on a real cluster)."""
    return hvd.local_rank()


def local_size() -> int:
    return hvd.local_size()


def cross_rank() -> int:
    """This node's index among the nodes."""
    return hvd.cross_rank()


def cross_size() -> int:
    return hvd.cross_size()


def placement() -> dict:
    """Where this rank runs: its host and its global, local and cross-node indices."""
    return {"host": socket.gethostname(), "rank": hvd.rank(), "size": hvd.size(),
            "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
            "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size()}


class OutputDirNotSharedError(OutputDirError):
    """Some ranks do not see the files rank 0 writes to --output_dir."""


SHARED_MARKER = ".bert_tf-shared-check"


def check_shared_output_dir(output_dir: str) -> None:
    """Rank 0 writes a marker with a fresh token to `output_dir`; every rank checks it reads
    that token. Raises OutputDirNotSharedError on every rank, naming the hosts that do not
    see it, so a run on node-local disks fails at its start, not at a later resume. The
    output directory must already exist on rank 0 (faults.claimed_output_dir made it)."""
    if hvd.size() == 1:
        return
    marker = os.path.join(output_dir, SHARED_MARKER)
    token = secrets.token_hex(8) if hvd.rank() == 0 else None
    if token is not None:
        with open(marker, "w") as f:
            f.write(token)
    token = hvd.broadcast_object(token, root_rank=0, name="shared_dir_token")
    try:
        with open(marker) as f:
            seen = f.read() == token
    except OSError:
        seen = False
    views = hvd.allgather_object((socket.gethostname(), hvd.rank(), seen),
                                 name="shared_dir_views")
    if hvd.rank() == 0:
        os.remove(marker)
    blind = [(host, r) for host, r, ok in views if not ok]
    if blind:
        where = ", ".join(f"rank {r} on {host}" for host, r in blind)
        raise OutputDirNotSharedError(
            f"--output_dir={output_dir} is not shared storage: rank 0 on {views[0][0]} wrote "
            f"{marker}, but {where} cannot read it. Only rank 0 writes checkpoints and logs, "
            "and a resumed run whose rank 0 lands on another node would not find them: put "
            "--output_dir on a filesystem every node mounts at the same path (NFS, Lustre, ...)")


def gathered(value, name: str) -> list:
    """Every rank's `value` (a picklable object), in rank order, on every rank."""
    if hvd.size() == 1:
        return [value]
    return hvd.allgather_object(value, name=name)


def allreduce_sum(tensors, fp16_compression: bool = False) -> list:
    """Sums a list of tensors over ranks in one grouped (fused) allreduce."""
    return _grouped_allreduce(tensors, hvd.Sum, fp16_compression)


def allreduce_mean(tensors, fp16_compression: bool = False) -> list:
    """Averages a list of tensors over ranks in one grouped allreduce (Horovod divides after
    summing, so values compressed to float16 keep each rank's magnitude)."""
    return _grouped_allreduce(tensors, hvd.Average, fp16_compression)


def _grouped_allreduce(tensors, op, fp16_compression: bool) -> list:
    tensors = list(tensors)
    compression = hvd.Compression.fp16 if fp16_compression else hvd.Compression.none

    def reduce():
        return hvd.grouped_allreduce(tensors, op=op, compression=compression)

    if tf.executing_eagerly() or not launched_elastic():
        return reduce() if hvd.size() > 1 else tensors
    # Traced under elastic Horovod, where the graph outlives the world size it was traced at:
    # whether to reduce is decided when it runs, by Horovod's size op, as Horovod does itself
    # under elastic (horovod/tensorflow/__init__.py, _allreduce_cond). hvd.Average divides by
    # the size at run time too.
    return tf.cond(hvd.size_op() > 1, reduce, lambda: [tf.identity(t) for t in tensors])


def broadcast_variables(variables, root_rank: int = 0) -> None:
    if hvd.size() > 1:
        hvd.broadcast_variables(list(variables), root_rank=root_rank)


def barrier() -> None:
    if hvd.size() > 1:
        hvd.allreduce(tf.zeros([1]), op=hvd.Sum, name="barrier")


def is_peer_failure(error: Exception) -> bool:
    """True for the TensorFlow error a collective raises when a peer rank died or Horovod shut
    down (its message names Horovod's op or says Horovod has been shut down)."""
    return isinstance(error, tf.errors.OpError) and "Horovod" in error.message


def where() -> str:
    """'rank R on HOST', for messages."""
    return f"rank {hvd.rank()} on {socket.gethostname()}"


def launched_elastic() -> bool:
    """True under horovodrun's elastic mode (--min-np / --host-discovery-script)."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


class ElasticState(ObjectState):
    """What elastic Horovod keeps in host memory as of the last `commit()` and restores on
    every rank when a peer is lost: `variables` (name -> tf.Variable: weights, optimizer slots,
    step, input position) and the Python values given as keyword attributes. `sync()` (after a
    host joins) broadcasts rank 0's variables and attributes to all.

    Written for TF2 eager: Horovod's TensorFlowState broadcasts variables in sync() only
    through a TF1 session."""

    def __init__(self, variables: dict, **attributes):
        self.variables = variables
        self._save_variables()
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **attributes)

    def _save_variables(self) -> None:
        self._committed = {name: v.numpy() for name, v in self.variables.items()}

    def save(self) -> None:
        self._save_variables()
        super().save()

    def restore(self) -> None:
        for name, value in self._committed.items():
            self.variables[name].assign(value)
        super().restore()

    def sync(self) -> None:
        broadcast_variables(self.variables.values())
        self._save_variables()
        super().sync()


def run_elastic(train_fn, state: ElasticState):
    """train_fn(state) under Horovod's elastic driver: when a host leaves or joins, every rank
    resets Horovod, the state is rolled back to its last commit (a lost peer) or synced from
    rank 0 (a new host), and train_fn runs again at the new world size. Returns its result."""

    # A joining host's ranks import TensorFlow before they reach the rendezvous that the
    # others wait in: on a busy node more than Gloo's default 30 s.
    os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", "300")

    def failures_as_horovod_errors(state):
        # Not hvd.elastic.run: it recognises a failed collective only by the plain ops' names
        # (not HorovodGroupedAllreduce) and returns None on any other UnknownError.
        try:
            return train_fn(state)
        except tf.errors.OpError as e:
            if is_peer_failure(e):
                raise HorovodInternalError(e) from e
            raise

    def reset():
        hvd.shutdown()
        hvd.init()

    return run_fn(failures_as_horovod_errors, reset)(state)


class Watchdog:
    """Exits the process (status 3) when `beat()` is not called for `timeout_s` seconds: a
    rank stuck in a collective because a peer died. Armed by the first beat (the first update
    traces the graph and can take long); does nothing for one rank or a timeout of 0. A context
    manager: leaving the block stops the watch, whatever the exit."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s if hvd.size() > 1 else 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._stop.set()

    def beat(self) -> None:
        self._last = time.monotonic()
        if self._thread is None and self.timeout_s > 0:
            self._thread = threading.Thread(target=self._watch, name="bert_tf-watchdog",
                                            daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.timeout_s / 4)):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                print(f"rank {hvd.rank()}: no training progress for {idle:.0f} s (limit "
                      f"{self.timeout_s:.0f} s); a peer rank probably died or hangs. Exiting so "
                      "the job fails instead of hanging; rerun the same command to resume from "
                      "the last checkpoint.", file=sys.stderr, flush=True)
                os._exit(3)
