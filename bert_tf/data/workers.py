"""Worker processes that die with their parent, and SIGTERM/SIGINT turned into an exception.

A data job interrupted by SIGTERM (SLURM, a spot instance, `kill`) or Ctrl-C must stop its
workers and remove its temporary files, and a parent killed by SIGKILL (which it cannot catch)
must not leave workers running to the end: each worker asks the kernel for SIGKILL when the
process that forked it dies (Linux prctl PR_SET_PDEATHSIG; multiprocessing has no such option).
"""

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived; a BaseException, like KeyboardInterrupt, so that no
    `except Exception` swallows it."""

    def __init__(self, signum):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def stopped_status(command, error: Interrupted, outcome) -> int:
    """Says on stderr that `command` stopped on `error` and what it left (`outcome`); returns
    128 + the signal, the status a shell gives a process the signal ended."""
    print(f"{command}: {error}: {outcome}; rerun the same command", file=sys.stderr)
    return 128 + error.signum


@contextlib.contextmanager
def interruptible():
    """Within the block SIGTERM and SIGINT raise Interrupted in the main thread."""
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def die_with_parent(parent_pid, initializer=None):
    """Worker initializer: killed when its parent dies; Ctrl-C left to the parent (it reaches
    the whole process group, and the parent stops the workers itself); SIGTERM kills at once
    (Pool.terminate sends it: a forked worker must not inherit the parent's `interruptible`
    handler, which a worker blocked on the task queue's lock never runs, hanging terminate)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # The parent may have died before prctl took effect (then we were reparented already).
    with contextlib.suppress(ProcessLookupError):
        os.kill(parent_pid, 0)
        if initializer is not None:
            initializer()
        return
    os._exit(1)


def pool(num_workers, initializer=None, method="fork", preload=()):
    """A multiprocessing pool of workers that die with this process. `method` "forkserver"
    forks them from a fresh server process that has imported `preload` once (a fork of a process
    that has run TensorFlow ops is not safe); the server exits when we do, and so do they."""
    context = multiprocessing.get_context(method)
    if method == "forkserver" and preload:
        context.set_forkserver_preload(list(preload))
    return context.Pool(num_workers, initializer=die_with_parent,
                        initargs=(os.getpid(), initializer))


def hide_gpus() -> None:
    """This process computes on the CPU only (data creation): no CUDA context on any GPU and no
    GPU memory reserved, which a TensorFlow process otherwise takes on every GPU of the node
    (one per mpirun rank). Before the process's first TensorFlow op: CUDA reads the variable
    when TensorFlow initialises it; its children (workers) inherit it."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if "tensorflow" not in sys.modules:
        return  # TensorFlow will start with the variable set: not imported for it (4 s of CPU
        # a process, e.g. before a command refuses its flags)
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")
