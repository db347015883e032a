#!/usr/bin/env bash
# Creates the benchmark-only peer venvs OUTSIDE the repo, idempotently (all, or only those
# named as arguments: `bench/setup_peers.sh hf`):
#   $BENCH_VENVS/hf           torch==2.13.0 (CPU build) + transformers + accelerate (Trainer)
#   $BENCH_VENVS/modelgarden  tf-models-official==2.20.0 (TF Model Garden)
#   $BENCH_VENVS/wikiextractor wikiextractor==3.1.0 (bench/wikipedia.py)
# A finished venv is marked by .bench-installed; anything without it is rebuilt.
# Each venv is created under a lock, because the data benchmark creates the
# Model Garden venv too and both may run at once.
set -euo pipefail

BENCH_VENVS="${BENCH_VENVS:-$HOME/.cache/bert_tf/bench-venvs}"
PYTHON="${PYTHON:-python3.11}"
mkdir -p "$BENCH_VENVS"

make_venv() {  # make_venv NAME CHECK_MODULE PIP_ARGS...  (each PIP_ARGS: one `pip install`)
  local name="$1" module="$2"; shift 2
  local venv="$BENCH_VENVS/$name"
  (
    flock 9
    if [[ -f "$venv/.bench-installed" ]]; then
      exit 0
    fi
    # Made by someone else (the data benchmark) without our mark: keep it if it works.
    if "$venv/bin/python" -c "import $module" 2>/dev/null; then
      touch "$venv/.bench-installed"
      exit 0
    fi
    echo "setup_peers: creating $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    local install
    for install in "$@"; do
      # shellcheck disable=SC2086  # each entry is a list of pip arguments
      "$venv/bin/python" -m pip install --disable-pip-version-check -q $install \
        || { echo "setup_peers: FAILED: pip install $install into $venv" >&2; exit 1; }
    done
    "$venv/bin/python" -c "import $module" \
      || { echo "setup_peers: FAILED: $venv installed but 'import $module' fails" >&2; exit 1; }
    touch "$venv/.bench-installed"
  ) 9>"$BENCH_VENVS/.$name.lock"
}

# torch first and pinned: 2.13.0 is the CPU build on this machine's disk; a
# plain `pip install transformers` then keeps it instead of fetching another.
wanted() { [[ $# -eq 0 ]] || [[ " $* " == *" $name "* ]]; }
name=hf; if wanted "$@"; then make_venv hf transformers "torch==2.13.0" "transformers accelerate==1.16.0"; fi
name=modelgarden; if wanted "$@"; then make_venv modelgarden official "tf-models-official==2.20.0"; fi
name=wikiextractor; if wanted "$@"; then make_venv wikiextractor wikiextractor "wikiextractor==3.1.0"; fi
echo "setup_peers: ready ($BENCH_VENVS)"
