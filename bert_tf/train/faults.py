"""Faults of a single run that the loop survives: a stop signal and a contested --output_dir.

`StopSignals` turns SIGTERM/SIGINT (a scheduler's or spot instance's notice, Ctrl-C) into a
request the loop reads once per update, so the update in flight finishes and a checkpoint is
written. `claimed_output_dir` creates
the directory, holds its lock (bert_tf.data.output_dir.OutputDirLock) and removes the directory again if a failed run created it and
left it empty.
"""

import contextlib
import os
import signal

from bert_tf.data.output_dir import LOCK_FILE, OutputDirLock  # noqa: F401 (re-exported)
from bert_tf.train.report import check_writable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """While active, the first SIGTERM/SIGINT only records itself (`received` = its name); a
    second one exits at once (status 128 + signal), for a user who does not want to wait.
    Restores the previous handlers on exit. Only the main thread can install handlers."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.received is not None:
            raise SystemExit(128 + signum)
        self.received = signal.Signals(signum).name


@contextlib.contextmanager
def claimed_output_dir(directory: str, enabled: bool):
    """Rank 0 (`enabled`): creates `directory` if needed and holds its lock for the block;
    yields the lock's notes. If the block fails and this call created the directory, the
    directory is removed again when nothing else was written there."""
    if not enabled:
        yield []
        return
    existed = os.path.isdir(directory)
    check_writable(directory, "output_dir")
    try:
        with OutputDirLock(directory) as lock:
            yield lock.notes
    except BaseException:
        if not existed:
            with contextlib.suppress(OSError):  # not empty: keep what was written
                os.rmdir(directory)
        raise
