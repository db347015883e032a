"""The Dockerfile: hadolint-clean, on an NGC TensorFlow 2 image, and its
dependency filter keeps the image's TensorFlow/Horovod (no Docker engine runs
here, so the build itself is not tested)."""

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
    assert "TF_XLA_FLAGS=--tf_xla_enable_lazy_compilation=false" in DOCKERFILE
    assert '"tensorflow-text==${TF_MINOR}.*"' in DOCKERFILE
    assert "pip install --no-cache-dir --no-deps ." in DOCKERFILE
    assert "hvd.nccl_built()" in DOCKERFILE
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv/" in ignored and ".git/" in ignored


def test_requirement_filter_drops_the_cpu_wheels_and_keeps_the_rest():
    pattern = re.search(r"grep -vE '([^']+)'", DOCKERFILE).group(1)
    kept = subprocess.run(["grep", "-vE", pattern, REPO / "install" / "requirements.txt"],
                          capture_output=True, text=True, check=True).stdout
    names = {re.split(r"[=<>]", line)[0] for line in kept.splitlines()
             if line and not line.startswith("#")}
    assert not names & {"tensorflow-cpu", "tensorflow", "tensorflow-text", "horovod", "mpi4py"}
    assert {"absl-py", "blingfire", "tqdm", "matplotlib", "safetensors"} <= names
