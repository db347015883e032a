#!/usr/bin/env bash
# Builds a stand-in for NVIDIA's NGC TensorFlow 2 image (nvcr.io/nvidia/tensorflow:*-tf2-py3),
# which no registry here can serve, from Debian packages and PyPI only, and prints its name.
# Laid out like the NGC image our Dockerfile targets: system Python with TensorFlow at the NGC
# tag's version (PyPI's CPU build), Horovod built with MPI and Gloo, Open MPI, pip installing
# into the system site-packages, NGC's environment variables and /workspace. What it cannot
# have (CUDA, NCCL, NVIDIA's TensorFlow build, Python 3.12: see docs/running.md, "Docker") the
# Dockerfile's build arguments account for.
#
# Cached: the image is saved to $BERT_TF_CACHE/images (default ~/.cache/bert_tf) under a hash
# of its inputs, so a second build is a `podman load` (seconds). The Horovod wheel is the one
# install/horovod_wheel.sh builds for the venv of install/requirements-tf2.17.txt (the same
# Python 3.11 and TensorFlow, hence the same ABI); it is built once with that venv if missing.
#
# NGC_STANDIN_PINS (a pins file relative to the repository, default
# install/requirements-tf2.17.txt, NGC 24.12's TensorFlow) chooses the TensorFlow; .ci/run passes
# install/requirements.txt so the stand-in reuses the Horovod wheel `make test` built instead of
# building a second one (8-17 minutes on 2 cores), which keeps CI within its budget.
#
# Usage: build_ngc_standin.sh   (as root: debootstrap and chroot). Installs podman, runc and
# debootstrap if missing. PODMAN overrides the podman command; hosts like the CI machine need
# CONTAINERS_CONF=install/podman-containers.conf (make test-container sets it).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${BERT_TF_CACHE:-$HOME/.cache/bert_tf}"
PINS="$REPO/${NGC_STANDIN_PINS:-install/requirements-tf2.17.txt}"
[[ -f "$PINS" ]] || { echo "build_ngc_standin: NGC_STANDIN_PINS: no such file: $PINS" >&2; exit 1; }
HOROVOD_VERSION=0.28.1
PATCH="$REPO/install/horovod-$HOROVOD_VERSION-tf2.21.patch"
SUITE=bookworm  # Python 3.11, the only Python whose TF 2.17 + Horovod wheel we build
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
read -r -a PODMAN <<< "${PODMAN:-podman}"
TF_VERSION="$(sed -n 's/^tensorflow-cpu==//p' "$PINS")"
KEY="$(cat "$0" "$PINS" "$PATCH" | sha256sum | cut -c1-12)"
IMAGE="localhost/bert_tf-ngc-standin:tf$TF_VERSION-$KEY"
ARCHIVE="$CACHE/images/ngc-standin-tf$TF_VERSION-$KEY.tar"

log() { echo "build_ngc_standin: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap and chroot build the root filesystem)"
if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
    || ! command -v debootstrap >/dev/null; then
  log "installing Debian packages podman runc debootstrap"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends podman runc debootstrap >&2; } \
    || fail "apt-get install podman runc debootstrap"
fi

if "${PODMAN[@]}" image exists "$IMAGE"; then
  echo "$IMAGE"; exit 0
fi
if [[ -f "$ARCHIVE" ]]; then
  log "loading $ARCHIVE"
  "${PODMAN[@]}" load -q -i "$ARCHIVE" >&2 || fail "podman load -i $ARCHIVE"
  echo "$IMAGE"; exit 0
fi

if ! WHEEL="$(bash "$REPO/install/horovod_wheel.sh" --cached "$TF_VERSION")"; then
  # The venv of these pins builds it: setup_env.sh makes the venv if needed (and then the
  # wheel), horovod_wheel.sh builds the wheel if the venv was ready but the cache emptied.
  log "no cached Horovod wheel for TF $TF_VERSION: building it with install/setup_env.sh"
  SETUP=("$PINS" .venv-tf2.17) VENV="$REPO/.venv-tf2.17"  # the main pins: the main venv
  [[ "$PINS" -ef "$REPO/install/requirements.txt" ]] && SETUP=() VENV="$REPO/.venv"
  bash "$REPO/install/setup_env.sh" "${SETUP[@]}" >&2 || fail "install/setup_env.sh"
  WHEEL="$(bash "$REPO/install/horovod_wheel.sh" "$VENV")" || fail "install/horovod_wheel.sh"
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
# NGC's run-time pieces: Open MPI (with ssh, which its launcher wants even on one node) and the
# system Python with pip; `python` is python3 as in NGC.
log "debootstrap $SUITE (about a minute)"
debootstrap --variant=minbase \
  --include=python3,python3-pip,python-is-python3,openmpi-bin,openssh-client,ca-certificates \
  "$SUITE" "$ROOT" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
  || { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap $SUITE"; }

# Wheels are fetched on this host (its pip configuration and certificates), then installed
# offline into the system site-packages, where NGC's pip installs: Debian's "externally
# managed" marker goes, as NGC has none.
log "downloading TensorFlow $TF_VERSION and its dependencies"
mkdir -p "$ROOT/tmp/wheels"
cp "$WHEEL" "$ROOT/tmp/wheels/"
grep -E '^(tensorflow-cpu|numpy|keras)[=<>]' "$PINS" > "$ROOT/tmp/wheels/requirements.txt"
# Horovod's run-time dependencies, which NGC also ships.
printf '%s\n' cloudpickle psutil pyyaml packaging >> "$ROOT/tmp/wheels/requirements.txt"
# Wheels for bookworm's glibc 2.36, whatever manylinux tag each has: pip widens
# manylinux2014 to 2010 and 1 (libclang), not to the glibc 2.27+ tags of TF 2.21.
PLATFORMS=(--platform manylinux2014_x86_64)
for glibc in 27 28 31 34; do PLATFORMS+=(--platform "manylinux_2_${glibc}_x86_64"); done
"${PYTHON:-python3.11}" -m pip download -q --disable-pip-version-check --only-binary=:all: \
  --python-version 3.11 "${PLATFORMS[@]}" -d "$ROOT/tmp/wheels" \
  -r "$ROOT/tmp/wheels/requirements.txt" || fail "pip download (TensorFlow $TF_VERSION)"
rm -f "$ROOT"/usr/lib/python3*/EXTERNALLY-MANAGED
chroot "$ROOT" python3 -m pip install -q --no-cache-dir --no-index --find-links /tmp/wheels \
  -r /tmp/wheels/requirements.txt || fail "pip install in the root filesystem"
chroot "$ROOT" python3 -m pip install -q --no-cache-dir --no-deps "/tmp/wheels/$(basename "$WHEEL")" \
  || fail "installing $(basename "$WHEEL")"
rm -rf "$ROOT/tmp/wheels" "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
# A TLS-inspecting proxy's certificate authorities, so pip inside the image (our Dockerfile's
# build) reaches PyPI as it does on this host. None on an ordinary host.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null || fail "update-ca-certificates"
fi
mkdir -p "$ROOT/workspace"

log "importing the root filesystem as $IMAGE"
tar -C "$ROOT" -c . | "${PODMAN[@]}" import \
  --change "ENV TENSORFLOW_VERSION=$TF_VERSION" \
  --change "ENV PYTHONIOENCODING=utf-8" \
  --change "ENV LC_ALL=C.UTF-8" \
  --change "ENV PIP_BREAK_SYSTEM_PACKAGES=1" \
  --change "WORKDIR /workspace" \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >&2 || fail "podman import"
"${PODMAN[@]}" run --rm "$IMAGE" python -c \
  'import horovod.tensorflow as hvd; assert hvd.mpi_built() and hvd.gloo_built()' \
  || fail "TensorFlow or Horovod does not import in $IMAGE"
mkdir -p "$(dirname "$ARCHIVE")"
"${PODMAN[@]}" save -q -o "$ARCHIVE.tmp" "$IMAGE" && mv "$ARCHIVE.tmp" "$ARCHIVE" \
  || fail "podman save -o $ARCHIVE"
log "saved $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1), ${SECONDS}s)"
echo "$IMAGE"
