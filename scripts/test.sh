#!/usr/bin/env bash
# Run the whole test suite: system packages (Mesa's lavapipe Vulkan driver), nox and uv in
# .venv-tools/, then every nox session on Python 3.11 and the `every-python` ones (the wheels, every package's
# and the integration tests less the modules that import a PyTorch/transformers oracle) on 3.12 and 3.13, found
# on PATH or under pyenv.
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -t anneal-ir    # extra arguments go to nox (3.11 only)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || { echo "test: $PYTHON not found (set PYTHON=...)" >&2; exit 1; }
PYTHON="$PYTHON" bash scripts/system-deps.sh

# Mesa's Vulkan driver wants a runtime directory (and prints an error on every start without one).
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    export XDG_RUNTIME_DIR="/tmp/xdg-runtime-$(id -u)"
    mkdir -p -m 700 "$XDG_RUNTIME_DIR"
fi
# In CI a missing WebGPU adapter fails the WebGPU tests instead of skipping them.
if [ -n "${CI:-}" ]; then
    export ANNEAL_EXPECT_ADAPTER="${ANNEAL_EXPECT_ADAPTER:-1}"
    export ANNEAL_EXPECT_MPI="${ANNEAL_EXPECT_MPI:-1}"  # and a missing MPI fails the data-parallel tests
fi

TOOLS=.venv-tools
if [ ! -x "$TOOLS/bin/nox" ]; then
    "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q "nox>=2025.2.9"
    # uv is optional: nox falls back to virtualenv + pip without it (slower).
    "$TOOLS/bin/python" -m pip install -q uv || echo "test: uv unavailable, nox uses virtualenv" >&2
fi
export PATH="$PWD/$TOOLS/bin:$PATH"  # so nox finds uv
if [ $# -gt 0 ]; then
    exec nox --force-python 3.11 "$@"
fi

# python3.X on PATH when it runs (pyenv's shim for a version that is not selected is on PATH but
# exits 127), else pyenv's newest 3.X.
find_python() {
    local candidate
    candidate="$(command -v "python$1" || true)"
    if [ -n "$candidate" ] && "$candidate" -c "" 2>/dev/null; then
        echo "$candidate"
        return
    fi
    local root
    root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
    ls -d "$root"/versions/"$1".*/bin 2>/dev/null | sort -V | tail -1 | sed "s|\$|/python$1|"
}
for version in 3.12 3.13; do
    found="$(find_python "$version" || true)"
    if [ -z "$found" ] || [ ! -x "$found" ]; then
        echo "test: Python $version not found on PATH or under pyenv; install it (pyenv install $version)" >&2
        exit 1
    fi
    mkdir -p "$TOOLS/pythons"
    ln -sf "$found" "$TOOLS/pythons/python$version"  # only this name: pyenv's bin also holds a python3
done
export PATH="$PWD/$TOOLS/pythons:$PATH"
export UV_PYTHON_DOWNLOADS=never  # no download host is reachable: a missing Python fails at once
nox --force-python 3.11
for version in 3.12 3.13; do
    nox --force-python "$version" -t every-python
done
