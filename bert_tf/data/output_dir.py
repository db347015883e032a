"""The one place that says what a command may do with the directory it writes, checked before
any work: a directory (not a file), writable (on a read-only mount too), empty when the command
would replace what is there, not another job's when it replaces all of it, and not in use by a
second run at the same time; and how a command replaces its earlier output there without
leaving a partial or stale one, or touching other files (staged inside the directory, so that
every move is a rename on one file system, a mount point included).

    check_output_dir(config.output_dir, "output_dir")   # before any computation
    with OutputDirLock(config.output_dir), replace_files_in(config.output_dir,
                                                            REPORT_FILES) as staging:
        write_report(staging)
"""

import contextlib
import errno
import fnmatch
import os
import shutil
import socket
import tempfile

from bert_tf.data import workers
from bert_tf.data.files import OutputDirError

LOCK_FILE = ".bert_tf.lock"
# Names this package keeps in an output directory: the lock, the owner mark, staging dirs.
OWN_PREFIX = ".bert_tf"
OWNER_FILE = ".bert_tf-owner"
# Write failures that mean "no room": a full disk, a quota, a file-size limit.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def check_new_output_dir(directory, flag, holds="files"):
    """Refuses an output directory that already holds files: the command would replace them
    (e.g. another run's checkpoint). A missing or empty directory (or one holding only the
    lock of the run that checks) is fine."""
    entries = [e for e in _entries(directory, flag) if not e.startswith(OWN_PREFIX)]
    if entries:
        raise OutputDirError(f"--{flag}={directory} is not empty (it holds {_some(entries)}); "
                             f"writing {holds} there would replace them: choose a new or empty "
                             "directory")


def check_output_dir(directory, flag, command=None, *, new=None, create=False):
    """The one up-front check of a command's output directory, before any computation.

    Args:
      directory: the directory the command writes.
      flag: its flag name, for the messages (--flag=directory).
      command: for a command that replaces the whole directory (the demo): the directory
        must be missing, empty, or marked by `mark_as_owned(directory, command)` in an
        earlier run. Without it, the command replaces only its own files (replace_files_in)
        and leaves others there.
      new: what the command writes there (e.g. "the converted model"), for a command that
        must not mix its files with others': the directory must be missing or empty
        (check_new_output_dir).
      create: make the directory (for a command that writes or locks it directly). Without
        it nothing is created: a run refused later leaves no empty directory behind.

    Returns:
      The absolute path of the directory.

    Raises:
      OutputDirError: it is a file, holds files it must not (another job's work, which would
        be lost or mixed in), or cannot be created or written.
    """
    directory = os.path.abspath(directory)
    if new is not None:
        check_new_output_dir(directory, flag, new)
    entries = [e for e in _entries(directory, flag) if not e.startswith(OWN_PREFIX)]
    if command is not None and entries and _owner(directory) != command:
        raise OutputDirError(f"--{flag}={directory} holds files not made by an earlier "
                             f"{command} run ({_some(entries)}); {command} replaces the whole "
                             "directory: choose a new or empty one")
    _check_creatable(directory, flag)
    if create:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise OutputDirError(f"--{flag}={directory} cannot be created ({e.strerror}); "
                                 "choose a directory you can write to") from None
    return directory


def _check_creatable(directory, flag) -> None:
    """Proves a file can be made in `directory`, or in its nearest existing ancestor when it
    does not exist yet (a read-only mount, a path under a file)."""
    existing = directory
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputDirError(f"--{flag}={directory} is not writable ({existing} is a file); "
                             "choose a directory you can write to")
    try:
        # Permissions say too little: root passes them, a read-only mount does not.
        with tempfile.NamedTemporaryFile(dir=existing, prefix=f"{OWN_PREFIX}-write-test-"):
            pass
    except OSError as e:
        raise OutputDirError(f"--{flag}={directory} is not writable ({existing}: {e.strerror})"
                             "; choose a directory you can write to") from None


def mark_as_owned(directory, command) -> None:
    """Marks `directory` (which `command` made) as all its own, for check_output_dir."""
    with open(os.path.join(directory, OWNER_FILE), "w", encoding="utf-8") as f:
        f.write(command + "\n")


def _some(entries) -> str:
    return ", ".join(entries[:3]) + (" ..." if len(entries) > 3 else "")


def _owner(directory):
    try:
        with open(os.path.join(directory, OWNER_FILE), encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _entries(directory, flag) -> list:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        if not os.path.isfile(directory):  # a path under a file: _check_creatable says so
            return []
        raise OutputDirError(f"--{flag}={directory} is a file, not a directory") from None


@contextlib.contextmanager
def replace_files_in(directory, owned=()):
    """Yields an empty staging directory inside `directory`; when the block succeeds, moves
    every file written there into `directory`, then removes the files matching `owned` (glob
    patterns) that this run did not write: an earlier run's, which would contradict this one.
    A failure leaves `directory` as it was (and removes it if this call created it). Staging
    inside the directory keeps each move a rename on one file system (a staging directory
    beside a mount point would not be).
    """
    created = not os.path.exists(directory)
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f"{OWN_PREFIX}-staging-", dir=directory)
    try:
        try:
            yield staging
        except BaseException:
            if created:
                shutil.rmtree(directory, ignore_errors=True)
            raise
        written = set()
        for root, _, files in os.walk(staging):
            relative_dir = os.path.relpath(root, staging)
            os.makedirs(os.path.join(directory, relative_dir), exist_ok=True)
            for name in files:
                relative = os.path.normpath(os.path.join(relative_dir, name))
                os.replace(os.path.join(root, name), os.path.join(directory, relative))
                written.add(relative)
        _remove_stale(directory, owned, written)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale(directory, owned, written) -> None:
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(OWN_PREFIX)]
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), directory)
            if relative not in written and any(fnmatch.fnmatch(relative, p) for p in owned):
                os.remove(os.path.join(directory, relative))


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
def new_files_in(directory, flag, holds):
    """Yields a staging directory for a command that writes a new set of files into
    `directory` (an export, a conversion): its files move up into `directory` when the block
    succeeds, and nothing is left when it fails (replace_files_in), is stopped by SIGTERM or
    Ctrl-C (workers.Interrupted reaches the caller) or runs out of room (an OutputDirError).

    The directory is locked for the block (OutputDirLock) and checked empty under the lock,
    so that two runs at once cannot both pass the check and mix their files: the second is
    refused and leaves the first's directory alone. Staging directories of a killed run
    (SIGKILL cannot be caught) are removed under the lock. A non-empty or unwritable
    `directory` is refused before anything is written (check_output_dir).
    """
    directory = check_output_dir(directory, flag, new=holds)
    created = not os.path.exists(directory)
    os.makedirs(directory, exist_ok=True)
    with OutputDirLock(directory), workers.interruptible():
        try:
            check_new_output_dir(directory, flag, holds)
            for name in os.listdir(directory):
                if name.startswith(f"{OWN_PREFIX}-staging-"):
                    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            with replace_files_in(directory) as staging:
                yield staging
        except BaseException as e:
            if created:
                shutil.rmtree(directory, ignore_errors=True)
            if isinstance(e, Exception) and is_out_of_space(e):
                raise OutputDirError(f"--{flag}={directory}: no room to write {holds} ({e}); "
                                     "nothing was left there: free some space and rerun") from None
            raise


def is_out_of_space(error) -> bool:
    """A write that failed for want of room (an OSError, or TensorFlow's error for one)."""
    if isinstance(error, OSError):
        return error.errno in NO_SPACE
    return any(os.strerror(code) in str(error) for code in NO_SPACE)
