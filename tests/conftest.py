"""Shared fixtures: where the shared test data lives, how to run scripts in a clean
subprocess with the project's interpreter, and how tests share what is costly to make
(built_once) when pytest-xdist runs them in parallel (tests/README.md, "Speed")."""

import contextlib
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BERT_TF_SHARED_DATA", REPO.parent / "shared" / "data"))
ONE_THREAD = {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def bench_module(name):
    """A bench/ script imported as a module (its main() not run), with bench/ on sys.path
    while it loads, for the siblings it imports (common, rounds)."""
    bench = str(REPO / "bench")
    sys.path.insert(0, bench)
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(bench)


def pytest_configure(config):
    # Under pytest-xdist (`make test`) each worker has about one core of its own: TensorFlow's
    # default pools (a thread per core, twice over) in every worker would oversubscribe them.
    # Set before any test imports TensorFlow, which reads these when it starts; an explicit
    # setting in the environment wins.
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        for name, value in ONE_THREAD.items():
            os.environ.setdefault(name, value)


def built_once(tmp_path_factory, name, build) -> Path:
    """The directory `name`, filled by build(directory) once per test run: a session fixture of
    one module imported by another, and every pytest-xdist worker, get the same directory (a
    worker that asks while another builds it waits). For records and models that several
    tests read and none changes."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    directory = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / ".complete").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            (directory / ".complete").touch()
    return directory


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared test data not found at {SHARED_DATA}; set BERT_TF_SHARED_DATA")
    return SHARED_DATA


def run_command(args, *, env=None, timeout=600, cwd=REPO, check=True):
    """Runs a command, returning CompletedProcess; on failure the message
    carries its output so a failed multi-process test explains itself."""
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env.update(env or {})
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(map(str, args))}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


PYTHON = sys.executable


@contextlib.contextmanager
def mounted_tmpfs(directory, size="16m"):
    """`directory` as a mount point of its own (skips where mounting is not allowed)."""
    directory.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)
