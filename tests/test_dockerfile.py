"""The Dockerfile: hadolint-clean, on an NGC TensorFlow 2 image, and its dependency filter
keeps the image's TensorFlow/Horovod. The build itself, on a CPU stand-in for the NGC image,
is tests/test_container.py (make test-container)."""

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, run_command

DOCKERFILE = (REPO / "Dockerfile").read_text()
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_hadolint_clean():
    proc = run_command([HADOLINT, REPO / "Dockerfile"], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_based_on_an_ngc_tensorflow2_image():
    match = re.search(r"^ARG BASE_IMAGE=nvcr\.io/nvidia/tensorflow:(\d\d\.\d\d)-tf2-py3$",
                      DOCKERFILE, re.M)
    assert match, "BASE_IMAGE must be an NGC TensorFlow 2 tag"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", DOCKERFILE, re.M)


def test_nvidia_bert_environment_and_package_install():
    assert "TF_DEVICE_MIN_SYS_MEMORY_IN_MB=2048" in DOCKERFILE
    # Lazy compilation concerns auto-clustering; bert_tf uses jit_compile.
    assert "ENV TF_XLA_FLAGS" not in DOCKERFILE and "    TF_XLA_FLAGS" not in DOCKERFILE
    assert "pip install --no-cache-dir --no-deps ." in DOCKERFILE
    # NCCL is required unless a CPU base says otherwise.
    assert re.search(r"^ARG REQUIRE_NCCL=1$", DOCKERFILE, re.M)
    assert "hvd.nccl_built() or '${REQUIRE_NCCL}' == '0'" in DOCKERFILE
    ignored = (REPO / ".dockerignore").read_text().split()
    # The venvs (a link in a worktree, .venv-tf2.17 of make test-ngc) stay out of the context.
    assert {".venv", ".venv-*", ".git/"} <= set(ignored)


def test_requirement_filter_drops_the_cpu_wheels_and_keeps_the_rest():
    pattern = re.search(r"grep -vE '([^']+)'", DOCKERFILE).group(1)
    kept = subprocess.run(["grep", "-vE", pattern, REPO / "install" / "requirements.txt"],
                          capture_output=True, text=True, check=True).stdout
    names = {re.split(r"[=<>]", line)[0] for line in kept.splitlines()
             if line and not line.startswith("#")}
    assert not names & {"tensorflow-cpu", "tensorflow", "tensorflow-text", "horovod"}
    # mpi4py: `mpirun create_pretraining_data.py` needs it; tokenizers: the tokenizer.
    assert {"absl-py", "blingfire", "tqdm", "matplotlib", "safetensors", "mpi4py",
            "tokenizers"} <= names
