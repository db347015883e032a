#!/usr/bin/env bash
# Prints the path of a Horovod wheel built with TensorFlow, Gloo and MPI for the TensorFlow of
# VENV, building it first unless $BERT_TF_CACHE/wheels (default ~/.cache/bert_tf) holds one,
# keyed by Horovod's version, TensorFlow's and the patch. The one place the wheel is built:
# install/setup_env.sh installs it into a venv, install/build_ngc_standin.sh into its image
# (also when the venv is ready but the cache was emptied since).
#
# Usage: horovod_wheel.sh VENV [DIR]   DIR: a scratch directory, which may already hold
# horovod-VERSION.tar.gz (setup_env.sh downloads it while pip installs the requirements).
#        horovod_wheel.sh --cached TF_VERSION   only the cached wheel's path, or exit 1.
# Messages go to stderr; stdout is the wheel's path only.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: horovod_wheel.sh VENV [DIR]" >&2; exit 1; }
CACHE="${BERT_TF_CACHE:-$HOME/.cache/bert_tf}"
HOROVOD_VERSION=0.28.1
# Applied for every TensorFlow: TF 2.17 still ships the XLA headers the patch is
# about, but bert_tf never uses the file it leaves out, so both builds are one code.
PATCH="$REPO/install/horovod-$HOROVOD_VERSION-tf2.21.patch"

fail() { echo "horovod_wheel: FAILED: $1" >&2; exit 1; }
wheel_dir() {  # the cache key: Horovod, TensorFlow and the patch
  echo "$CACHE/wheels/horovod-$HOROVOD_VERSION-tf$1-$(sha256sum "$PATCH" | cut -c1-8)"
}

if [[ "$1" == --cached ]]; then
  ls "$(wheel_dir "${2:?usage: horovod_wheel.sh --cached TF_VERSION}")"/horovod-*.whl \
    2>/dev/null | head -1 | grep .
  exit
fi
VENV="$1"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
TF_VERSION="$("$VENV/bin/python" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)" \
  || fail "TensorFlow does not import in $VENV"
WHEEL_DIR="$(wheel_dir "$TF_VERSION")"
WHEEL="$(ls "$WHEEL_DIR"/horovod-*.whl 2>/dev/null | head -1 || true)"
if [[ -n "$WHEEL" ]]; then
  echo "horovod_wheel: reusing cached Horovod wheel $WHEEL" >&2
  echo "$WHEEL"; exit 0
fi

BUILD="${2:-}"
if [[ -z "$BUILD" ]]; then
  BUILD="$(mktemp -d)"
  trap 'rm -rf "$BUILD"' EXIT
fi
echo "horovod_wheel: building Horovod $HOROVOD_VERSION against TF $TF_VERSION (a few minutes, once)" >&2
SDIST="$BUILD/horovod-$HOROVOD_VERSION.tar.gz"
[[ -f "$SDIST" ]] || "${PIP[@]}" download --no-deps --no-binary :all: -d "$BUILD" \
  "horovod==$HOROVOD_VERSION" >&2 \
  || fail "download of the horovod==$HOROVOD_VERSION source distribution"
tar -xzf "$SDIST" -C "$BUILD"
patch -d "$BUILD/horovod-$HOROVOD_VERSION" -p1 < "$PATCH" >&2 || fail "applying $PATCH"
(
  cd "$BUILD/horovod-$HOROVOD_VERSION"
  export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    MAKEFLAGS="-j$(nproc)" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
  "${PIP[@]}" wheel --no-build-isolation --no-deps -w "$BUILD/dist" . > "$BUILD/build.log" 2>&1
) || { tail -40 "$BUILD/build.log" >&2; fail "Horovod build (full log was $BUILD/build.log)"; }
mkdir -p "$WHEEL_DIR.tmp" && cp "$BUILD"/dist/horovod-*.whl "$WHEEL_DIR.tmp/"
rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
WHEEL="$(ls "$WHEEL_DIR"/horovod-*.whl | head -1)"
echo "horovod_wheel: Horovod built (${SECONDS}s)" >&2
echo "$WHEEL"
