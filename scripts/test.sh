#!/usr/bin/env bash
# Run the whole test suite: system packages (Mesa's lavapipe Vulkan driver), nox and uv in
# .venv-tools/, then every nox session on Python 3.11 (the sessions declare 3.11-3.13).
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -t anneal-ir    # extra arguments go to nox
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
exec nox --force-python 3.11 "$@"
