"""Faults of a single run that the loop survives: a stop signal and a contested --output_dir.

`StopSignals` turns SIGTERM/SIGINT (a scheduler's or spot instance's notice, Ctrl-C) into a
request the loop reads once per update, so the update in flight finishes and a checkpoint is
written. `OutputDirLock` keeps two runs out of one --output_dir; `claimed_output_dir` creates
the directory, holds the lock and removes the directory again if a failed run created it and
left it empty.
"""

import contextlib
import os
import signal
import socket

from bert_tf.train.report import OutputDirError, check_writable

LOCK_FILE = ".bert_tf.lock"
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


class OutputDirLock:
    """A lock file in `directory` naming this host and PID; taken over when its holder is a
    dead process on this host. `notes` collects what happened, for the run's log."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, LOCK_FILE)
        self.notes = []
        self._held = False

    def __enter__(self):
        holder = f"{socket.gethostname()} {os.getpid()}"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            self._take_over_if_stale(holder)
        else:
            with os.fdopen(fd, "w") as f:
                f.write(holder + "\n")
        self._held = True
        return self

    def __exit__(self, *exc_info):
        if self._held:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
            self._held = False

    def _take_over_if_stale(self, holder: str) -> None:
        host, pid = _read_holder(self.path)
        if host != socket.gethostname() or pid is None or _alive(pid):
            raise OutputDirError(
                f"--output_dir={os.path.dirname(self.path)} is in use by another run (process "
                f"{pid} on host {host}, lock file {self.path}); wait for it to end or choose "
                "another --output_dir. If that process is gone (e.g. on another host), delete "
                "the lock file")
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(holder + "\n")
        os.replace(tmp, self.path)
        self.notes.append(f"took over the stale lock {self.path} of process {pid} on this "
                          "host, which is no longer running")


def _read_holder(path: str) -> tuple:
    """(host, pid) from a lock file; pid None if unreadable."""
    try:
        with open(path) as f:
            host, pid = f.read().split()
        return host, int(pid)
    except (OSError, ValueError):
        return "unknown", None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


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
