"""Real two-process Horovod runs, under both controllers this build has."""

import sys
from pathlib import Path

import pytest
from conftest import REPO, run_command

pytestmark = pytest.mark.ngc  # also run by `make test-ngc` (TensorFlow 2.17)

VENV_BIN = Path(sys.executable).parent
WORKER = REPO / "tests" / "horovod_worker.py"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def _assert_both_ranks_ok(output: str) -> None:
    assert "rank 0/2 OK" in output and "rank 1/2 OK" in output, output


def test_gloo_allreduce_and_gradient_tape():
    proc = run_command(
        [VENV_BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
         sys.executable, WORKER],
        env=ONE_THREAD, timeout=300,
    )
    _assert_both_ranks_ok(proc.stdout + proc.stderr)


def test_mpi_allreduce_and_gradient_tape():
    env_flags = []
    for name in ONE_THREAD:
        env_flags += ["-x", name]
    proc = run_command(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *env_flags,
         sys.executable, WORKER],
        env=ONE_THREAD, timeout=300,
    )
    _assert_both_ranks_ok(proc.stdout + proc.stderr)


def test_horovod_build_has_tensorflow_gloo_and_mpi():
    import horovod.tensorflow as hvd

    assert hvd.gloo_built()
    assert hvd.mpi_built()
