"""Shared fixtures: where the shared test data lives, and how to run scripts
in a clean subprocess with the project's interpreter."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("BERT_TF_SHARED_DATA", REPO.parent / "shared" / "data"))


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
