"""What every command checks of the directory it writes: not another job's files, and not
in use by a second run at the same time."""

import contextlib
import os
import socket

from bert_tf.data.files import OutputDirError

LOCK_FILE = ".bert_tf.lock"


def check_new_output_dir(directory, flag, holds="files"):
    """Refuses an output directory that already holds files: the command would replace them
    (e.g. another run's checkpoint). A missing or empty directory (or one holding only the
    lock of the run that checks) is fine."""
    try:
        entries = sorted(set(os.listdir(directory)) - {LOCK_FILE})
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise OutputDirError(f"--{flag}={directory} is a file, not a directory") from None
    if entries:
        shown = ", ".join(entries[:3]) + (" ..." if len(entries) > 3 else "")
        raise OutputDirError(f"--{flag}={directory} is not empty (it holds {shown}); writing "
                             f"{holds} there would replace them: choose a new or empty "
                             "directory")


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
